"""The verifier's typed outcome: what stage was reached, the verdict, diagnostics and figures.

Every verification ends in one `VerifyResult` (never `None`, never a traceback). The language
server turns it into diagnostics, hover text and code lenses; the RL reward and the benchmark
read the same record (`reward()` / `is_fast()` below), so there is one truth per metric.

Units are in the field names (`runtime_ms`, `wall_s`). Figures keep full precision; rounding
is for display only. The record is JSON-serialisable with `to_json()` / `from_json()`.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from dataclasses import dataclass, field
from typing import Any


class Stage(str, enum.Enum):
    """Pipeline stages, in order. A result records the last stage it entered."""

    PARSE = "parse"
    STATIC = "static"
    COMPILE = "compile"
    LOAD = "load"
    CORRECTNESS = "correctness"
    TIMING = "timing"


class Verdict(str, enum.Enum):
    """The CLI's `verdict` values (docs/verifier.md, docs/diagnostics.md)."""

    CORRECT = "correct"
    INCORRECT = "incorrect"
    COMPILE_ERROR = "compile_error"
    STATIC_VIOLATION = "static_violation"
    RUNTIME_ERROR = "runtime_error"
    TIMEOUT = "timeout"
    CRASH = "crash"
    COMPILED = "compiled"  # compile-only run that compiled cleanly
    INVALID_INPUT = "invalid_input"  # the file is not a usable candidate (parse stage)
    CHECKED = "checked"  # quick_check found no error (parse + static + fast compile diagnostics only)


class Severity(str, enum.Enum):
    ERROR = "error"
    WARNING = "warning"
    INFORMATION = "information"
    HINT = "hint"


@dataclass(frozen=True, slots=True)
class Location:
    """A place in a file. `line`/`column` are 1-based; `end_*` are inclusive-exclusive like LSP ranges."""

    path: str
    line: int
    column: int = 1
    end_line: int | None = None
    end_column: int | None = None


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One finding, located in the file the user edits (the `.py` document, not a generated `.cu`).

    `code` is stable (documented in docs/diagnostics.md); `stage` says which stage produced it.
    """

    severity: Severity
    message: str
    code: str
    stage: Stage
    location: Location | None = None
    related: tuple[tuple[Location, str], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        loc = self.location
        return {
            "severity": self.severity.value,
            "message": self.message,
            "code": self.code,
            "stage": self.stage.value,
            "path": loc.path if loc else None,
            "line": loc.line if loc else None,
            "column": loc.column if loc else None,
            "end_line": loc.end_line if loc else None,
            "end_column": loc.end_column if loc else None,
            "related": [
                {"path": r.path, "line": r.line, "column": r.column, "message": m} for r, m in self.related
            ],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Diagnostic:
        loc = None
        if d.get("path") is not None and d.get("line") is not None:
            loc = Location(d["path"], d["line"], d.get("column") or 1, d.get("end_line"), d.get("end_column"))
        related = tuple(
            (Location(r["path"], r["line"], r.get("column") or 1), r["message"]) for r in d.get("related", [])
        )
        return cls(Severity(d["severity"]), d["message"], d["code"], Stage(d["stage"]), loc, related)


@dataclass(frozen=True, slots=True)
class Timing:
    """Runtime statistics of one callable over `num_trials` timed calls, in milliseconds."""

    median_ms: float
    min_ms: float
    max_ms: float
    q1_ms: float
    q3_ms: float
    num_trials: int


@dataclass(frozen=True, slots=True)
class VerifyResult:
    """Outcome of one verification. `stage` is the last stage entered; `verdict` what it concluded."""

    verdict: Verdict
    stage: Stage
    path: str
    diagnostics: tuple[Diagnostic, ...] = ()
    source_sha256: str = ""
    candidate: Timing | None = None
    reference: Timing | None = None
    speedup: float | None = None
    speedup_min: float | None = None  # pessimistic: reference q1 / candidate q3
    speedup_max: float | None = None
    is_suspicious: bool = False  # speedup above 10x or above a speed-of-light bound
    l2_policy: str = ""  # how L2 was treated between timed calls: "warm" or "cold" ("" when not timed)
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    num_correct_trials: int = 0
    num_trials: int = 0
    compile_only: bool = False
    gpu_name: str | None = None
    versions: dict[str, str] = field(default_factory=dict)
    stage_wall_s: dict[str, float] = field(default_factory=dict)
    error: str | None = None  # exception text or stderr tail of a crashed child
    measured_at: str | None = None  # ISO-8601 UTC

    @property
    def runtime_ms(self) -> float | None:
        return self.candidate.median_ms if self.candidate else None

    @property
    def reference_runtime_ms(self) -> float | None:
        return self.reference.median_ms if self.reference else None

    @property
    def is_correct(self) -> bool:
        return self.verdict is Verdict.CORRECT

    def is_fast(self, p: float) -> bool:
        """KernelBench fast_p for this problem: correct and the speedup clears `p` beyond its spread."""
        if not self.is_correct or self.speedup is None or self.is_suspicious:
            return False
        lower = self.speedup_min if self.speedup_min is not None else self.speedup
        return lower > p

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, enum.Enum):
                v = v.value
            elif f.name == "diagnostics":
                v = [x.to_dict() for x in v]
            elif isinstance(v, Timing):
                v = dataclasses.asdict(v)
            d[f.name] = v
        d["runtime_ms"] = self.runtime_ms
        d["reference_runtime_ms"] = self.reference_runtime_ms
        return d

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> VerifyResult:
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        kw["verdict"] = Verdict(kw["verdict"])
        kw["stage"] = Stage(kw["stage"])
        kw["diagnostics"] = tuple(Diagnostic.from_dict(x) for x in kw.get("diagnostics", []))
        for key in ("candidate", "reference"):
            if kw.get(key) is not None:
                kw[key] = Timing(**kw[key])
        return cls(**kw)

    @classmethod
    def from_json(cls, text: str) -> VerifyResult:
        return cls.from_dict(json.loads(text))
