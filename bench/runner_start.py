"""Where a GPU runner's start-up goes, step by step, and what the profiler's first session costs
under each way of opening it. (GPU only.)

`python bench/runner_start.py [--repeats 3]`. Each variant runs in a fresh Python process (a
process pays CUPTI's first-session cost once, so nothing can be measured twice in one process),
started the way `cudice.verifier.run.runner` starts: `import torch`, a CUDA context, a small
matmul, then the variant's profiler steps. Prints one line per variant with each step's median seconds
over `--repeats` processes, then `RESULT` lines with each variant's profiler cost as a ratio to
`both` (the runner's present warm-up: one session with CPU and CUDA activities), measured in the
same run. Each session is split into its prepare (CUPTI and kineto set up), start, op and stop
(results collected; events are parsed only when read, which the runner's warm-up never does) steps.

Variants:
- `both`      — one `torch.profiler.profile(CPU, CUDA)` session around one op (the runner today);
- `cuda`      — the same with the CUDA activity alone;
- `cpu`       — the CPU activity alone (no CUPTI);
- `twice`     — two `both` sessions: the second's cost (its own RESULT line) is what a later
                profiled call pays;
- `kineto`    — the session the runners open (`profiler_session` in verifier/run/dynamic_checks.py:
                `torch.autograd.profiler.profile` with Kineto, CPU and CUDA), which skips
                `torch.profiler.profile`'s import of `torch._inductor`.

Not covered: the judge's own start, and a runner under load (twelve at once).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

from cudice.verifier.process import die_with_parent

CHILD = r"""
import json, sys, time
t = time.perf_counter()
took = {}
def step(name):
    global t
    now = time.perf_counter(); took[name] = now - t; t = now
import torch
step("import_torch")
x = torch.ones(8, 8, device="cuda"); torch.cuda.synchronize()
step("context")
(x @ x).sum().item()
step("cublas")
variant = sys.argv[1]
from torch.profiler import ProfilerActivity, profile
step("import_profiler")  # torch.profiler itself; torch._inductor comes with the first prepare_trace
if variant == "kineto":  # cudice's session (verifier/run/dynamic_checks.py profiler_session)
    from torch.autograd import profiler
    p = profiler.profile(use_cpu=True, use_device="cuda", use_kineto=True)
    p.__enter__()
    step("session_enter")
    x.add_(1.0); torch.cuda.synchronize()
    step("session_op")
    p.__exit__(None, None, None)
    step("session_exit")
    print("INDUCTOR_IMPORTED", "torch._inductor" in sys.modules)
    print("STEPS " + json.dumps(took))
    sys.exit(0)
acts = {"both": [ProfilerActivity.CPU, ProfilerActivity.CUDA], "cuda": [ProfilerActivity.CUDA],
        "cpu": [ProfilerActivity.CPU], "twice": [ProfilerActivity.CPU, ProfilerActivity.CUDA]}[variant]
p = profile(activities=acts)
p.prepare_trace()  # CUPTI and kineto set up
step("session_prepare")
p.start_trace()
step("session_start")
x.add_(1.0); torch.cuda.synchronize()
step("session_op")
p.stop_trace()  # the results collected (parsed only when read)
step("session_stop")
if variant == "twice":
    with profile(activities=acts):
        x.add_(1.0); torch.cuda.synchronize()
    step("second_session")
print("STEPS " + json.dumps(took))
"""

VARIANTS = ("both", "cuda", "cpu", "twice", "kineto")


def run_child(variant: str) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, variant],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        preexec_fn=die_with_parent,  # gone with this bench, as every process cudice starts
    )
    for line in out.stdout.splitlines():
        if line.startswith("STEPS "):
            return json.loads(line[6:])
    raise RuntimeError(f"{variant}: no steps (rc {out.returncode}): {out.stderr[-800:]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    per: dict[str, list[dict[str, float]]] = {v: [] for v in VARIANTS}
    for _ in range(args.repeats):  # interleaved, so drift hits every variant alike
        for v in VARIANTS:
            try:
                per[v].append(run_child(v))
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                print(f"{v}: failed: {e}", flush=True)
    profiler_cost: dict[str, float] = {}
    second: float | None = None
    for v, runs in per.items():
        if not runs:
            continue
        steps = {k: statistics.median(r[k] for r in runs if k in r) for k in runs[0]}
        print(v, " ".join(f"{k}={s:.3f}" for k, s in steps.items()), flush=True)
        profiler_cost[v] = sum(s for k, s in steps.items() if k.startswith("session"))
        second = steps.get("second_session", second)
    base = profiler_cost.get("both")
    if not base:
        print("RESULT none: the `both` variant (the baseline) gave no figures; see its failure above")
        return 1
    for v, cost in profiler_cost.items():
        print(f"RESULT {v} first session {cost:.3f} s ratio/both={cost / base:.3f}")
    if second is not None:
        print(f"RESULT twice second session {second:.3f} s ratio/both={second / base:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
