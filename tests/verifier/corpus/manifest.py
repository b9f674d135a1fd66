"""The adversarial corpus's manifest: every candidate file declares what it must get.

Each candidate's header holds one machine-readable line and one line of prose:

    # corpus: kind=<honest|static|warning|dynamic|hostile|runtime> verdict=<v> [codes=a,b] [max_speedup=x]
    # exploit: <what it does and where the exploit was reported>

- `honest`  — must pass clean (no static error, no static warning); on a GPU: `correct`.
- `static`  — `verdict` is `static_violation`; every code in `codes` is among its static errors.
- `warning` — no static error; every code in `codes` is among its static warnings.
- `dynamic` — passes the static checks; on a GPU the verdict is `verdict` (or at least not
  `correct`) and every code in `codes` is among its diagnostics.
- `hostile` — must end in `verdict` within its timeout, and the pool must keep serving.
- `runtime` — an attack on the judge's process, result channel or dispatcher, run past the static
  stage by the judge's tests: the run must end in `verdict` with `codes`. The static stage may
  reject it as well (it is not required to). Most are plain-PyTorch stand-ins for a kernel, so the
  CPU tests run them through the judge on the CPU; `# runtime-device: gpu` marks those needing a GPU.

`verdict=not_correct` (`NOT_CORRECT`) accepts every verdict but `correct`: an attack that any sound
judge must reject, by whichever check comes first. Its `Case.verdict` is an `AnyButCorrect`, a
string equal to every verdict but `correct`, so a test comparing `result.verdict.value ==
case.verdict` accepts any rejection; `Case.accepts` says the same without the operator.

`max_speedup=x` (attacks whose mechanism only ever aimed at a forged speedup: a skipped
synchronisation, a cache that fresh inputs never hit) also accepts `correct` when the attack
gained nothing (`Case.gained_nothing`): a counted speed-up below `x` (set between the kernel's
honest speed and what the attack would forge), a time flagged suspicious, or one too short for
the clock (`timing.unresolved`, no speedup at all).

Files under `references/` are KernelBench references, not candidates.

`record()` collects outcomes of the `gpu` tests into one JSON-lines file for docs/benchmarks.md
(`bench/anticheat_summary.py` reads it): `$CUDICE_ANTICHEAT_REPORT`, else `$OUT/anticheat.jsonl`
when `$OUT` is set (bench/run_gpu.sh); otherwise nothing is written.
"""

from __future__ import annotations

import functools
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CORPUS_DIR = Path(__file__).resolve().parent
KINDS = ("honest", "static", "warning", "dynamic", "hostile", "runtime")
_HEADER = re.compile(r"^# corpus: (?P<fields>.+)$", re.MULTILINE)
_EXPLOIT = re.compile(r"^# exploit: (?P<text>.+)$", re.MULTILINE)
NOT_CORRECT = "not_correct"


class AnyButCorrect(str):
    """The verdict `not_correct`: equal to every verdict but `correct` (and to itself)."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and str(other) != "correct"

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = str.__hash__


@dataclass(frozen=True)
class Case:
    path: Path
    kind: str
    verdict: str
    codes: tuple[str, ...]
    exploit: str
    max_speedup: float | None = None

    @property
    def name(self) -> str:
        return self.path.stem

    def accepts(self, verdict: str) -> bool:
        """Whether a run ending in `verdict` meets this case's declared verdict (`a|b` lists several)."""
        return accepts(self.verdict, verdict)

    def gained_nothing(self, result: Any) -> bool:
        """Whether a `correct` run of a speed-only attack (one with `max_speedup`) shows no forged
        speed-up: its time within the clock's noise (no speedup, `timing.unresolved`), flagged
        suspicious, or a counted speed-up below the cap. False for a case without a cap and for every
        verdict but `correct`: those are judged by `accepts`."""
        if self.max_speedup is None or result.verdict.value != "correct":
            return False
        if result.speedup is None:
            return any(d.code == "timing.unresolved" for d in result.diagnostics)
        return bool(result.is_suspicious) or result.speedup < self.max_speedup


def accepts(declared: str, verdict: str) -> bool:
    """Whether a run ending in `verdict` meets a declared verdict: `a|b` lists several, and
    `not_correct` (an `AnyButCorrect`) is any verdict but `correct`."""
    if isinstance(declared, AnyButCorrect):
        return verdict != "correct"
    return verdict in declared.split("|")


def parse_case(path: Path) -> Case:
    text = path.read_text(encoding="utf-8")
    m = _HEADER.search(text)
    if m is None:
        raise ValueError(f"{path}: no '# corpus: kind=... verdict=...' header line")
    fields = dict(item.split("=", 1) for item in m.group("fields").split())
    kind = fields.get("kind", "")
    if kind not in KINDS or "verdict" not in fields:
        raise ValueError(f"{path}: header needs kind in {KINDS} and a verdict, got {fields}")
    codes = tuple(c for c in fields.get("codes", "").split(",") if c)
    e = _EXPLOIT.search(text)
    verdict = AnyButCorrect(NOT_CORRECT) if fields["verdict"] == NOT_CORRECT else fields["verdict"]
    cap = fields.get("max_speedup")
    return Case(path, kind, verdict, codes, e.group("text") if e else "", float(cap) if cap else None)


def load_corpus(*kinds: str) -> list[Case]:
    """Every candidate of the corpus (of the given kinds), sorted by file name."""
    cases = [parse_case(p) for p in sorted(CORPUS_DIR.glob("*.py")) if p.name != "manifest.py"]
    return [c for c in cases if not kinds or c.kind in kinds]


def record(kind: str, name: str, result: Any, expected: set[str], codes: set[str] | None = None) -> None:
    path = os.environ.get("CUDICE_ANTICHEAT_REPORT") or (
        str(Path(os.environ["OUT"]) / "anticheat.jsonl") if os.environ.get("OUT") else ""
    )
    if not path:
        return
    found = sorted({d.code for d in result.diagnostics})
    row = {
        "kind": kind,
        "case": name,
        "verdict": result.verdict.value,
        "expected": sorted(expected),
        "expected_codes": sorted(codes or ()),
        "codes": found,
        "error": (result.error or "")[-300:],
        "wall_s": round(sum(result.stage_wall_s.values()), 2),
        "speedup": result.speedup,
    }
    with Path(path).open("a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")


GOOD_AFTER_HOSTILE = "honest_relu_empty_like"


@functools.cache
def gpu_corpus_results() -> dict[str, Any]:
    """Verify the dynamic, honest and hostile cases in ONE `VerifyPool` (their builds run in
    parallel: a GPU box is lent by the minute), then — after every hostile verdict is in — the
    same pool verifies a good kernel again (key `good_after_hostile`). Cached per test session;
    each outcome is `record()`ed. GPU only."""
    from cudice.verifier.config import VerifyConfig
    from cudice.verifier.pool import VerifyPool

    cases = load_corpus("dynamic", "honest", "hostile")
    normal = VerifyConfig(timeout_s=120.0, timing_num_trials=5, timing_warmup_ms=20.0)
    hostile = VerifyConfig(timeout_s=15.0, num_trials=2, timing_num_trials=5, timing_warmup_ms=20.0)
    with VerifyPool(normal, num_compile_workers=max(2, (os.cpu_count() or 4) // 2)) as pool:
        t0 = time.monotonic()
        futures = {
            c.name: pool.submit(c.path, key=c.name, config=hostile if c.kind == "hostile" else normal)
            for c in cases
        }
        results: dict[str, Any] = {name: f.result(timeout=900) for name, f in futures.items()}
        results["wall_s"] = time.monotonic() - t0
        good = next(c for c in cases if c.name == GOOD_AFTER_HOSTILE)
        results["good_after_hostile"] = pool.submit(good.path, key="good_after_hostile").result(timeout=600)
    for c in cases:
        expected = (
            set(c.verdict.split("|"))
            if c.kind == "hostile"
            else {"correct" if c.kind == "honest" else c.verdict}
        )
        record(c.kind, c.name, results[c.name], expected, set(c.codes))
    record("hostile", "good_after_hostile", results["good_after_hostile"], {"correct"})
    return results
