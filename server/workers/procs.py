"""A child Python process speaking JSON lines on stdin/stdout, driven from asyncio.

The server's worker processes (model, verification) are built on this: it never blocks the
event loop or pygls' thread pool (asyncio subprocess pipes), keeps the tail of the child's
stderr for error messages (and forwards it to the server's stderr), and kills the child's
whole *family*: its process group, every descendant (compilers run in sessions of their own,
see `verifier/buildsteps.py`, so a group kill alone misses them), and every process that still
carries the child's family tag in its environment (`FAMILY_ENV`), which finds descendants that
were already re-parented to init after their parent died. Workers call `die_with_parent()`, so
a killed server takes its workers (and theirs: clangd, nvcc) down within about a second.

Not covered: resource limits — the verifier's sandbox applies those to untrusted code; a
descendant that both scrubs its environment and outlives its parent is found only while the
parent chain is intact.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

log = logging.getLogger(__name__)

STREAM_LIMIT = 64 * 1024 * 1024  # one event line may carry a whole generated file
FAMILY_ENV = "CUDICE_WORKER_FAMILY"  # a tag every worker's descendants inherit through the environment
PARENT_POLL_S = 0.5


def _proc_table() -> dict[int, tuple[int, int]]:
    """pid -> (ppid, pgrp) of every process (Linux `/proc`; empty elsewhere)."""
    table: dict[int, tuple[int, int]] = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
                table[int(entry.name)] = (int(fields[1]), int(fields[2]))
            except (OSError, IndexError, ValueError):
                continue  # exited meanwhile
    return table


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
    slower by spinning threads (on a loaded 2-core box, torch's default oversubscription cost
    491 s where one thread took 43 s)."""
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


def die_with_parent(poll_s: float = PARENT_POLL_S) -> None:
    """In a worker: when the server that started us is gone (re-parented), kill our whole family
    (clangd, compilers, sandbox) and ourselves. A daemon thread polls `getppid` (PR_SET_PDEATHSIG
    would kill this process before it could clean up its children)."""
    parent = os.getppid()
    tag = os.environ.get(FAMILY_ENV)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        kill_family(os.getpid(), tag)
        os._exit(1)

    threading.Thread(target=watch, name="die-with-parent", daemon=True).start()


def lower_priority() -> None:
    """Called first in each worker: run below the server's CPU priority (nice +5, inherited by nvcc
    and the sandbox), so hovers and code actions stay fast while a build or a generation runs.
    `CUDICE_WORKER_NICE` changes the increment (0 disables it)."""
    with contextlib.suppress(OSError, ValueError):
        os.nice(int(os.environ.get("CUDICE_WORKER_NICE", "5")))


def group_cpu_seconds(main_thread_clock: int | None = None) -> float:
    """CPU seconds used so far by this process's group, for a worker to prove it is making progress:
    the other live members (clangd, nvcc: `/proc/<pid>/stat` utime + stime + reaped children), this
    process's reaped children, and — instead of this whole process, whose heartbeat thread would
    count too — the thread whose clock is `main_thread_clock` (`time.pthread_getcpuclockid`).
    Linux only; elsewhere this process's CPU time (`time.process_time`)."""
    import time

    if not os.path.isdir("/proc/self/task"):
        return time.process_time()
    tick = float(os.sysconf("SC_CLK_TCK"))
    me, group = os.getpid(), os.getpgrp()
    total = time.clock_gettime(main_thread_clock) if main_thread_clock is not None else time.process_time()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue  # exited meanwhile
        # fields[0] is stat field 3 (state): pgrp = 5, utime/stime = 14/15, cutime/cstime = 16/17
        if len(fields) < 15 or int(fields[2]) != group:
            continue
        if int(entry.name) == me:
            total += (int(fields[13]) + int(fields[14])) / tick
        else:
            total += (int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])) / tick
    return total


class ChildProcess:
    """One child `python -m <module>`; `events()` yields its JSON lines until it exits."""

    def __init__(self, module: str, *, env: dict[str, str] | None = None, stderr_lines: int = 40) -> None:
        self.module = module
        self.env = env
        self.proc: asyncio.subprocess.Process | None = None
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=stderr_lines)
        self.tag = uuid.uuid4().hex
        self._stderr_task: asyncio.Task[None] | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    @property
    def is_alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def start(self, args: Sequence[str] = ()) -> None:
        env = dict(os.environ if self.env is None else self.env)
        env.setdefault("PYTHONUNBUFFERED", "1")
        env[FAMILY_ENV] = self.tag
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", self.module, *args,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env=env, start_new_session=True, limit=STREAM_LIMIT,
        )
        self._stderr_task = asyncio.create_task(self._drain_stderr())

    async def _drain_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        while line := await self.proc.stderr.readline():
            text = line.decode("utf-8", "replace").rstrip()
            self.stderr_tail.append(text)
            log.debug("[%s %s] %s", self.module.rsplit(".", 1)[-1], self.pid, text)

    async def send(self, message: dict[str, Any]) -> bool:
        """Write one JSON line; False when the child is gone."""
        if self.proc is None or self.proc.stdin is None or not self.is_alive:
            return False
        try:
            self.proc.stdin.write((json.dumps(message) + "\n").encode())
            await self.proc.stdin.drain()
            return True
        except (BrokenPipeError, ConnectionResetError, RuntimeError):
            return False

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        """The child's JSON events; ends when its stdout closes. Non-JSON lines are logged and skipped."""
        assert self.proc is not None and self.proc.stdout is not None
        while True:
            try:
                line = await self.proc.stdout.readline()
            except (ValueError, asyncio.LimitOverrunError) as exc:  # a line over STREAM_LIMIT
                log.error("%s: unreadable event line: %s", self.module, exc)
                continue
            if not line:
                return
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                log.warning("%s wrote a non-JSON line: %r", self.module, line[:200])
                continue
            if isinstance(event, dict):
                yield event

    async def wait(self) -> int:
        assert self.proc is not None
        code = await self.proc.wait()
        if self._stderr_task is not None:
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(self._stderr_task), 1.0)
        return code

    def kill(self) -> None:
        """SIGKILL the child's family: its group, its descendants (compilers in their own sessions,
        sandbox children) and whatever still carries its tag."""
        if self.proc is None:
            return
        kill_family(self.proc.pid if self.proc.returncode is None else None, self.tag)
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()

    async def close(self, grace_s: float = 2.0) -> None:
        """Close stdin (the child's cue to exit), then kill it if it has not exited after `grace_s`."""
        if self.proc is None:
            return
        if self.proc.stdin is not None and not self.proc.stdin.is_closing():
            self.proc.stdin.close()
        try:
            await asyncio.wait_for(self.proc.wait(), grace_s)
        except asyncio.TimeoutError:
            self.kill()
            await self.proc.wait()
        # The child's own children (clangd, compilers) end with it, also after a clean exit.
        kill_family(None, self.tag)

    def error_tail(self, num_lines: int = 8) -> str:
        return "\n".join(list(self.stderr_tail)[-num_lines:])
