"""Verifier speed: first diagnostic after an edit, full verdict cold vs cached, throughput, repeatability.

Every figure is printed next to a baseline measured in the same run:
1. first compile diagnostic after an edit — cudice's fast path (persistent clangd, warmed) and
   its full build vs plain `load_inline` on the same broken file (time until it raises);
2. time to a full verdict (compile-only without a GPU) for `examples/relu_cuda.py`, cold cache
   and unchanged source, vs plain `load_inline` building the same extension;
3. (GPU) verified kernels per minute for N ≥ 32 distinct candidates through `VerifyPool`;
4. (GPU) repeatability: the same kernel verified 5 times — spread of the reported speedup.
Prints one `RESULT {...}` JSON line per measurement. `--quick` shrinks 3 (8 candidates).
Run: `python bench/verify_speed.py [--quick] [--skip-load-inline]`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from cudice.verifier.api import gpu_available, quick_check, verify
from cudice.verifier.config import VerifyConfig
from cudice.verifier.fast_check import FastChecker
from cudice.verifier.pool import VerifyPool
from cudice.verifier.result import Verdict

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def result(name: str, **fields: object) -> None:
    print("RESULT " + json.dumps({"name": name, **fields}), flush=True)


class PlainLoadInline:
    """`load_inline` of a file (exec, fresh extensions dir) in a background process: the baseline.

    Started before cudice's own measurement and collected after it, so both run side by side
    (each compiler uses ≤ 2 cores; the benchmark machines have ≥ 2 free for each).
    """

    def __init__(self, path: Path, source: str | None = None) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="cudice-bench-li-"))
        src_path = self.dir / path.name
        src_path.write_text(source if source is not None else path.read_text())
        env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(self.dir / "ext"), "TORCH_CUDA_ARCH_LIST": "9.0",
               "MAX_JOBS": "2"}
        code = f"src=open({str(src_path)!r}).read(); exec(compile(src, {str(src_path)!r}, 'exec'), {{'__name__': 'c'}})"
        self.t0 = time.perf_counter()
        self.t1 = 0.0
        self.proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, env=env)
        # the exit time is taken by a watcher thread, not when wait() is called (that could be later)
        self.watcher = threading.Thread(target=self._watch, daemon=True)
        self.watcher.start()

    def _watch(self) -> None:
        self.proc.wait()
        self.t1 = time.perf_counter()

    def wait(self) -> tuple[float, bool]:
        self.watcher.join(timeout=900)
        shutil.rmtree(self.dir, ignore_errors=True)
        return self.t1 - self.t0, self.proc.returncode == 0


def bench_first_diagnostic(config: VerifyConfig, skip_load_inline: bool) -> None:
    path = EXAMPLES / "relu_broken.py"
    text = path.read_text()
    if shutil.which("clangd"):
        with FastChecker(config) as fc:
            warm_s = fc.warm()
            quick_check(path, text, fc)  # the document takes over the warmed slot; clangd now
            quick_check(path, text.replace("vv >", "v_ >"), fc)  # rebuilds its own preamble: wait once
            walls = []
            for i in range(5):
                t0 = time.perf_counter()
                r = quick_check(path, text.replace("vv >", f"v{i}v >"), fc)
                walls.append(time.perf_counter() - t0)
                assert r.verdict is Verdict.COMPILE_ERROR
        result("first_diagnostic_fast", median_s=statistics.median(walls), max_s=max(walls), warm_s=warm_s,
               samples_s=walls)
    else:
        result("first_diagnostic_fast", skipped="clangd not installed on this machine")
    baseline = None if skip_load_inline else PlainLoadInline(path)
    t0 = time.perf_counter()
    cold = verify(path, source=text.replace("vv >", "v_cold >"), config=config.with_(compile_only=True))
    full_s = time.perf_counter() - t0
    assert cold.verdict is Verdict.COMPILE_ERROR
    fields: dict[str, object] = {"full_build_s": full_s}
    if baseline is not None:
        li_s, _ = baseline.wait()
        fields.update(load_inline_s=li_s, ratio_full_vs_load_inline=li_s / full_s)
    result("first_diagnostic_full", **fields)


def bench_full_verdict(config: VerifyConfig, skip_load_inline: bool) -> None:
    path = EXAMPLES / "relu_cuda.py"
    src = path.read_text().replace("relu_kernel", "relu_kernel_bench")  # a fresh cache entry
    baseline = None if skip_load_inline else PlainLoadInline(path, src.replace("relu_kernel_bench", "relu_kernel_li"))
    t0 = time.perf_counter()
    cold = verify(path, source=src, config=config)
    cold_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    warm = verify(path, source=src, config=config)
    cached_s = time.perf_counter() - t0
    fields: dict[str, object] = {"verdict": cold.verdict.value, "cold_s": cold_s, "cached_s": cached_s,
                                 "cached_verdict": warm.verdict.value, "gpu": gpu_available()}
    if baseline is not None:
        li_s, ok = baseline.wait()
        fields.update(load_inline_s=li_s, load_inline_ok=ok, ratio_cold=li_s / cold_s, ratio_cached=li_s / cached_s)
    result("full_verdict", **fields)


def variant(i: int) -> str:
    """A distinct, correct relu candidate (different block size and grid cap)."""
    text = (EXAMPLES / "relu_cuda.py").read_text()
    text = text.replace("const int threads = 256;", f"const int threads = {[128, 256, 512, 1024][i % 4]};")
    return text.replace("65535", str(4096 + 97 * i))


def bench_throughput(config: VerifyConfig, n: int) -> None:
    cands = [variant(i) for i in range(n)]
    workers = max(2, (os.cpu_count() or 2) // 2)
    t0 = time.perf_counter()
    with VerifyPool(config, num_compile_workers=workers) as pool:
        futs = [pool.submit(EXAMPLES / "relu_cuda.py", source=c, key=f"c{i}") for i, c in enumerate(cands)]
        results = [f.result() for f in futs]
    wall = time.perf_counter() - t0
    verdicts: dict[str, int] = {}
    for r in results:
        verdicts[r.verdict.value] = verdicts.get(r.verdict.value, 0) + 1
    per_min = n / wall * 60
    result("throughput", num_candidates=n, wall_s=wall, kernels_per_min=per_min, verdicts=verdicts,
           compile_workers=workers, baseline_load_inline_per_min=13.0, ratio_vs_baseline=per_min / 13.0)


def bench_repeatability(config: VerifyConfig, repeats: int = 5) -> None:
    path = EXAMPLES / "softmax_cuda.py"
    speedups = []
    for _ in range(repeats):
        r = verify(path, config=config)
        if r.speedup is not None:
            speedups.append(r.speedup)
    if len(speedups) < 2:
        result("repeatability", skipped="no speedups measured", count=len(speedups))
        return
    med = statistics.median(speedups)
    result("repeatability", speedups=speedups, median=med, spread_pct=(max(speedups) - min(speedups)) / med * 100,
           half_spread_pct=(max(speedups) - min(speedups)) / 2 / med * 100)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--skip-load-inline", action="store_true")
    ap.add_argument("--phase", choices=("all", "compile", "gpu", "throughput", "repeat"), default="all",
                    help="compile: 1-2; throughput: 3; repeat: 4; gpu: 3-4 (phases can run side by side)")
    args = ap.parse_args()
    cache = Path(tempfile.mkdtemp(prefix="cudice-bench-cache-"))
    config = VerifyConfig(cache_dir=cache, max_jobs=os.cpu_count() or 2)
    result("machine", cpus=os.cpu_count(), gpu=gpu_available(), date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    steps: list[tuple[str, Callable[[], None]]] = []
    if args.phase in ("all", "compile"):
        steps += [("first_diagnostic", lambda: bench_first_diagnostic(config, args.skip_load_inline)),
                  ("full_verdict", lambda: bench_full_verdict(config, args.skip_load_inline))]
    gpu_phase = args.phase in ("all", "gpu", "throughput", "repeat")
    if gpu_phase and not gpu_available():
        result("throughput", skipped="no GPU")
    elif gpu_phase:
        if args.phase in ("all", "gpu", "throughput"):
            steps.append(("throughput", lambda: bench_throughput(config, 8 if args.quick else 32)))
        if args.phase in ("all", "gpu", "repeat"):
            steps.append(("repeatability", lambda: bench_repeatability(config)))
    failed = 0
    try:
        for name, step in steps:
            try:
                step()
            except Exception as exc:  # one broken measurement must not lose the others
                failed += 1
                result(name, error=f"{type(exc).__name__}: {exc}")
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
