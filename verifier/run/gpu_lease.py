"""One timing at a time per GPU, across processes: a reader-writer lease keyed by the GPU's UUID.

A timed batch holds the lease exclusively; the other GPU work of a verification (correctness
calls, the judge's own reference runs, staging inputs) holds it shared. So concurrent
`cudice verify`, `cudice eval` and the pool's judges may overlap their correctness runs, but
never run anything of theirs on a GPU while another one's batch is timed there.

Built on `flock(2)` over two files in a folder every cudice process on the machine sees
(`CUDICE_LEASE_DIR`, else `/dev/shm`, else the temporary folder): `gate` is a turnstile — a
timer takes it before waiting for the exclusive lock, so a stream of shared holders cannot
starve it — and `lock` is the reader-writer lock itself. Locks belong to open files, so a process
that dies releases what it held.

Not covered: GPU work of programs other than cudice, and work a candidate's process keeps running
on its own between requests (a persistent kernel): both slow a timed batch down (a false
rejection at worst, never a false `correct`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path


class LeaseTimeout(TimeoutError):
    """The lease could not be had in time (another verification held the GPU too long)."""


def lease_dir() -> Path:
    """Where the lock files live: one folder for every cudice process of this machine."""
    env = os.environ.get("CUDICE_LEASE_DIR")
    if env:
        return Path(env)
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())


def gpu_key(device: str) -> str:
    """A stable key for the GPU behind `device`: its UUID where PyTorch tells it, else name + index."""
    if not device.startswith("cuda"):
        return "cpu"
    import torch

    index = torch.device(device).index
    props = torch.cuda.get_device_properties(torch.cuda.current_device() if index is None else index)
    uuid = getattr(props, "uuid", None)
    raw = str(uuid) if uuid is not None else f"{props.name}-{index or 0}"
    return re.sub(r"[^A-Za-z0-9_.-]", "_", raw)


class GpuLease:
    """The lease of one GPU. `shared()` for GPU work that may overlap, `exclusive()` for a timing."""

    def __init__(self, key: str, folder: Path | None = None, *, timeout_s: float = 600.0) -> None:
        base = folder or lease_dir()
        base.mkdir(parents=True, exist_ok=True)
        self.lock_path = base / f"cudice-gpu-{key}.lock"
        self.gate_path = base / f"cudice-gpu-{key}.gate"
        self.timeout_s = timeout_s
        self.waited_s = 0.0  # total time spent waiting for the lease (reported with the timing)

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        with self._open(self.gate_path) as gate:
            self._take(gate, fcntl.LOCK_EX)
            lock = self._open_file(self.lock_path)
            try:
                self._take(lock, fcntl.LOCK_SH)
            except BaseException:
                os.close(lock)
                raise
            fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            os.close(lock)  # closing releases the lock

    @contextlib.contextmanager
    def exclusive(self, timeout_s: float | None = None) -> Iterator[None]:
        """Hold the lease alone; `timeout_s` bounds the wait instead of the lease's own bound."""
        with self._open(self.gate_path) as gate:
            self._take(gate, fcntl.LOCK_EX, timeout_s)  # new shared holders queue behind this timer
            with self._open(self.lock_path) as lock:
                self._take(lock, fcntl.LOCK_EX, timeout_s)
                yield

    # -- helpers ---------------------------------------------------------------------------------------
    @staticmethod
    def _open_file(path: Path) -> int:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        with contextlib.suppress(OSError):  # another user's judge must be able to lock it too
            os.chmod(path, 0o666)
        return fd

    @contextlib.contextmanager
    def _open(self, path: Path) -> Iterator[int]:
        fd = self._open_file(path)
        try:
            yield fd
        finally:
            os.close(fd)

    def _take(self, fd: int, mode: int, timeout_s: float | None = None) -> None:
        """Take `mode` on `fd`, waiting with a growing pause up to the timeout."""
        bound = self.timeout_s if timeout_s is None else timeout_s
        t0 = time.monotonic()
        pause = 0.0005
        while True:
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
                self.waited_s += time.monotonic() - t0
                return
            except BlockingIOError:
                if time.monotonic() - t0 > bound:
                    self.waited_s += time.monotonic() - t0
                    raise LeaseTimeout(
                        f"the GPU lease {self.lock_path} was held by another verification for more than "
                        f"{bound:.0f} s; is a verification hung? (raise timeout_s or remove "
                        "the stuck process)"
                    ) from None
                time.sleep(pause)  # flock has no timed wait: poll, backing off to 20 ms
                pause = min(pause * 2, 0.02)
