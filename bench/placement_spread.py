"""Does where a tensor lands in GPU memory move a memory-bound kernel's time? (GPU only.)

`python bench/placement_spread.py [--processes 3] [--placements 5] [--calls 200]`. For each
kernel (PyTorch's own ops, the reference side of bench/timing_fidelity.py's set: row sum and max
over 8192² and 4096×16384, softmax over 8192×16384, ReLU over 8192²), each of `--processes` fresh
processes allocates the input `--placements` times, each time after emptying the caching
allocator and behind a pad of a random size (0 to 1 GiB in 2 MiB steps, the allocator's large-block
granule), so that the driver hands the input another address, and times `--calls` calls back to
back with CUDA events (warm L2, as the harness), twice: the median of each pass.

Prints per kernel each placement's two medians, then the spread of the first pass's medians
between placements and between processes (each process's median of its placements), as a share
of the overall median; then `RESULT` lines with the standard deviation of the placements' medians
as a ratio to the noise of one placement's median, estimated from the same placement's two passes
(sd of their difference / √2), measured in the same run. With no placement effect the ratio is
about 1; well above 1 says placement moves the time by more than a median's own noise: a timing
that keeps one placement per process (as cudice's runners and the in-process harness both do)
then carries a per-process bias of that size, and averaging over placements would remove it.

Not covered: candidate kernels (only PyTorch's), the cold-L2 policy, and why a placement is slow.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

from cudice.verifier.process import die_with_parent

CHILD = r"""
import json, random, statistics, sys
import torch
name, placements, calls, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
shapes = {"sum_8192x8192": (8192, 8192), "max_4096x16384": (4096, 16384),
          "softmax_8192x16384": (8192, 16384), "relu_8192x8192": (8192, 8192)}
ops = {"sum": lambda x: torch.sum(x, dim=1), "max": lambda x: torch.max(x, dim=1)[0],
       "softmax": lambda x: torch.softmax(x, dim=1), "relu": torch.relu}
op = ops[name.split("_")[0]]
rng = random.Random(seed)
def timed(x):
    times = []
    for _ in range(calls):
        a = torch.cuda.Event(enable_timing=True); b = torch.cuda.Event(enable_timing=True)
        a.record(); op(x); b.record(); b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)
out = []
for _ in range(placements):
    torch.cuda.empty_cache()
    pad = torch.empty(rng.randrange(0, 512) * (2 << 20), dtype=torch.uint8, device="cuda")
    x = torch.randn(*shapes[name], device="cuda")
    for _ in range(10):
        op(x)
    torch.cuda.synchronize()
    out.append({"first_ms": timed(x), "again_ms": timed(x), "address": x.data_ptr(), "pad": pad.numel()})
    del x, pad
print("PLACEMENTS " + json.dumps(out))
"""

KERNELS = ("sum_8192x8192", "max_4096x16384", "softmax_8192x16384", "relu_8192x8192")


def child(name: str, placements: int, calls: int, seed: int) -> list[dict[str, float]]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, name, str(placements), str(calls), str(seed)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        preexec_fn=die_with_parent,  # gone with this bench, as every process cudice starts
    )
    for line in done.stdout.splitlines():
        if line.startswith("PLACEMENTS "):
            return json.loads(line[11:])
    raise RuntimeError(f"{name}: no result (rc {done.returncode}): {done.stderr[-800:]}")


def spread(xs: list[float]) -> float:
    return (max(xs) - min(xs)) / statistics.median(xs) if len(xs) > 1 else 0.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--processes", type=int, default=3)
    ap.add_argument("--placements", type=int, default=5)
    ap.add_argument("--calls", type=int, default=200, help="timed calls per pass (at least 20)")
    ap.add_argument("--only", default="", help="comma-separated kernel names")
    args = ap.parse_args()
    if args.calls < 20 or args.placements < 1 or args.processes < 1:
        ap.error("--calls must be at least 20, --placements and --processes at least 1")
    names = [n for n in KERNELS if not args.only or n in args.only.split(",")]
    for name in names:
        runs = []
        for p in range(args.processes):
            try:
                runs.append(child(name, args.placements, args.calls, seed=1000 * p + 7))
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                print(f"{name}: process {p} failed: {e}", flush=True)
        if not runs:
            continue
        firsts = [pl["first_ms"] for r in runs for pl in r]
        overall = statistics.median(firsts)
        within_process = max(spread([pl["first_ms"] for pl in r]) for r in runs)
        between_process = spread([statistics.median(pl["first_ms"] for pl in r) for r in runs])
        diffs = [pl["first_ms"] - pl["again_ms"] for r in runs for pl in r]
        noise = statistics.stdev(diffs) / 2**0.5 if len(diffs) > 1 else 0.0
        placement_sd = statistics.stdev(firsts) if len(firsts) > 1 else 0.0
        print(
            f"{name}: median {overall:.4f} ms; placements within a process spread up to "
            f"{within_process:.1%}; processes (median of placements) {between_process:.1%}; "
            f"one median's noise (same placement twice) {noise / overall:.2%}",
            flush=True,
        )
        for p, r in enumerate(runs):
            pairs = " ".join(f"{pl['first_ms']:.4f}/{pl['again_ms']:.4f}" for pl in r)
            print(f"  process {p} (first/again per placement): {pairs}", flush=True)
        if noise > 0:
            print(f"RESULT {name} placement_sd/median_noise={placement_sd / noise:.2f}")
        else:
            print(f"RESULT {name} placement_sd/median_noise=undefined (fewer than two placements)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
