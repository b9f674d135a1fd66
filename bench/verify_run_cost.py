"""Cost of the run stage of a `correct` verdict: a judge started cold against the pool's warm one.

`python bench/verify_run_cost.py --run-stage [--rounds 2] [--cases honest_relu_empty_like,...]`
(GPU only). Every honest corpus kernel is built once (the compile stage, not measured); then,
on the same candidates in one run, alternating per round, the parent's wall time of the run stage
(job out, verdict back) is measured for

- `cold` — `cudice.verifier.run.judge` started for the job (judge process + two runner
           processes in the boundary, torch and CUDA started from nothing);
- `warm` — `PersistentRunner` (run/warm.py): a fresh judge and runners per job, started and
           warmed up before the job arrives, as in the pool.

Prints one row per case and mode (median seconds) and `RESULT ratio warm/cold=<x>` (medians over
the cases). Default VerifyConfig (100 timed calls, 250 ms warm-up per implementation): the cost a
user or an RL rollout pays. (Until the older in-process judge left the verifier, this bench also
timed it; docs/benchmarks.md keeps those figures.)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "verifier"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run-stage", action="store_true", help="measure the run stage (the only mode)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument(
        "--cases",
        default="honest_relu_empty_like,honest_softmax_rows,honest_matmul_tiled",
        help="comma-separated honest corpus case names ('' for every honest case)",
    )
    ap.add_argument("--quick", action="store_true", help="one round, two cases")
    args = ap.parse_args()
    from corpus.manifest import load_corpus
    from cudice.verifier import api
    from cudice.verifier.config import VerifyConfig
    from cudice.verifier.run.sandbox import run_in_child
    from cudice.verifier.run.warm import PersistentRunner
    from cudice.verifier.source.document import read_document
    from cudice.verifier.source.reference import resolve_reference

    if not api.gpu_available():
        print("RESULT skipped: no GPU")
        return 0
    cases = [c for c in load_corpus("honest") if not args.cases or c.name in args.cases.split(",")]
    rounds = 1 if args.quick else args.rounds
    cases = cases[:2] if args.quick else cases
    config = VerifyConfig(compile_only=False)
    for c in cases:  # build once: the compile stage is not part of the measurement
        r = api.verify(c.path, config=config.with_(timing_num_trials=3, timing_warmup_ms=1.0))
        print(f"built {c.name}: {r.verdict.value}", flush=True)
    new_warm = PersistentRunner()
    new_warm.warm_up(config.memory_limit_mib, {"cache_dir": str(config.cache_dir)})
    modes = {"cold": run_in_child, "warm": new_warm}
    walls: dict[tuple[str, str], list[float]] = {}
    verdicts: dict[tuple[str, str], set[str]] = {}
    try:
        time.sleep(10)  # let the warm spare finish starting (a pool gets this time from its first builds)
        for rnd in range(rounds):
            for c in cases:
                doc = read_document(c.path)
                ref = resolve_reference(doc).document
                assert ref is not None
                order = list(modes) if rnd % 2 == 0 else list(modes)[::-1]
                for mode in order:
                    t0 = time.perf_counter()
                    res = api.run_stage(doc, ref, config, modes[mode])
                    walls.setdefault((c.name, mode), []).append(time.perf_counter() - t0)
                    verdicts.setdefault((c.name, mode), set()).add(res.verdict.value)
                    if mode == "warm":
                        time.sleep(8)  # the next spare warms up, as it would while the pool compiles
    finally:
        new_warm.close()
    print("| case | mode | run stage s (median) | verdicts |")
    print("|---|---|---|---|")
    for (name, mode), xs in sorted(walls.items()):
        print(
            f"| {name} | {mode} | {statistics.median(xs):.2f} | {','.join(sorted(verdicts[(name, mode)]))} |"
        )
    ratio = [
        statistics.median(walls[(c.name, "warm")]) / statistics.median(walls[(c.name, "cold")]) for c in cases
    ]
    per_case = ", ".join(f"{x:.2f}" for x in ratio)
    print(f"RESULT ratio warm/cold={statistics.median(ratio):.2f} (per case {per_case})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
