"""A worker's process family, found and killed through Linux `/proc`, and its CPU use.

The server kills a worker's whole *family*: its process group, every descendant (compilers run
in sessions of their own, see `verifier/build/objects.py`, so a group kill alone misses them), and
every process that still carries the worker's family tag in its environment (`FAMILY_ENV`, set
by `protocol.ChildProcess`), which finds descendants that were already re-parented to init after
their parent died. A worker that loses the server kills its own family the same way
(`child.exit_with_family`).

Not covered: resource limits (the verifier's sandbox applies those to untrusted code); a
descendant that both scrubs its environment and outlives its parent is found only while the
parent chain is intact; systems without `/proc` (nothing is found there, nothing is killed).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator

FAMILY_ENV = "CUDICE_WORKER_FAMILY"  # a tag every worker's descendants inherit through the environment


def _stats() -> Iterator[tuple[int, list[bytes]]]:
    """(pid, the fields of `/proc/<pid>/stat` after the command name) of every live process.
    fields[0] is stat field 3 (state): ppid = fields[1], pgrp = fields[2], utime/stime = fields[11:13],
    cutime/cstime = fields[13:15] (proc(5))."""
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
            except (OSError, IndexError):
                continue  # exited meanwhile
            if len(fields) >= 15:
                yield int(entry.name), fields


def _proc_table() -> dict[int, tuple[int, int]]:
    """pid -> (ppid, pgrp) of every process (empty without `/proc`)."""
    return {pid: (int(fields[1]), int(fields[2])) for pid, fields in _stats()}


def _carries(pid: int, marker: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return marker in f.read().split(b"\0")
    except OSError:  # gone, or another user's process
        return False


def family_pids(root: int | None, tag: str | None = None) -> set[int]:
    """`root`, its live descendants, and the processes whose environment holds `FAMILY_ENV=tag`
    (pass `root=None` once the root is reaped: its pid may belong to someone else by then)."""
    table = _proc_table()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found: set[int] = set()
    todo = [] if root is None else [root]
    while todo:
        pid = todo.pop()
        if pid in found:
            continue
        found.add(pid)
        todo += children.get(pid, [])
    if tag:
        marker = f"{FAMILY_ENV}={tag}".encode()
        found |= {pid for pid in table if pid not in found and _carries(pid, marker)}
    found.discard(os.getpid())
    return {pid for pid in found if pid in table}


def kill_family(root: int | None, tag: str | None = None, *, rounds: int = 4) -> int:
    """SIGKILL `root`'s process group, its descendants' groups and the tagged processes; repeated
    while new ones show up (a compiler forking while we kill). Returns how many were signalled."""
    num = 0
    me = os.getpgrp()
    for _ in range(rounds):
        pids = family_pids(root, tag)
        if not pids:
            break
        table = _proc_table()
        for pid in pids:  # stop them first: a stopped process forks no more
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGSTOP)
        # A group id of 0 (a process whose group lies outside our PID namespace, or one that is
        # exiting) would make killpg signal our own group: only real, foreign groups are killed.
        for pgrp in {table[p][1] for p in pids if p in table and table[p][1] > 1} - {me}:
            with contextlib.suppress(OSError):  # gone, not ours, or invalid by now
                os.killpg(pgrp, signal.SIGKILL)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        num += len(pids)
    return num


def kill_own_group() -> int:
    """In a worker that leads its own process group (the server starts each in a session of its
    own): SIGKILL the group's other members, which finds a sandbox child that lost both its parent
    and its tag. Does nothing in a process that does not lead its group (one started from a shell
    shares the shell's job group). Returns how many were signalled."""
    me = os.getpid()
    if os.getpgrp() != me:
        return 0
    members = [pid for pid, (_, pgrp) in _proc_table().items() if pgrp == me and pid != me]
    for pid in members:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return len(members)


def group_cpu_seconds(main_thread_clock: int | None = None) -> float:
    """CPU seconds used so far by this process's group, for a worker to prove it is making progress:
    the other live members (clangd, nvcc: utime + stime + reaped children), this process's reaped
    children, and — instead of this whole process, whose heartbeat thread would count too — the
    thread whose clock is `main_thread_clock` (`time.pthread_getcpuclockid`). Linux only;
    elsewhere this process's CPU time (`time.process_time`)."""
    if not os.path.isdir("/proc/self/task"):
        return time.process_time()
    tick = float(os.sysconf("SC_CLK_TCK"))
    me, group = os.getpid(), os.getpgrp()
    total = time.clock_gettime(main_thread_clock) if main_thread_clock is not None else time.process_time()
    for pid, fields in _stats():
        if int(fields[2]) != group:
            continue
        if pid == me:
            total += (int(fields[13]) + int(fields[14])) / tick
        else:
            total += (int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])) / tick
    return total
