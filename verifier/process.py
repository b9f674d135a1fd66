"""Child-process plumbing shared by the build steps, the sandbox and the persistent runner.

Every child cudice starts for untrusted or heavy work runs in its own session (process group),
so killing the group also ends the compilers, forks and grandchildren it started.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from typing import Any, Protocol

_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" else None  # loaded before any fork


def die_with_parent() -> None:
    """preexec (runs between fork and exec, so nothing is imported here): SIGKILL this child when
    the thread that started it dies (prctl(2) PR_SET_PDEATHSIG = 1; Linux only)."""
    if _LIBC is not None:
        _LIBC.prctl(1, signal.SIGKILL, 0, 0, 0)


class CancelToken(Protocol):
    """Anything with `is_set()`, e.g. a `threading.Event`: set means "stop this job"."""

    def is_set(self) -> bool: ...


def kill_group(pid: int) -> None:
    """SIGKILL the process group led by `pid`; a group that is already gone is fine."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def wait_or_kill(
    proc: subprocess.Popen[Any], timeout_s: float, cancel: CancelToken | None, poll_s: float = 0.02
) -> tuple[bool, bool]:
    """Wait for `proc` (started with `start_new_session=True`); kill its group on cancel or timeout.

    Returns (cancelled, timed_out); at most one is true (a cancel seen first wins).
    """
    deadline = time.monotonic() + timeout_s
    cancelled = timed_out = False
    while proc.poll() is None:
        cancelled = cancel is not None and cancel.is_set()
        timed_out = not cancelled and time.monotonic() > deadline
        if cancelled or timed_out:
            kill_group(proc.pid)
            break
        time.sleep(poll_s)
    proc.wait()
    return cancelled, timed_out


def tree_threads(pid: int) -> int:
    """Threads of process `pid` and all its descendants, read from /proc (0 when it is gone).

    Read from outside the process, so code inside it cannot forge the count; a thread that
    started and ended between two readings is not seen.
    """
    total = 0
    todo = [pid]
    seen: set[int] = set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        total += len(tids)
        for tid in tids:
            try:
                with open(f"/proc/{p}/task/{tid}/children") as f:
                    todo += [int(c) for c in f.read().split()]
            except (OSError, ValueError):
                continue
    return total
