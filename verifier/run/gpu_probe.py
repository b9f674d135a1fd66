"""The one GPU probe: can kernels run on this machine, on how many GPUs, and if not, why not.

Every part of cudice that decides whether to run a kernel asks here: the verifier's `verify()`
(api.py), the pool's size (pool.py), the language server's compile-only notice (server/core.py),
the CLIs and benchmarks. The answer, a `GpuProbe`, is decided in this order:

1. `CUDICE_GPU=0`: no GPU, whatever is installed (kernels are compiled, never run);
2. `CUDICE_GPU=1`: a GPU is assumed (the hardware count when the probe finds some, else 1), for
   containers whose detection is wrong and for the end-to-end tests, whose workers are fakes;
3. unset: the hardware probe: `nvidia-smi -L` when it is on PATH, else the `/dev/nvidiaN` device
   nodes a container gets without the tool.

Any other value of `CUDICE_GPU` is reported (a warning in the log, once) and the probe decides.
The variable is read on every call (cheap); the hardware probe runs once per process, at most
`SMI_TIMEOUT_S` seconds. The language server starts it on a
thread when it is created (`start_hardware_probe()`), so its event loop waits only when a first
verification comes before a slow probe has finished. This module imports nothing of torch or cudice.

Not covered: whether torch's CUDA works with the driver found (the judge reports that as
`verify.no_gpu` when a run finds no device); `CUDA_VISIBLE_DEVICES` (the count is of the GPUs
the driver lists; pool.py places each run with `CUDA_VISIBLE_DEVICES` itself); non-NVIDIA GPUs.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final, Literal

ENV_VAR: Final = "CUDICE_GPU"
SMI_TIMEOUT_S = 20.0  # seconds; `nvidia-smi` may wait for a driver that is still initialising
_NOT_RUN = "so kernels are compiled but not run"
_DEVICE_NODE = re.compile(r"nvidia[0-9]+")

log = logging.getLogger(__name__)
Source = Literal["CUDICE_GPU", "nvidia-smi", "device nodes", "none"]


@dataclass(frozen=True, slots=True)
class GpuProbe:
    """What the probe found. `reason` is None exactly when `num_gpus > 0`; otherwise it says what
    was missing, that kernels are compiled but not run, and how to change that."""

    num_gpus: int
    reason: str | None
    source: Source

    def __post_init__(self) -> None:
        assert (self.num_gpus > 0) == (self.reason is None), self

    @property
    def is_usable(self) -> bool:
        return self.num_gpus > 0


Run = Callable[..., "subprocess.CompletedProcess[str]"]


def probe_hardware(
    which: Callable[[str], str | None] = shutil.which, run: Run = subprocess.run, dev_dir: str = "/dev"
) -> GpuProbe:
    """The hardware probe alone (no `CUDICE_GPU`, no cache): `nvidia-smi -L`, else device nodes."""
    smi = which("nvidia-smi")
    if smi is None:
        try:
            nodes = [n for n in os.listdir(dev_dir) if _DEVICE_NODE.fullmatch(n)]
        except OSError:
            nodes = []
        if nodes:
            return GpuProbe(len(nodes), None, "device nodes")
        return GpuProbe(
            0,
            f"no NVIDIA GPU on this machine (no nvidia-smi on PATH, no {dev_dir}/nvidia0), "
            f"{_NOT_RUN}; set {ENV_VAR}=1 if a GPU is there but hidden from detection",
            "none",
        )
    try:
        out = run([smi, "-L"], capture_output=True, text=True, timeout=SMI_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return GpuProbe(
            0,
            f"`nvidia-smi -L` did not answer within {SMI_TIMEOUT_S:g} s (the NVIDIA driver "
            f"hangs), {_NOT_RUN}; check the driver (`nvidia-smi`), or set {ENV_VAR}=1",
            "nvidia-smi",
        )
    except OSError as exc:
        return GpuProbe(
            0,
            f"`{smi} -L` could not start ({exc}), {_NOT_RUN}; reinstall the NVIDIA driver "
            f"utilities, or set {ENV_VAR}=1",
            "nvidia-smi",
        )
    count = sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))
    if out.returncode != 0:
        said = (out.stderr or out.stdout).strip().splitlines()
        return GpuProbe(
            0,
            f"`nvidia-smi -L` failed (exit {out.returncode}: {said[0] if said else 'no output'}), "
            f"so the NVIDIA driver is not usable and kernels are compiled but not run; "
            f"fix the driver (run `nvidia-smi`), or set {ENV_VAR}=1",
            "nvidia-smi",
        )
    if count == 0:
        return GpuProbe(
            0, f"`nvidia-smi -L` lists no GPU, {_NOT_RUN}; set {ENV_VAR}=1 if one is there", "nvidia-smi"
        )
    return GpuProbe(count, None, "nvidia-smi")


_lock = threading.Lock()  # held while the probe runs: concurrent callers wait for its one answer
_start_lock = threading.Lock()
_warned: set[str] = set()  # the unknown CUDICE_GPU values already warned about
_hardware: GpuProbe | None = None
_started: threading.Thread | None = None


def hardware() -> GpuProbe:
    """`probe_hardware()`, run once per process (callers on several threads wait for one run)."""
    global _hardware
    with _lock:
        if _hardware is None:
            _hardware = probe_hardware()
        return _hardware


def start_hardware_probe() -> None:
    """Start the hardware probe on a daemon thread, so that the first `probe()` finds it done."""
    global _started
    with _start_lock:
        if _hardware is not None or _started is not None:
            return
        _started = threading.Thread(target=hardware, name="cudice-gpu-probe", daemon=True)
        _started.start()


def forget() -> None:
    """Drop the cached hardware probe and the warnings given (tests; a process that hot-plugs GPUs)."""
    global _hardware, _started
    with _start_lock, _lock:
        _hardware, _started = None, None
        _warned.clear()


def probe(environ: Mapping[str, str] | None = None) -> GpuProbe:
    """The answer for this process: `CUDICE_GPU` first, then the (cached) hardware probe."""
    override = (os.environ if environ is None else environ).get(ENV_VAR, "")
    if override == "0":
        return GpuProbe(0, f"{ENV_VAR}=0 is set, {_NOT_RUN}; unset it to detect the GPU", ENV_VAR)
    if override == "1":
        found = hardware()
        return GpuProbe(max(1, found.num_gpus), None, ENV_VAR)
    if override and override not in _warned:
        _warned.add(override)
        log.warning(
            "%s=%r is neither 0 nor 1 and is ignored: the GPU is detected; set %s=0 to never run "
            "kernels or %s=1 to assume a GPU",
            ENV_VAR,
            override,
            ENV_VAR,
            ENV_VAR,
        )
    return hardware()


def gpu_available() -> bool:
    """Whether kernels run here (`probe().is_usable`)."""
    return probe().is_usable


def count_gpus() -> int:
    """How many GPUs the run stage may use (`probe().num_gpus`; 0 without one)."""
    return probe().num_gpus


def gpu_absent_reason() -> str | None:
    """Why kernels are not run here, or None when they are (`probe().reason`)."""
    return probe().reason
