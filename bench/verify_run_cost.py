"""Cost of the run stage of a `correct` verdict: the old in-process judge against the split judge.

`python bench/verify_run_cost.py --run-stage [--rounds 2] [--cases honest_relu_empty_like,...]`
(GPU only). Every honest corpus kernel is built once (the compile stage, not measured); then,
on the same candidates in one run, alternating per round, the parent's wall time of the run stage
(`api._run_stage`: job out, verdict back) is measured for

- `old`        — `cudice.verifier.worker` in one child (judge and candidate in one process);
- `new`        — `cudice.verifier.judge` (judge process + two runner processes in the boundary);
- `old-warm`   — the old persistent runner's path: one long-lived process that runs `run_job`
                 for each job (torch and CUDA already up);
- `new-warm`   — `PersistentRunner`: a fresh judge and runners per job, warmed up before it.

Prints one row per case and mode (median seconds) and `RESULT ratio new/old=<x> warm=<y>`
(medians over the cases); the target is at most 1.3. Default VerifyConfig (100 timed calls,
250 ms warm-up per implementation): the cost a user or an RL rollout pays.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "verifier"))

OLD_SERVE = r"""
import json, sys
from cudice.verifier.worker import run_job
for line in sys.stdin:
    print(json.dumps(run_job(json.loads(line))), flush=True)
"""


class OldWarm:
    """The former persistent runner: one process, jobs as JSON lines, results as JSON lines."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", OLD_SERVE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

    def __call__(self, job: dict[str, Any], **kw: Any) -> Any:
        from cudice.verifier.sandbox import ChildOutcome

        assert self.proc.stdin is not None and self.proc.stdout is not None
        t0 = time.perf_counter()
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        result = json.loads(self.proc.stdout.readline())
        return ChildOutcome(result, 0, "", "", time.perf_counter() - t0)

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


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
    from functools import partial

    from corpus.manifest import load_corpus
    from cudice.verifier import api
    from cudice.verifier.config import VerifyConfig
    from cudice.verifier.document import read_document
    from cudice.verifier.reference import resolve_reference
    from cudice.verifier.runner import PersistentRunner
    from cudice.verifier.sandbox import run_in_child

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
    old_warm, new_warm = OldWarm(), PersistentRunner()
    new_warm.warm_up(config.memory_limit_mib, {"cache_dir": str(config.cache_dir)})
    modes = {
        "old": partial(run_in_child, module="cudice.verifier.worker"),
        "new": run_in_child,
        "old-warm": old_warm,
        "new-warm": new_warm,
    }
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
                    res = api._run_stage(api._Run(doc, config, None), ref, config, None, modes[mode])
                    walls.setdefault((c.name, mode), []).append(time.perf_counter() - t0)
                    verdicts.setdefault((c.name, mode), set()).add(res.verdict.value)
                    if mode == "new-warm":
                        time.sleep(8)  # the next spare warms up, as it would while the pool compiles
    finally:
        old_warm.close()
        new_warm.close()
    print("| case | mode | run stage s (median) | verdicts |")
    print("|---|---|---|---|")
    for (name, mode), xs in sorted(walls.items()):
        print(
            f"| {name} | {mode} | {statistics.median(xs):.2f} | {','.join(sorted(verdicts[(name, mode)]))} |"
        )
    ratio = [
        statistics.median(walls[(c.name, "new")]) / statistics.median(walls[(c.name, "old")]) for c in cases
    ]
    warm = [
        statistics.median(walls[(c.name, "new-warm")]) / statistics.median(walls[(c.name, "old-warm")])
        for c in cases
    ]
    print(
        f"RESULT ratio new/old={statistics.median(ratio):.2f} warm={statistics.median(warm):.2f} "
        f"(target <= 1.3; per case {', '.join(f'{x:.2f}' for x in ratio)} / "
        f"{', '.join(f'{x:.2f}' for x in warm)})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
