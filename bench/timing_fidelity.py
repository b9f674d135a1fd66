"""Does cudice's speedup agree with a plain in-process CUDA-event harness? (GPU only)

For a bench set of honest KernelBench-style kernels (bench/kb_candidates.py templates at sizes
from a few microseconds to ~100 ms), this prints one table:

- `harness`: the speedup an in-process CUDA-event harness measures, KernelBench style: the same
  reference and `ModelNew` objects in one process, same inputs, 5 warm-up calls, 100 timed calls
  each with a start and an end event, the median; with L2 left warm (KernelBench's fast_p tables)
  and with a 256 MiB L2 flush before each call (cold). The extension is the library cudice built
  (the same cache), loaded the way the runner loads it;
- `alone`: `cudice verify` of each file, one at a time on an idle GPU, and `alone2` once more
  (run-to-run spread);
- `x12`: the same verifications, twelve at once (as `cudice eval` and RL rewards run them).

`ratio` columns are cudice / harness (warm; the geometric mean of the harness before and after
the `alone` passes, since a ~20 us kernel's harness figure moves between runs). The harness is the
baseline measured in the same run.
Usage: `python bench/timing_fidelity.py [--quick] [--out DIR] [--only NAME,...] [--passes ...]
[--staging socket|shared]`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kb_candidates as kb

_2D = "torch.randn(256, 4096)"
# (template name, 2-D size or matmul dims): ~5 µs to ~100 ms on an H200
BENCH_SET: list[tuple[str, str]] = [
    ("relu", "64, 1024"),
    ("relu", "1024, 4096"),
    ("relu", "8192, 8192"),
    ("relu", "16384, 16384"),
    ("gelu", "1024, 4096"),
    ("gelu", "8192, 8192"),
    ("clamp", "4096, 4096"),
    ("sum", "256, 4096"),
    ("sum", "8192, 8192"),
    ("max", "4096, 16384"),
    ("softmax", "128, 1024"),
    ("softmax", "4096, 4096"),
    ("softmax", "8192, 16384"),
    ("layer_norm", "4096, 4096"),
    ("rms_norm", "8192, 8192"),
    ("matmul", "512, 256, 384"),
    ("matmul", "2048, 2048, 2048"),
    ("gemm_bias_relu", "4096, 4096, 4096"),
    ("matmul", "8192, 4096, 8192"),
    ("scale_shift_add_relu", "4096, 8192"),
    ("scale_shift_residual_gelu", "8192, 8192"),
]
QUICK = [0, 2, 5, 11, 16, 17, 19]
# where a verification's wall went, stage by stage
STAGE_WALLS = {"parse", "static", "fast_compile", "compile", "reference_inputs", "run", "run.load"}
STAGE_WALLS |= {"run.correctness", "run.profile", "run.timing", "run.timing.warmup", "run.timing.rounds"}
STAGE_WALLS |= {"run.timing.lease_wait", "run.timing.idle_wait", "run.timing.ready_wait"}
STAGE_WALLS |= {"run.judge_warm_up", "run.judge_idle", "run.release_memory"}
STAGE_WALLS |= {f"run.timing.rep_{step}" for step in ("draw", "stage", "clocked", "check", "profile")}
# the judge's timing walls printed per verification (request times per runner, both estimators)
WALLS = (
    "run.timing.request",
    "run.timing.candidate_by",
    "run.timing.pinned",
    "run.timing.launch_floor",
    "run.timing.trace",
    "run.timing.staging",
    "run.timing.cpu_",
    "run.timing.runqueue_",
    "run.timing.preempted_",
    "run.timing.candidate_unpreempted",
    "run.timing.released_repetitions",
    "run.load.",
)


def bench_files(out: Path, only: set[str] | None, quick: bool) -> list[Path]:
    """Write the bench set's self-contained candidate files; returns their paths."""
    names = [name for _, name, _ in kb._templates()]
    files = []
    for j, (base, size) in enumerate(BENCH_SET):
        if quick and j not in QUICK:
            continue
        i = names.index(base) + kb.NUM_TEMPLATES * (j + 1)  # a distinct extension name per entry
        src = kb.candidate(i).source
        if base in kb._MATMULS:
            m, k, n = (s.strip() for s in size.split(","))
            src = src.replace(
                "torch.randn(512, 256), torch.randn(256, 384), torch.randn(384)",
                f"torch.randn({m}, {k}), torch.randn({k}, {n}), torch.randn({n})",
            )
        else:
            src = src.replace(_2D, f"torch.randn({size})")
        name = f"{j:02d}_{base}_{size.replace(', ', 'x')}"
        if only and name not in only and base not in only:
            continue
        path = out / f"{name}.py"
        path.write_text(src)
        files.append(path)
    return files


HARNESS = r"""
import gc, json, statistics, sys, torch
from pathlib import Path
from cudice.verifier.build.compile import build_module
from cudice.verifier.config import VerifyConfig
from cudice.verifier.source.document import read_document
from cudice.verifier.build.generated import from_values
from cudice.verifier.run.judging import install_load_inline, load_extension

cache = sys.argv[1]
config = VerifyConfig(cache_dir=Path(cache))
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
flush = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device="cuda")

def time_ms(fn, inputs, cold):
    with torch.no_grad():
        for _ in range(5):
            fn(*inputs)
        torch.cuda.synchronize()
        out = []
        for _ in range(100):
            if cold:
                flush.fill_(1)
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn(*inputs)
            e.record()
            torch.cuda.synchronize()
            out.append(s.elapsed_time(e))
        return statistics.median(out)

for path in sys.argv[2:]:  # one file after another, each alone on the GPU
    doc = read_document(Path(path))

    def build(name, cpp, cuda, functions, doc=doc, path=path):
        texts = lambda v: [v] if isinstance(v, str) else list(v or [])
        module = from_values(name, texts(cpp), texts(cuda) or None, functions, doc)
        for cfg in (config, config.with_(cabi_binding=False)):
            result = build_module(module, path, cfg, link=True)
            try:
                return load_extension(name, str(result.library))
            except ImportError:
                continue
        raise RuntimeError("could not load " + name)

    try:
        install_load_inline(build)
        ns = {"__name__": "bench_candidate"}
        exec(compile(Path(path).read_text(), path, "exec"), ns)
        torch.manual_seed(0)
        inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in ns["get_inputs"]()]
        ref = ns["Model"](*ns["get_init_inputs"]()).cuda().eval()
        new = ns["ModelNew"](*ns["get_init_inputs"]()).cuda().eval()
        res = {}
        for policy, cold in (("warm", False), ("cold", True)):
            r, c = time_ms(ref, inputs, cold), time_ms(new, inputs, cold)
            res[policy] = {"ref_ms": r, "cand_ms": c, "speedup": r / c}
    except Exception as exc:
        res = {"error": repr(exc)[-300:]}
    print("HARNESS " + json.dumps([path, res]), flush=True)
    ns = inputs = ref = new = None
    gc.collect()
    torch.cuda.empty_cache()
"""


def harness(paths: list[Path], cache: Path) -> dict[str, dict[str, dict[str, float]]]:
    """The in-process CUDA-event harness on each file, one after another in one process (one
    torch import and CUDA context for the whole set); {file stem: result or {"error": ...}}."""
    try:
        proc = subprocess.run(
            [sys.executable, "-c", HARNESS, str(cache), *map(str, paths)],
            capture_output=True,
            text=True,
            timeout=120 + 60 * len(paths),
        )
        stdout, stderr = proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:  # what it finished still counts

        def text(b: bytes | str | None) -> str:
            return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")

        stdout, stderr = text(exc.stdout), "timed out; " + text(exc.stderr)
    got: dict[str, dict[str, dict[str, float]]] = {}
    for line in stdout.splitlines():
        if line.startswith("HARNESS "):
            path, res = json.loads(line[8:])
            got[Path(path).stem] = res
    for p in paths:
        got.setdefault(p.stem, {"error": f"harness process ended first: {stderr[-300:]}"})  # type: ignore[dict-item]
    return got


def verify(path: Path, config: object) -> dict[str, object]:
    from cudice.verifier import api

    t0 = time.perf_counter()
    r = api.verify(path, config=config)  # type: ignore[arg-type]
    errors = [f"{d.code}: {d.message[:160]}" for d in r.diagnostics if d.severity.value == "error"]
    return {
        "verdict": r.verdict.value,
        "speedup": r.speedup,
        "speedup_min": r.speedup_min,
        "speedup_max": r.speedup_max,
        "ref_ms": r.reference_runtime_ms,
        "cand_ms": r.runtime_ms,
        "wall_s": time.perf_counter() - t0,
        "errors": errors,
        "walls": r.stage_wall_s,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="7 of the 21 kernels")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp")) / "timing_fidelity")
    ap.add_argument("--only", default="", help="comma-separated entry or template names")
    ap.add_argument("--concurrency", type=int, default=12)
    ap.add_argument("--l2", default="warm", choices=("warm", "cold"))
    ap.add_argument("--passes", default="alone,alone2,x12", help="which of alone, alone2, x12 to run")
    ap.add_argument(
        "--bias-us",
        type=float,
        default=None,
        help="VerifyConfig.timing_runner_bias_us for the cudice passes (default: the config's)",
    )
    ap.add_argument(
        "--staging",
        default=None,
        choices=("socket", "shared"),
        help="VerifyConfig.timing_staging for the cudice passes (default: the config's)",
    )
    ap.add_argument("--all-walls", action="store_true", help="print every stage wall of a verification")
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("timing_fidelity: needs a CUDA GPU", file=sys.stderr)
        return 2
    from cudice.verifier.config import VerifyConfig

    args.out.mkdir(parents=True, exist_ok=True)
    files = bench_files(args.out, set(filter(None, args.only.split(","))) or None, args.quick)
    cache = args.out / "cache"
    # every timing's per-call samples, one JSON per verification (verifier/run/judge_timing.py)
    os.environ.setdefault("CUDICE_TIMING_SAMPLES", str(args.out / "samples"))
    config = VerifyConfig(cache_dir=cache, l2_policy=args.l2)
    if args.bias_us is not None:  # e.g. 0: every estimate shown, to measure the runners' bias itself
        config = config.with_(timing_runner_bias_us=args.bias_us)
    if args.staging is not None:  # compare "shared" with "socket" on the same kernels
        config = config.with_(timing_staging=args.staging)
    rows: dict[str, dict[str, object]] = {f.stem: {} for f in files}
    t0 = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:  # 1. builds, side by side (no timing yet)
        for f, r in zip(
            files, pool.map(lambda f: verify(f, config.with_(build_only=True)), files), strict=True
        ):
            print(f"build {f.stem}: {r['verdict']} {r['wall_s']:.1f}s", flush=True)
    print(f"builds: {time.perf_counter() - t0:.0f} s", flush=True)
    for stem, res in harness(files, cache).items():  # 2. the in-process CUDA-event harness, alone
        rows[stem]["harness"] = res
        print(f"harness {stem}: {res}", flush=True)
    passes = set(args.passes.split(","))
    for key in [k for k in ("alone", "alone2") if k in passes]:  # 3. cudice, one at a time, twice
        for f in files:
            rows[f.stem][key] = verify(f, config)
            r = rows[f.stem][key]
            walls = {
                (k if args.all_walls else k.removeprefix("run.timing.")): round(v, 4)
                for k, v in (r["walls"] or {}).items()
                if args.all_walls or k.startswith(WALLS) or k in STAGE_WALLS
            }
            print(
                f"{key} {f.stem}: {r['verdict']} {r['speedup']} ref {r['ref_ms']} cand {r['cand_ms']} ms "
                f"{r['wall_s']:.1f}s {r['errors']} "
                f"{walls}",
                flush=True,
            )
    if passes & {"alone", "alone2"}:  # 3b. the harness again: for ~20 us kernels it moves between runs
        for stem, res in harness(files, cache).items():
            rows[stem]["harness_after"] = res
            print(f"harness_after {stem}: {res}", flush=True)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(args.concurrency) as pool:  # 4. twelve at once
        together = files if "x12" in passes else []
        for f, r in zip(together, pool.map(lambda f: verify(f, config), together), strict=True):
            rows[f.stem]["x12"] = r
            print(f"x12 {f.stem}: {r['verdict']} {r['speedup']} {r['errors']}", flush=True)
    print(f"x12 wall: {time.perf_counter() - t0:.0f} s", flush=True)
    (args.out / "fidelity.json").write_text(json.dumps(rows, indent=1, default=str))
    print_table(rows, args.l2)
    return 0


def print_table(rows: dict[str, dict[str, object]], l2: str) -> None:
    print(
        f"\n| kernel | ref ms (harness) | harness warm / cold | cudice alone / again / x12 (L2 {l2}) "
        "| ratio alone / x12 |"
    )
    print("|---|---|---|---|---|")
    ratios: list[float] = []
    for name, row in rows.items():
        h = row.get("harness", {})
        warm = h.get("warm", {}) if isinstance(h, dict) else {}
        cold = h.get("cold", {}) if isinstance(h, dict) else {}
        base = (warm if l2 == "warm" else cold).get("speedup")
        after = row.get("harness_after", {})
        again = after.get(l2, {}).get("speedup") if isinstance(after, dict) else None
        if isinstance(base, float) and isinstance(again, float):
            base = (base * again) ** 0.5  # the two harness runs' geometric mean
        cells = []
        for key in ("alone", "alone2", "x12"):
            r = row.get(key, {})
            s = r.get("speedup") if isinstance(r, dict) else None
            verdict = r.get("verdict") if isinstance(r, dict) else None
            cells.append(f"{s:.2f}" if isinstance(s, float) else str(verdict or "-"))
        rs = []
        for key in ("alone", "x12"):
            r = row.get(key, {})
            s = r.get("speedup") if isinstance(r, dict) else None
            if isinstance(s, float) and isinstance(base, float):
                rs.append(f"{s / base:.2f}")
                ratios.append(s / base)
            else:
                rs.append("-")
        again_txt = f" (after: {again:.2f})" if isinstance(again, float) else ""
        print(
            f"| {name} | {warm.get('ref_ms', float('nan')):.4f} | {warm.get('speedup', float('nan')):.2f} / "
            f"{cold.get('speedup', float('nan')):.2f}{again_txt} | {' / '.join(cells)} | {' / '.join(rs)} |"
        )
    if ratios:
        print(
            f"\nratio cudice/harness: median {statistics.median(ratios):.3f}, "
            f"min {min(ratios):.3f}, max {max(ratios):.3f}"
        )


if __name__ == "__main__":
    sys.exit(main())
