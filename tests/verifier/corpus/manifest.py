"""The adversarial corpus's manifest: every candidate file declares what it must get.

Each candidate's header holds one machine-readable line and one line of prose:

    # corpus: kind=<honest|static|warning|dynamic|hostile> verdict=<verdict> [codes=a,b]
    # exploit: <what it does and where the exploit was reported>

- `honest`  — must pass clean (no static error, no static warning); on a GPU: `correct`.
- `static`  — `verdict` is `static_violation`; every code in `codes` is among its static errors.
- `warning` — no static error; every code in `codes` is among its static warnings.
- `dynamic` — passes the static checks; on a GPU the verdict is `verdict` (or at least not
  `correct`) and every code in `codes` is among its diagnostics.
- `hostile` — must end in `verdict` within its timeout, and the pool must keep serving.

Files under `references/` are KernelBench references, not candidates.

`record()` collects outcomes of the `gpu` tests into one JSON-lines file for docs/benchmarks.md
(`bench/anticheat_summary.py` reads it): `$CUDICE_ANTICHEAT_REPORT`, else `$OUT/anticheat.jsonl`
when `$OUT` is set (bench/run_gpu.sh); otherwise nothing is written.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CORPUS_DIR = Path(__file__).resolve().parent
KINDS = ("honest", "static", "warning", "dynamic", "hostile")
_HEADER = re.compile(r"^# corpus: (?P<fields>.+)$", re.MULTILINE)
_EXPLOIT = re.compile(r"^# exploit: (?P<text>.+)$", re.MULTILINE)


@dataclass(frozen=True)
class Case:
    path: Path
    kind: str
    verdict: str
    codes: tuple[str, ...]
    exploit: str

    @property
    def name(self) -> str:
        return self.path.stem


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
    return Case(path, kind, fields["verdict"], codes, e.group("text") if e else "")


def load_corpus(*kinds: str) -> list[Case]:
    """Every candidate of the corpus (of the given kinds), sorted by file name."""
    cases = [parse_case(p) for p in sorted(CORPUS_DIR.glob("*.py")) if p.name != "manifest.py"]
    return [c for c in cases if not kinds or c.kind in kinds]


def record(kind: str, name: str, result: Any, expected: set[str], codes: set[str] | None = None) -> None:
    path = os.environ.get("CUDICE_ANTICHEAT_REPORT") or (
        str(Path(os.environ["OUT"]) / "anticheat.jsonl") if os.environ.get("OUT") else "")
    if not path:
        return
    found = sorted({d.code for d in result.diagnostics})
    row = {"kind": kind, "case": name, "verdict": result.verdict.value, "expected": sorted(expected),
           "expected_codes": sorted(codes or ()), "codes": found, "error": (result.error or "")[-300:],
           "wall_s": round(sum(result.stage_wall_s.values()), 2), "speedup": result.speedup}
    with Path(path).open("a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")
