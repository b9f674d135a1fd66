"""Anti-cheat figures: static detection/false-positive rates and speed (any machine), and the
dynamic/hostile outcomes that the `gpu` corpus tests recorded (docs/anticheat.md §3).

Usage: python bench/anticheat_summary.py [--quick]
Reads `$CUDICE_ANTICHEAT_REPORT` or `$OUT/anticheat.jsonl` (written by
tests/verifier/run/test_dynamic_checks.py and test_hostile.py under `pytest -m gpu`, which
bench/run_gpu.sh runs first); prints a markdown table and one `RESULT` line.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "verifier"))

from corpus.manifest import load_corpus  # noqa: E402
from cudice.verifier.source.result import Severity  # noqa: E402
from cudice.verifier.static.checks import check_source, has_violation  # noqa: E402


def static_figures() -> dict[str, float]:
    exploits, clean = load_corpus("static"), load_corpus("honest", "warning", "dynamic")
    texts = {c.name: c.path.read_text() for c in exploits + clean}
    t0 = time.perf_counter()
    diags = {c.name: check_source(texts[c.name], str(c.path)) for c in exploits + clean}
    ms = (time.perf_counter() - t0) * 1000 / len(texts)
    caught = sum(
        has_violation(diags[c.name])
        and set(c.codes) <= {d.code for d in diags[c.name] if d.severity is Severity.ERROR}
        for c in exploits
    )
    flagged = sum(has_violation(diags[c.name]) for c in clean)
    return {
        "static_caught": caught,
        "static_total": len(exploits),
        "static_fp": flagged,
        "static_clean_total": len(clean),
        "static_ms_per_file": ms,
    }


def gpu_rows() -> list[dict[str, object]]:
    path = os.environ.get("CUDICE_ANTICHEAT_REPORT") or (
        str(Path(os.environ["OUT"]) / "anticheat.jsonl") if os.environ.get("OUT") else ""
    )
    if not path or not Path(path).is_file():
        return []
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def main() -> None:
    s = static_figures()
    print("| layer | figure |\n|---|---|")
    print(
        f"| static | detection {s['static_caught']}/{s['static_total']}, false positives "
        f"{s['static_fp']}/{s['static_clean_total']} (honest + warning + dynamic cases), "
        f"{s['static_ms_per_file']:.1f} ms per file |"
    )
    rows = gpu_rows()
    if not rows:
        print("| gpu | no recorded corpus run (run `pytest -m gpu tests/verifier` with $OUT set first) |")
        print(f"RESULT static {s['static_caught']}/{s['static_total']} fp {s['static_fp']}; gpu not run")
        return
    dyn = [r for r in rows if r["kind"] == "dynamic"]
    honest = [r for r in rows if r["kind"] == "honest"]
    hostile = [r for r in rows if r["kind"] == "hostile"]
    dyn_ok = sum(r["verdict"] != "correct" and set(r["expected_codes"]) <= set(r["codes"]) for r in dyn)
    fp = sum(r["verdict"] != "correct" for r in honest)
    typed = sum(r["verdict"] in r["expected"] for r in hostile)
    print(f"| dynamic (GPU) | detection {dyn_ok}/{len(dyn)} |")
    print(f"| honest (GPU) | false positives {fp}/{len(honest)} |")
    print(
        f"| hostile (GPU pool) | expected typed verdicts {typed}/{len(hostile)} "
        "(incl. the good kernel afterwards) |"
    )
    for r in rows:
        print(
            f"|  {r['kind']}/{r['case']} | {r['verdict']} (expected {'/'.join(r['expected'])}); "
            f"{', '.join(c for c in r['codes'] if c.startswith(('dynamic.', 'runtime.')))} |"
        )
    print(
        f"RESULT static {s['static_caught']}/{s['static_total']} fp {s['static_fp']}; "
        f"dynamic {dyn_ok}/{len(dyn)}; honest fp {fp}/{len(honest)}; hostile {typed}/{len(hostile)}"
    )


if __name__ == "__main__":
    main()
