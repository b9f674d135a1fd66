"""Verifier speed: first diagnostic after an edit, full verdict cold vs cached, throughput, repeatability.

Every figure is printed next to a baseline measured in the same run:
1. first compile diagnostic after an edit — cudice's fast path (persistent clangd, warmed) and
   its full build vs plain `load_inline` on the same broken file (time until it raises);
2. time to a full verdict (compile-only without a GPU) for `examples/relu_cuda.py`, cold cache
   and unchanged source, vs plain `load_inline` building the same extension;
3. (GPU) verified kernels per minute for N ≥ 32 distinct candidates through `VerifyPool`;
4. (GPU) repeatability: the same kernel verified 5 times — spread of the reported speedup;
5. `--phase candidates`: ≥ 32 distinct KernelBench-style candidates (bench/kb_candidates.py:
   elementwise, reductions, softmax, norms, matmul, fused epilogues), each verified as a never-seen
   source the way `cudice verify` does it (`warm_judge=True`: the judge starts with the build;
   `--compile-only` on a CPU box), then built by plain `load_inline` and its kernels alone by a
   plain `nvcc -c` without torch headers, one after the other in the same run. Per stage (host parse
   = main.cpp, device compile = cuda.cu, link, load, run = correctness, time), p50/p95 time to
   verdict, verdicts/min, CPU seconds and ratios. With a GPU and `--pool`, the same candidates go
   through `VerifyPool` and the baseline runs as many `load_inline` processes at once (distinct
   candidates per minute). `--variants default,no-split,pybind` also verifies each candidate with
   nvcc's steps in sequence and with the pybind11 `main.cpp` (each variant with a cache of its own)
   in the same run; `objects` is the compile-only path that still builds every object (the host
   compiler's pass over nvcc's front-end output included), the baseline of the check-only path.
   `--pool-prefill both` runs the pool step twice, without and with `VerifyPool.prefill` (each
   chunk of 16 checked in one nvcc pass before it is submitted, as the RL reward does), each from
   a cache whose objects were wiped; `--pool-broken K` gives every K-th candidate a compile error
   (RL rollouts mostly have one).
6. `--phase batched --batched 4,8,16`: compile-only checks of `--limit` distinct candidates
   (bench/kb_candidates.py), one at a time (`build_module(link=False)`) and through
   `verifier/build/batch.py` `check_many` N at a time for each N, each with the objects of the cache
   wiped first (the toolchain probe, the header lists and the prefix cache kept warm, as in a
   long-lived evaluator), and the plain `nvcc -c` of the same kernels: per-candidate wall and CPU s,
   and how many a batch decided.
Prints one `RESULT {...}` JSON line per measurement. `--quick` shrinks 3 (8 candidates).
Run: `python bench/verify_speed.py [--quick] [--skip-load-inline]`;
`python bench/verify_speed.py --phase candidates --compile-only --limit 4` on a 2-core box.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import as_completed
from pathlib import Path
from typing import Any

from cudice.verifier.api import gpu_available, quick_check, verify
from cudice.verifier.build.quick import QuickChecker
from cudice.verifier.build.toolchain import cuda_home
from cudice.verifier.config import VerifyConfig
from cudice.verifier.pool import VerifyPool, default_compile_workers
from cudice.verifier.source.result import Severity, Verdict, VerifyResult

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
sys.path.insert(0, str(Path(__file__).resolve().parent))
import kb_candidates  # noqa: E402  (next to this file)


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
        # CUDA_HOME as cudice's build sets it: a CPU-only torch finds no CUDA home of its own
        env = {
            **os.environ,
            "TORCH_EXTENSIONS_DIR": str(self.dir / "ext"),
            "TORCH_CUDA_ARCH_LIST": "9.0",
            "MAX_JOBS": "2",
            "CUDA_HOME": cuda_home(),
        }
        # a CPU-only torch sets cpp_extension.CUDA_HOME to None whatever the environment says; pointing it
        # at the toolkit (as cudice's toolchain probe does) lets load_inline compile, then fail to link
        code = (
            "import os, torch.utils.cpp_extension as ce; "
            "ce.CUDA_HOME = ce.CUDA_HOME or os.environ['CUDA_HOME']; "
            f"src=open({str(src_path)!r}).read(); "
            f"exec(compile(src, {str(src_path)!r}, 'exec'), {{'__name__': 'c'}})"
        )
        self.t0 = time.perf_counter()
        self.t1 = 0.0
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
        )
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
        with QuickChecker(config) as fc:
            warm_s = fc.warm()
            quick_check(path, text, fc)  # the document takes over the warmed slot; clangd now
            quick_check(path, text.replace("vv >", "v_ >"), fc)  # rebuilds its own preamble: wait once
            walls = []
            for i in range(5):
                t0 = time.perf_counter()
                r = quick_check(path, text.replace("vv >", f"v{i}v >"), fc)
                walls.append(time.perf_counter() - t0)
                assert r.verdict is Verdict.COMPILE_ERROR
        result(
            "first_diagnostic_fast",
            median_s=statistics.median(walls),
            max_s=max(walls),
            warm_s=warm_s,
            samples_s=walls,
        )
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
    baseline = (
        None
        if skip_load_inline
        else PlainLoadInline(path, src.replace("relu_kernel_bench", "relu_kernel_li"))
    )
    t0 = time.perf_counter()
    cold = verify(path, source=src, config=config)
    cold_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    warm = verify(path, source=src, config=config)
    cached_s = time.perf_counter() - t0
    fields: dict[str, object] = {
        "verdict": cold.verdict.value,
        "cold_s": cold_s,
        "cached_s": cached_s,
        "cached_verdict": warm.verdict.value,
        "gpu": gpu_available(),
    }
    if baseline is not None:
        li_s, ok = baseline.wait()
        fields.update(
            load_inline_s=li_s, load_inline_ok=ok, ratio_cold=li_s / cold_s, ratio_cached=li_s / cached_s
        )
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
    result(
        "throughput",
        num_candidates=n,
        wall_s=wall,
        kernels_per_min=per_min,
        verdicts=verdicts,
        compile_workers=workers,
        baseline_load_inline_per_min=13.0,
        ratio_vs_baseline=per_min / 13.0,
    )


def bench_repeatability(config: VerifyConfig, repeats: int = 5) -> None:
    path = EXAMPLES / "softmax_cuda.py"
    speedups = []
    for _ in range(repeats):
        r = verify(path, config=config, warm_judge=True)  # the CLI's path
        if r.speedup is not None:
            speedups.append(r.speedup)
    if len(speedups) < 2:
        result("repeatability", skipped="no speedups measured", count=len(speedups))
        return
    med = statistics.median(speedups)
    result(
        "repeatability",
        speedups=speedups,
        median=med,
        spread_pct=(max(speedups) - min(speedups)) / med * 100,
        half_spread_pct=(max(speedups) - min(speedups)) / 2 / med * 100,
    )


def _child_cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _pct(values: list[float], q: float) -> float:
    """The q-quantile (0..1) of `values`, nearest-rank; NaN when empty."""
    if not values:
        return float("nan")
    if q == 0.5:
        return statistics.median(values)
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def plain_nvcc_s(kernel_cu: str, arch: str) -> tuple[float, float, bool]:
    """(wall s, CPU s, ok) of `nvcc -c` of the kernels alone (no torch headers): the floor."""
    d = Path(tempfile.mkdtemp(prefix="cudice-bench-nvcc-"))
    try:
        (d / "k.cu").write_text(kernel_cu)
        sm = arch.replace(".", "")
        cpu0, t0 = _child_cpu_s(), time.perf_counter()
        rc = subprocess.run(
            ["nvcc", f"-gencode=arch=compute_{sm},code=sm_{sm}", "-std=c++20", "-c", "k.cu", "-o", "k.o"],
            cwd=d,
            capture_output=True,
        ).returncode
        return time.perf_counter() - t0, _child_cpu_s() - cpu0, rc == 0
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _stages(walls: dict[str, float]) -> dict[str, float]:
    """The benchmark's stage names from a VerifyResult's stage_wall_s (s; absent stages are 0)."""
    host = walls.get("compile.slim.main.cpp", 0.0) + walls.get("compile.main.cpp", 0.0)
    device = walls.get("compile.slim.cuda.cu", 0.0) + walls.get("compile.cuda.cu", 0.0)
    return {
        "parse_static": walls.get("parse", 0.0) + walls.get("static", 0.0),
        "host_parse": host,
        "device_compile": device,
        "link": walls.get("compile.link", 0.0),
        "load": walls.get("run.init", 0.0) + walls.get("run.load", 0.0),
        "run_compare": walls.get("run.correctness", 0.0),
        "time": walls.get("run.timing", 0.0),
        "verdict": sum(v for k, v in walls.items() if k in ("parse", "static", "compile", "run")),
    }


def why_not(r: VerifyResult, *, compile_only: bool) -> dict[str, object]:
    """For a verdict that is not the expected one (`correct`, or `compiled` without a run): its first
    error diagnostics and the tail of its error text, printed on stderr too (a bench run shows why)."""
    if r.verdict is Verdict.CORRECT or (compile_only and r.verdict is Verdict.COMPILED):
        return {}
    diags = [
        f"{d.code} (line {d.location.line if d.location else '?'}): {d.message}"
        for d in r.diagnostics
        if d.severity is Severity.ERROR
    ][:3]
    error = (r.error or "").strip()[-1500:]
    print(
        f"[{Path(r.path).name}] verdict {r.verdict.value} at {r.stage.value}:\n  "
        + "\n  ".join(diags or ["(no error diagnostic)"])
        + (f"\n  error text:\n{error}" if error else ""),
        file=sys.stderr,
        flush=True,
    )
    return {"diagnostics": [d[:500] for d in diags], "error_tail": error[-600:] or None}


# build levers to compare in one run (`--variants`): each runs every candidate with a cache of its own
VARIANTS: dict[str, dict[str, object]] = {
    "default": {},  # lean headers, the binding without pybind11, nvcc's front ends side by side
    "no-split": {"split_nvcc": False},  # nvcc's steps one after the other
    "pybind": {"split_nvcc": False, "cabi_binding": False},  # lean headers, pybind11 main.cpp
    # compile-only as it was before checks: every object built, the host compiler's pass included
    "objects": {},
}


@contextlib.contextmanager
def _variant_patch(variant: str) -> Iterator[None]:
    """The "objects" variant: compile_object never takes its check-only path in this block."""
    if variant != "objects":
        yield
        return
    from cudice.verifier.build import compile as compile_module

    real = compile_module.compile_object

    def with_objects(*args: Any, **kwargs: Any) -> Any:
        kwargs["check_only"] = False
        return real(*args, **kwargs)

    compile_module.compile_object = with_objects  # type: ignore[assignment]
    try:
        yield
    finally:
        compile_module.compile_object = real  # type: ignore[assignment]


def bench_candidates(
    config: VerifyConfig,
    n: int,
    skip_load_inline: bool,
    skip_nvcc: bool,
    variants: tuple[str, ...] = ("default",),
    baseline_limit: int = 0,
    step: int = 1,
) -> None:
    """Phase 5, one candidate at a time: cudice (each variant), then plain load_inline (for the first
    `baseline_limit` candidates; all when 0), then plain nvcc."""
    folder = Path(tempfile.mkdtemp(prefix="cudice-bench-kb-"))
    rows: dict[str, list[dict[str, object]]] = {v: [] for v in variants}
    try:
        # every `step`-th template: with step 3, nine candidates cover all seven categories
        for k, cand in enumerate(kb_candidates.candidate(j * step) for j in range(n)):
            no_baseline = skip_load_inline or (baseline_limit > 0 and k >= baseline_limit)
            path = folder / f"{cand.name}.py"
            path.write_text(cand.source)
            for i, variant in enumerate(variants):
                # the first variant keeps the given cache (a warm overlay is not what a new candidate costs)
                vconfig = config.with_(
                    **VARIANTS[variant],
                    **({} if i == 0 else {"cache_dir": config.cache_dir / f"variant-{variant}"}),
                )
                # the baselines run once, with the first variant
                with _variant_patch(variant):
                    rows[variant].append(
                        _one_candidate(vconfig, cand, path, variant, no_baseline or i > 0, skip_nvcc or i > 0)
                    )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    for variant in variants:
        result(
            "candidates_summary",
            variant=variant,
            **summarize(rows[variant], compile_only=config.compile_only or not gpu_available()),
        )


def _one_candidate(
    config: VerifyConfig,
    cand: kb_candidates.Candidate,
    path: Path,
    variant: str,
    skip_load_inline: bool,
    skip_nvcc: bool,
) -> dict[str, object]:
    """One verify of `path` with `config`, and the baselines asked for; the row is printed and returned."""
    # with ≥ 8 cores the baseline builds beside cudice (each uses ≤ 2 cores): same run, half the time
    beside = None if skip_load_inline or (os.cpu_count() or 2) < 8 else PlainLoadInline(path)
    cpu0, t0 = _child_cpu_s(), time.perf_counter()
    r = verify(path, config=config, warm_judge=True)  # the CLI's path
    row: dict[str, object] = {
        "candidate": cand.name,
        "category": cand.category,
        "variant": variant,
        "verdict": r.verdict.value,
        "cudice_s": time.perf_counter() - t0,
        "cudice_cpu_s": _child_cpu_s() - cpu0,
        "fallback": "compile.slim.cuda.cu" in r.stage_wall_s
        and ("compile.cuda.cu" in r.stage_wall_s or "compile.main.cpp" in r.stage_wall_s),
        **{f"stage_{k}_s": v for k, v in _stages(r.stage_wall_s).items()},
        # the run stage's own phases (judge.py): where a GPU verdict's seconds go past the build
        "run_walls": {k[4:]: round(v, 3) for k, v in sorted(r.stage_wall_s.items()) if k.startswith("run.")},
    }
    row.update(why_not(r, compile_only=config.compile_only or not gpu_available()))
    if beside is not None:  # CPU seconds of concurrent children cannot be told apart: wall only
        li_s, li_ok = beside.wait()
        row.update(load_inline_s=li_s, load_inline_ok=li_ok, side_by_side=True)
    elif not skip_load_inline:
        cpu0 = _child_cpu_s()
        li_s, li_ok = PlainLoadInline(path).wait()
        row.update(load_inline_s=li_s, load_inline_ok=li_ok, load_inline_cpu_s=_child_cpu_s() - cpu0)
    if not skip_nvcc:
        nv_s, nv_cpu, nv_ok = plain_nvcc_s(cand.kernel_cu, config.arch_list[0])
        row.update(nvcc_s=nv_s, nvcc_cpu_s=nv_cpu, nvcc_ok=nv_ok)
    result("candidate", **row)
    return row


def summarize(rows: list[dict[str, object]], compile_only: bool) -> dict[str, object]:
    """p50/p95 time to verdict, verdicts/min (one at a time), stage medians and ratios over `rows`."""

    def col(key: str) -> list[float]:
        return [float(r[key]) for r in rows if isinstance(r.get(key), (int, float))]  # type: ignore[arg-type]

    out: dict[str, object] = {
        "num_candidates": len(rows),
        "compile_only": compile_only,
        "verdicts": {
            v: sum(1 for r in rows if r["verdict"] == v) for v in sorted({str(r["verdict"]) for r in rows})
        },
        "num_fallback": sum(1 for r in rows if r.get("fallback")),
    }
    for who in ("cudice", "load_inline", "nvcc"):
        walls = col(f"{who}_s")
        if walls:
            out.update(
                {
                    f"{who}_p50_s": _pct(walls, 0.5),
                    f"{who}_p95_s": _pct(walls, 0.95),
                    f"{who}_per_min": 60 * len(walls) / sum(walls),
                    f"{who}_cpu_p50_s": _pct(col(f"{who}_cpu_s"), 0.5),
                }
            )
    out["stage_p50_s"] = (
        {k[6:-2]: _pct(col(k), 0.5) for k in rows[0] if k.startswith("stage_")} if rows else {}
    )
    if "load_inline_p50_s" in out:
        out["ratio_load_inline_over_cudice_p50"] = float(out["load_inline_p50_s"]) / float(
            out["cudice_p50_s"]
        )  # type: ignore[arg-type]
    if "nvcc_p50_s" in out:
        out["ratio_cudice_over_nvcc_p50"] = float(out["cudice_p50_s"]) / float(out["nvcc_p50_s"])  # type: ignore[arg-type]
        out["ratio_cudice_over_nvcc_cpu_p50"] = float(out["cudice_cpu_p50_s"]) / float(out["nvcc_cpu_p50_s"])  # type: ignore[arg-type]
    return out


BROKEN = (  # a compile error in a candidate's own device code (`--pool-broken`)
    "__global__",
    "__device__ float bench_broken_helper() { return undeclared_in_bench; }\n__global__",
)


def bench_candidates_pool(
    config: VerifyConfig,
    n: int,
    skip_load_inline: bool,
    offset: int = 0,
    baseline_limit: int = 0,
    prefill: bool = False,
    broken_every: int = 0,
) -> None:
    """(GPU) `n` candidates (from index `offset`: none the per-candidate phase built) through
    VerifyPool, then plain load_inline builds of the first `baseline_limit` of them (all when 0),
    as many at once as the pool had compile workers; each side's rate is its own count over its
    own wall time. `prefill`: each chunk of `batch.MAX_BATCH` candidates goes to
    `VerifyPool.prefill` (their checks in one nvcc pass) just before it is submitted, as the RL
    reward does. `broken_every` k > 0: every k-th candidate gets a compile error in its own device
    code (`BROKEN`), as most RL rollouts have one."""
    from cudice.verifier.backends import VerifyJob
    from cudice.verifier.build.batch import MAX_BATCH

    folder = Path(tempfile.mkdtemp(prefix="cudice-bench-kbpool-"))
    cands = kb_candidates.generate(offset + n)[offset:]
    paths = []
    for i, c in enumerate(cands):
        paths.append(folder / f"{c.name}.py")
        broken = broken_every > 0 and i % broken_every == 0 and BROKEN[0] in c.source
        paths[-1].write_text(c.source.replace(*BROKEN, 1) if broken else c.source)
    workers = default_compile_workers()
    decided = prefill_s = 0.0
    try:
        t0 = time.perf_counter()
        with VerifyPool(config, num_compile_workers=workers) as pool:
            futs = []
            for k in range(0, len(paths), MAX_BATCH if prefill else max(len(paths), 1)):
                chunk = paths[k : k + MAX_BATCH] if prefill else paths
                if prefill:
                    t1 = time.perf_counter()
                    report = pool.prefill([VerifyJob(p, key=str(p)) for p in chunk])
                    prefill_s += time.perf_counter() - t1
                    decided += report.decided if report is not None else 0
                futs += [pool.submit(p, key=str(p)) for p in chunk]
            for k, fut in enumerate(as_completed(futs), 1):  # progress: a killed run still shows its rate
                r = fut.result()
                print(
                    f"pool {k}/{n} {Path(r.path).stem}: {r.verdict.value} "
                    f"at {time.perf_counter() - t0:.1f} s",
                    flush=True,
                )
            results = [f.result() for f in futs]
        wall = time.perf_counter() - t0
        verdicts: dict[str, int] = {}
        for r in results:
            verdicts[r.verdict.value] = verdicts.get(r.verdict.value, 0) + 1
        fields: dict[str, object] = {
            "num_candidates": n,
            "wall_s": wall,
            "cudice_per_min": n / wall * 60,
            "verdicts": verdicts,
            "compile_workers": workers,
            "prefill": prefill,
            "broken_every": broken_every,
        }
        if prefill:
            fields.update(prefill_s=prefill_s, decided_by_batch=int(decided))
        failures = [
            {"candidate": Path(r.path).stem, "verdict": r.verdict.value, **why_not(r, compile_only=False)}
            for r in results
            if r.verdict is not Verdict.CORRECT
        ]
        if failures:
            fields["failures"] = failures[:5]
        if not skip_load_inline:
            base = paths[: baseline_limit or n]
            t0 = time.perf_counter()
            done = []
            for i in range(0, len(base), workers):  # as many builds at once as cudice had compile workers
                batch = [PlainLoadInline(p) for p in base[i : i + workers]]
                done += [b.wait()[1] for b in batch]
            li_wall = time.perf_counter() - t0
            fields.update(
                load_inline_candidates=len(base),
                load_inline_wall_s=li_wall,
                load_inline_per_min=len(base) / li_wall * 60,
                load_inline_ok=sum(done),
                ratio_per_min=(n / wall) / (len(base) / li_wall),
            )
        result("candidates_pool", **fields)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _warm_up(config: VerifyConfig, index: int) -> None:
    """Compile-only verdicts of candidates `index` (with `BROKEN`'s error) and `index + 1`, their
    checks batched: the toolchain probe, the header lists, the error lists and the prefix cache that
    a long-lived trainer's cache holds are then warm for the runs that follow (`_wiped` keeps them)."""
    from cudice.verifier.backends import VerifyJob, verify_all

    folder = Path(tempfile.mkdtemp(prefix="cudice-bench-warm-"))
    try:
        jobs = []
        for i, c in enumerate(kb_candidates.generate(index + 2)[index:]):
            path = folder / f"{c.name}.py"
            path.write_text(c.source.replace(*BROKEN, 1) if i == 0 else c.source)
            jobs.append(VerifyJob(path))
        t0 = time.perf_counter()
        with VerifyPool(config.with_(compile_only=True), num_compile_workers=2, gpus=[]) as pool:
            verdicts = [r.verdict.value for r in verify_all(pool, jobs, prefill=len(jobs))]
        result("pool_warm_up", wall_s=time.perf_counter() - t0, verdicts=verdicts)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _wiped(config: VerifyConfig) -> VerifyConfig:
    """`config`, its cache's compile outcomes, objects, libraries and batches removed (the toolchain
    probe, the header lists and the prefix cache kept warm, as in a long-lived trainer)."""
    for folder in ("objects", "libs", "batch"):
        shutil.rmtree(config.cache_dir / folder, ignore_errors=True)
    return config


def _checks(config: VerifyConfig, modules: list[tuple[Any, str]], n: int) -> dict[str, object]:
    """Compile-only checks of `modules`, one at a time (n=1) or `check_many` n at a time, from a cache
    whose objects were wiped: wall and CPU s per candidate (CPU: this process's children)."""
    from cudice.verifier.build.batch import BatchReport, check_many
    from cudice.verifier.build.compile import build_module

    shutil.rmtree(config.cache_dir / "objects", ignore_errors=True)
    report = BatchReport()
    cpu0, t0 = _child_cpu_s(), time.perf_counter()
    if n == 1:
        results = [build_module(m, path, config, link=False) for m, path in modules]
    else:
        results = []
        for k in range(0, len(modules), n):
            results += check_many(modules[k : k + n], config, max_batch=n, report=report)
    wall, cpu = time.perf_counter() - t0, _child_cpu_s() - cpu0
    return {
        "n": n,
        "candidates": len(modules),
        "wall_per_candidate_s": wall / len(modules),
        "cpu_per_candidate_s": cpu / len(modules),
        "ok": sum(r.ok for r in results),
        "decided_by_batch": report.decided,
        "rounds": report.rounds,
        "single_checks": len(modules) - report.decided if n > 1 else len(modules),
        "load_avg": os.getloadavg(),
    }


def bench_batched(config: VerifyConfig, limit: int, sizes: tuple[int, ...]) -> None:
    """Phase 6: single vs batched compile-only checks of `limit` distinct candidates, and plain nvcc."""
    from cudice.verifier.build.generated import from_call
    from cudice.verifier.source.document import parse_document

    cands = [kb_candidates.candidate(j) for j in range(limit)]
    modules = []
    for c in cands:
        doc = parse_document(c.source, f"/virtual/{c.name}.py")
        module = from_call(doc, doc.load_inline_calls[0])
        assert module is not None
        modules.append((module, doc.path))
    # warm what a long-lived evaluator keeps (toolchain probe, header lists, prefix cache): not measured
    _checks(config, modules[:2], 2)
    rows = [_checks(config, modules, n) for n in (1, *sizes)]
    nvcc = [plain_nvcc_s(c.kernel_cu, config.arch_list[0]) for c in cands]
    base_wall = sum(w for w, _, _ in nvcc) / len(nvcc)
    base_cpu = sum(c for _, c, _ in nvcc) / len(nvcc)
    for row in rows:
        result(
            "batched_checks",
            **row,
            nvcc_wall_per_candidate_s=base_wall,
            nvcc_cpu_per_candidate_s=base_cpu,
            wall_vs_nvcc=float(row["wall_per_candidate_s"]) / base_wall,  # type: ignore[arg-type]
            wall_vs_single=float(row["wall_per_candidate_s"]) / float(rows[0]["wall_per_candidate_s"]),  # type: ignore[arg-type]
        )


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--skip-load-inline", action="store_true")
    ap.add_argument(
        "--phase",
        choices=("all", "compile", "gpu", "throughput", "repeat", "candidates", "batched"),
        default="all",
        help="compile: 1-2; throughput: 3; repeat: 4; gpu: 3-4; candidates: 5; batched: 6 "
        "(phases can run side by side)",
    )
    ap.add_argument(
        "--batched",
        default="4,8,16",
        help="phase 6: comma-separated batch sizes N of the batched compile-only checks",
    )
    ap.add_argument("--compile-only", action="store_true", help="phase 5: stop each verdict after compiling")
    ap.add_argument("--limit", type=int, default=32, help="phase 5: number of distinct candidates")
    ap.add_argument("--pool", action="store_true", help="phase 5 (GPU): also the pool throughput step")
    ap.add_argument("--pool-limit", type=int, default=32, help="phase 5: candidates of the pool step")
    ap.add_argument("--pool-only", action="store_true", help="phase 5: only the pool step")
    ap.add_argument(
        "--pool-prefill",
        choices=("off", "on", "both"),
        default="off",
        help="phase 5: the pool step with VerifyPool.prefill off, on, or both in one run (each from a "
        "cache whose objects were wiped)",
    )
    ap.add_argument(
        "--pool-broken",
        type=int,
        default=0,
        help="phase 5: every K-th pool candidate gets a compile error (0: none)",
    )
    ap.add_argument(
        "--pool-baseline-limit",
        type=int,
        default=0,
        help="phase 5: plain load_inline builds of only the first N pool candidates (0: all)",
    )
    ap.add_argument(
        "--baseline-limit",
        type=int,
        default=0,
        help="phase 5: plain load_inline beside only the first N candidates, one at a time (0: all)",
    )
    ap.add_argument(
        "--step", type=int, default=1, help="phase 5: candidates 0, step, 2*step, ... (3: every category)"
    )
    ap.add_argument("--skip-nvcc", action="store_true", help="phase 5: no plain nvcc baseline")
    ap.add_argument("--pch", action="store_true", help="build main.cpp with the slim headers' gcc PCH")
    ap.add_argument(
        "--variants",
        default="default",
        help=f"phase 5: comma-separated build variants to compare in the run ({', '.join(VARIANTS)})",
    )
    args = ap.parse_args()
    if args.limit < 1:
        ap.error(f"--limit {args.limit} must be >= 1")
    cache = Path(tempfile.mkdtemp(prefix="cudice-bench-cache-"))
    config = VerifyConfig(
        cache_dir=cache, max_jobs=os.cpu_count() or 2, compile_only=args.compile_only, host_pch=args.pch
    )
    result(
        "machine",
        cpus=os.cpu_count(),
        gpu=gpu_available(),
        date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    )
    steps: list[tuple[str, Callable[[], None]]] = []
    if args.phase in ("all", "compile"):
        steps += [
            ("first_diagnostic", lambda: bench_first_diagnostic(config, args.skip_load_inline)),
            ("full_verdict", lambda: bench_full_verdict(config, args.skip_load_inline)),
        ]
    if args.phase == "batched":
        sizes = tuple(int(v) for v in args.batched.split(",") if v.strip())
        if not sizes or min(sizes) < 2:
            ap.error(f"--batched {args.batched!r}: batch sizes must be integers >= 2, e.g. 4,8,16")
        steps.append(("batched", lambda: bench_batched(config.with_(compile_only=True), args.limit, sizes)))
    if args.phase == "candidates":
        if not args.pool_only:
            variants = tuple(v.strip() for v in args.variants.split(",") if v.strip())
            unknown = [v for v in variants if v not in VARIANTS]
            if unknown:
                ap.error(f"--variants: unknown {', '.join(unknown)}; choose from {', '.join(VARIANTS)}")
            steps.append(
                (
                    "candidates",
                    lambda: bench_candidates(
                        config,
                        args.limit,
                        args.skip_load_inline,
                        args.skip_nvcc,
                        variants,
                        baseline_limit=args.baseline_limit,
                        step=args.step,
                    ),
                )
            )
        if (args.pool or args.pool_only) and gpu_available() and not args.compile_only:
            modes = {"off": (False,), "on": (True,), "both": (False, True)}[args.pool_prefill]
            first = 0 if args.pool_only else args.limit * args.step
            if len(modes) > 1:  # neither side pays the cache's first probes
                steps.append(("pool_warm_up", lambda: _warm_up(config, first + args.pool_limit)))
            for k, prefill in enumerate(modes):
                steps.append(
                    (
                        "candidates_pool",
                        lambda prefill=prefill, k=k: bench_candidates_pool(
                            _wiped(config) if len(modes) > 1 else config,
                            args.pool_limit,
                            args.skip_load_inline or k > 0,  # one load_inline baseline
                            offset=first,
                            baseline_limit=args.pool_baseline_limit,
                            prefill=prefill,
                            broken_every=args.pool_broken,
                        ),
                    )
                )
        elif args.pool or args.pool_only:
            result("candidates_pool", skipped="needs a GPU and no --compile-only")
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
