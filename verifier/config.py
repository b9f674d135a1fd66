"""`VerifyConfig`: the run-wide settings of a verification (frozen, validated on creation).

Per-call inputs (the file, its text, an explicit reference) are arguments of `verify()`, not
config. Every invalid value raises `ValueError` naming the field, the rule and a fix.

Across a process boundary (the language server's verification workers) a config travels as JSON:
`overrides()` gives the fields that differ from the defaults, in JSON types, and `from_dict` builds
the config back, refusing a key that is not a field (`ValueError` naming it and the valid ones)
instead of dropping it. Defaults that depend on the environment (`cache_dir`) are then the
receiving process's.

Cache folders: `CUDICE_CACHE_DIR` names one root (else `$XDG_CACHE_HOME/cudice`, else
`~/.cache/cudice`, `cache_root()`); each user of it has a named subfolder (`CACHE_SUBDIRS`): the
verifier's builds in `build/` (`cache_dir`'s default), the language server's verdicts in
`results/` (server/results.py).

Tolerance: KernelBench v0/v0.1 and DICE's evaluation use atol = rtol = 1e-2 for fp32; that is
the default here (the reference runs with TF32 disabled, so tighter values are meaningful too).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

_ARCH = re.compile(r"^\d+\.\d+a?(\+PTX)?$")

# The named subfolders of the cache root, by what they hold.
CACHE_SUBDIRS = {"build": "build", "results": "results"}


def cache_root() -> Path:
    """The one cudice cache folder: $CUDICE_CACHE_DIR, else $XDG_CACHE_HOME/cudice, else ~/.cache/cudice."""
    env = os.environ.get("CUDICE_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "cudice"


def cache_subdir(kind: str) -> Path:
    """The folder of `kind` (a key of `CACHE_SUBDIRS`) under `cache_root()`."""
    return cache_root() / CACHE_SUBDIRS[kind]


def default_cache_dir() -> Path:
    """The build cache: `cache_root()/build`."""
    return cache_subdir("build")


@dataclass(frozen=True, slots=True)
class VerifyConfig:
    """How to verify. Units are in the names; times in seconds, memory in MiB."""

    num_trials: int = 6  # correctness trials, each with fresh seeded inputs (one per input distribution)
    atol: float = 1e-2
    rtol: float = 1e-2
    seed: int = 42
    compile_only: bool = False
    # build and link what a run would load, then stop before running it (verdict `compiled`): the
    # editor's build of unsaved text on a GPU box (server/prebuild.py)
    build_only: bool = False
    timeout_s: float = 300.0  # whole run stage (load + correctness + timing) in the child
    compile_timeout_s: float = 600.0
    memory_limit_mib: int = 32768  # RLIMIT_AS of the child is not used with CUDA; see run/sandbox.py
    required_speedup: float = 1.0  # what the RL reward asks for; reported, never a verdict
    arch_list: tuple[str, ...] = ("9.0",)  # TORCH_CUDA_ARCH_LIST entries
    timing_warmup_ms: float = 250.0  # warm-up by time, not count (triton #2306)
    # timed repetitions: each times one short and one long batch of fresh-input calls per
    # implementation, interleaved; the per-call time is the median slope (run/judge.py)
    timing_num_trials: int = 10
    timing_batch_ms: float = 10.0  # the short batch's target length; the long one is twice as long
    timing_stage_mib: int = 4096  # bound on the input and output sets staged for one repetition
    # how a repetition's sealed sets reach the runners, and a correctness trial's inputs and the
    # candidate's outputs of 8 MiB or more travel: "shared" (a GPU buffer made for one receiver,
    # passed as a POSIX fd: run/shared_staging.py; without a GPU, cuda-bindings or a driver that
    # exports fds, or on any failure, over the socket) or "socket" (always through host memory and
    # the runner's socket). docs/benchmarks.md compares the two on a GPU for staging: ~0.01 s
    # against 1.6-1.9 s per runner and repetition for 2 GiB of sets, the same verdicts
    timing_staging: str = "shared"
    # the run stage holds its GPU's lease exclusively from after the runners' load to the verdict
    # (run/gpu_lease.py; it waits for it up to a third of timeout_s, else runs as any run does): no
    # other verification's work on that GPU meanwhile. api.py sets it for the one repetition of a
    # run that ran out of GPU memory while other verifications shared the GPU
    run_alone: bool = False
    # bound on the per-call bias between two runner processes that no interval sees (the judge
    # derives the candidate's time from their difference): a candidate time this bias would move by
    # more than the promised fidelity is unresolved (run/judge.py `bias_too_large`). The default
    # covers the shifts between runners seen against the in-process harness (docs/benchmarks.md); a
    # larger gap between lower quartiles is a difference of shape, which the quantile-agreement rule
    # (`estimates_disagree`) withholds; 0 turns it off
    timing_runner_bias_us: float = 10.0
    # "warm": L2 keeps what the previous call left (KernelBench's fast_p tables, DICE's evaluation);
    # "cold": an L2 flush of l2_flush_mib before every timed call
    l2_policy: str = "warm"
    l2_flush_mib: int = 256
    suspicious_speedup: float = 10.0
    # device-memory copy GB/s for the speed-of-light bound, that of the GPUs docs/benchmarks.md ran on
    peak_bandwidth_gb_s: float = 4300.0
    max_output_bytes: int = 64 * 1024  # stdout/stderr kept from a child
    cache_dir: Path = field(default_factory=default_cache_dir)
    nvcc: str = "nvcc"
    max_jobs: int = 2  # compiler processes per build (main.cpp and cuda.cu compile side by side)
    # gcc precompiled header of the slim main.cpp headers, built once per cache (large, and costly
    # to build); saves CPU on every new candidate's main.cpp (headers.ensure_host_pch;
    # docs/benchmarks.md)
    host_pch: bool = False
    # build `cuda.cu` plus a C-ABI shim instead of a pybind11 `main.cpp` where the module allows it
    # (verifier/build/cabi.py): less CPU per new candidate; False always builds the pybind11 way
    cabi_binding: bool = True
    # run nvcc's host front end (cudafe++) and device compiler (cicc) side by side (build/nvcc_split.py)
    split_nvcc: bool = True
    # after a successful compile, read what the candidate's host objects call from their symbols
    # (build/host_symbols.py: ATen ops, torch modules, threads, whatever the spelling); a finding is
    # a `static_violation`. In compile-only mode this compiles the objects a check skips
    host_symbols: bool = True
    static_policy: str = "default"  # "strict" | "default" | "lenient" (static/policy.py, docs/anticheat.md)
    # a static violation's modules are still compiled, and compiler errors win the verdict
    # (`compile_error`, the static errors as warnings: api.py); False stops at the violation, as
    # the RL reward does (both score 0, and a violation then costs no compile)
    compile_violations: bool = True
    # "fp32": fp32/fp64 outputs held to fp32 arithmetic (no TF32, fp16, bf16); "lenient": the
    # element and norm tolerances only (run/tolerance.py)
    precision: str = "fp32"

    def __post_init__(self) -> None:
        _require(
            self.num_trials >= 1,
            "num_trials",
            self.num_trials,
            "must be ≥ 1",
            "use 5 (KernelBench's default)",
        )
        _require(
            self.atol >= 0 and self.rtol >= 0, "atol/rtol", (self.atol, self.rtol), "must be ≥ 0", "use 1e-2"
        )
        _require(self.timeout_s > 0, "timeout_s", self.timeout_s, "must be > 0", "use e.g. 300")
        _require(
            self.compile_timeout_s > 0, "compile_timeout_s", self.compile_timeout_s, "must be > 0", "use 600"
        )
        _require(
            self.memory_limit_mib >= 512,
            "memory_limit_mib",
            self.memory_limit_mib,
            "must be ≥ 512",
            "give the child at least 512 MiB",
        )
        _require(
            self.required_speedup > 0, "required_speedup", self.required_speedup, "must be > 0", "use 1.0"
        )
        _require(
            bool(self.arch_list) and all(_ARCH.match(a) for a in self.arch_list),
            "arch_list",
            self.arch_list,
            "must be non-empty entries like '9.0' or '9.0+PTX'",
            "use ('9.0',) for H100/H200",
        )
        _require(
            self.timing_num_trials >= 3,
            "timing_num_trials",
            self.timing_num_trials,
            "must be ≥ 3",
            "use 10 (each repetition times a short and a long batch per implementation)",
        )
        _require(
            self.timing_warmup_ms >= 0, "timing_warmup_ms", self.timing_warmup_ms, "must be ≥ 0", "use 100"
        )
        _require(self.l2_flush_mib >= 0, "l2_flush_mib", self.l2_flush_mib, "must be ≥ 0", "use 256")
        _require(
            self.l2_policy in ("warm", "cold"),
            "l2_policy",
            self.l2_policy,
            "must be warm or cold",
            "use warm",
        )
        _require(self.timing_batch_ms > 0, "timing_batch_ms", self.timing_batch_ms, "must be > 0", "use 10")
        _require(
            self.timing_stage_mib > 0, "timing_stage_mib", self.timing_stage_mib, "must be > 0", "use 4096"
        )
        _require(
            self.timing_staging in ("socket", "shared"),
            "timing_staging",
            self.timing_staging,
            "must be 'socket' or 'shared'",
            "use 'shared' (the default: GPU memory shared with each runner, the socket where that "
            "cannot work) or 'socket'",
        )
        _require(
            self.timing_runner_bias_us >= 0,
            "timing_runner_bias_us",
            self.timing_runner_bias_us,
            "must be >= 0",
            "use 40 (0 turns the rule off)",
        )
        _require(
            self.suspicious_speedup > 1,
            "suspicious_speedup",
            self.suspicious_speedup,
            "must be > 1",
            "use 10",
        )
        _require(
            self.static_policy in ("strict", "default", "lenient"),
            "static_policy",
            self.static_policy,
            "must be 'strict', 'default' or 'lenient'",
            "see docs/anticheat.md",
        )
        _require(
            self.precision in ("fp32", "lenient"),
            "precision",
            self.precision,
            "must be 'fp32' or 'lenient'",
            "use 'fp32' (the default), or 'lenient' to accept TF32/fp16 arithmetic for fp32 references",
        )
        _require(self.max_jobs >= 1, "max_jobs", self.max_jobs, "must be ≥ 1", "use the number of cores")

    @property
    def arch_list_env(self) -> str:
        """The value for TORCH_CUDA_ARCH_LIST."""
        return ";".join(self.arch_list)

    def with_(self, **changes: Any) -> VerifyConfig:
        return replace(self, **changes)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> VerifyConfig:
        """The config whose fields `raw` sets (the rest default), from Python or JSON values (a list
        for `arch_list`, a string for `cache_dir`). A key that is not a field raises `ValueError`
        naming it and the valid ones; invalid values raise as in the constructor."""
        names = [f.name for f in fields(cls)]
        unknown = sorted(str(k) for k in raw if k not in names)
        if unknown:
            named = ", ".join(map(repr, unknown))
            raise ValueError(f"VerifyConfig has no field {named}; valid fields: {', '.join(names)}.")
        values = dict(raw)
        if isinstance(values.get("arch_list"), list):
            values["arch_list"] = tuple(values["arch_list"])
        if isinstance(values.get("cache_dir"), str):
            values["cache_dir"] = Path(values["cache_dir"])
        return cls(**values)

    def overrides(self) -> dict[str, Any]:
        """The fields that differ from a default `VerifyConfig()` here, in JSON types (`from_dict`
        reads them back; the receiving process supplies its own defaults for the rest)."""
        default = VerifyConfig()
        found: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value == getattr(default, f.name):
                continue
            found[f.name] = (
                str(value) if isinstance(value, Path) else list(value) if isinstance(value, tuple) else value
            )
        return found


def _require(ok: bool, name: str, value: object, rule: str, fix: str) -> None:
    if not ok:
        raise ValueError(f"VerifyConfig.{name}={value!r} {rule}; {fix}.")
