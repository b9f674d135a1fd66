"""CPU thread defaults for running the model on a CPU: one OpenMP/MKL thread per physical core.

Used where a process is about to load the model on a CPU: the server's model worker
(`cudice.server.workers.model_child`) and `cudice generate` (`model/cli.py`). `cpu_thread_env`
must be applied before torch is imported (OpenMP reads the environment once);
`apply_torch_threads` after. Importing this module does not import torch.

Not covered: GPU work (these settings only concern CPU thread pools) and NUMA placement.
"""

from __future__ import annotations

import contextlib
import os


def physical_cpus() -> int:
    """Physical cores this process may run on: its CPU affinity divided by the SMT width
    (Linux `sched_getaffinity` and sysfs topology; `os.cpu_count()` elsewhere). At least 1."""
    try:
        logical = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        logical = os.cpu_count() or 1
    smt = 1
    with contextlib.suppress(OSError, ValueError):
        with open("/sys/devices/system/cpu/cpu0/topology/thread_siblings_list") as f:
            spec = f.read().strip()  # "0,4" or "0-1"
        siblings: set[int] = set()
        for part in spec.split(","):
            first, _, last = part.partition("-")
            siblings.update(range(int(first), int(last or first) + 1))
        smt = len(siblings)
    return max(1, logical // max(1, smt))


def cpu_thread_env(num_threads: int | None = None) -> dict[str, str]:
    """Thread defaults for CPU inference in a child process, each only where the user set none:
    one OpenMP/MKL thread per physical core, and passive waiting, so a busy box is not made
    slower by spinning threads (torch's default oversubscribes a loaded small box many times over;
    docs/benchmarks.md)."""
    n = str(num_threads or physical_cpus())
    wanted = {"OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n, "OMP_WAIT_POLICY": "PASSIVE"}
    return {k: v for k, v in wanted.items() if k not in os.environ}


def apply_torch_threads() -> int:
    """After torch is imported in a CPU process: intra-op threads = OMP_NUM_THREADS (set by
    `cpu_thread_env`, or by the user), one inter-op thread. Returns the intra-op count."""
    import torch

    n = int(os.environ.get("OMP_NUM_THREADS") or physical_cpus())
    torch.set_num_threads(max(1, n))
    with contextlib.suppress(RuntimeError):  # only settable before the first parallel op
        torch.set_num_interop_threads(1)
    return max(1, n)
