"""Child-process plumbing shared by the build steps, the sandbox, the persistent runner and the
language server's workers.

Every child cudice starts for untrusted or heavy work runs in its own session (process group),
so killing the group also ends the compilers, forks and grandchildren it started.

Dying with the parent is owned here, in two forms for two kinds of child:
- `die_with_parent` (a `preexec_fn`) for programs that are exec'd (nvcc, g++, `unshare`): the
  kernel sends SIGKILL when the thread that started the child dies (`PR_SET_PDEATHSIG`); nothing
  else can run inside such a program;
- `reaped` + `die_with_parent_term` for programs that start programs of their own (compiler
  drivers: nvcc, gcc, `sh -c` steps): PDEATHSIG reaches only the direct child, and a driver's own
  children (`cc1plus`, `cicc`, `ptxas`) would outlive a killed starter by the seconds they take. The
  command runs under a POSIX shell that leads the group and gets SIGTERM when the starting thread
  dies; its trap kills the whole group;
- `watch_parent` for Python processes that lead a family of their own (the server's workers): a
  daemon thread polls `getppid` and, once the process is re-parented, calls the process's exit
  (which kills its family first). PDEATHSIG would kill such a process before it could take its
  children down, and it fires on the starting *thread*'s exit; the poll fires only when the parent
  process is gone, at the cost of up to one poll interval.
Not covered: platforms without `prctl` (the preexec form does nothing there) or without
re-parenting on a parent's death.

Process families are found and killed here too, through Linux `/proc` (the one reader of it):
- `tree_pids` / `tree_threads`: a process and its live descendants, followed through
  `/proc/<pid>/task/<tid>/children` (only the tree is read: cheap enough for the judge's checks);
- `family_pids` / `kill_family`: a *family*, from one snapshot of every process's `/proc/<pid>/stat`
  (parent, group): its root's process group, every descendant (compilers run in sessions of
  their own, so a group kill alone misses them), and every process that still carries the
  family's tag in its environment (`FAMILY_ENV`, which the language server sets on each worker:
  `server/workers/protocol.py`), which finds descendants already re-parented to init after their
  parent died. `kill_own_group` and `group_cpu_seconds` read the same snapshot for the process
  group the caller leads. `server/workers/procs.py` re-exports these names for the server.
  Not covered there: a descendant that both scrubs its environment and outlives its parent is
  found only while the parent chain is intact; systems without `/proc` (nothing is found there,
  nothing is killed).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" else None  # loaded before any fork


def die_with_parent() -> None:
    """preexec (runs between fork and exec, so nothing is imported here): SIGKILL this child when
    the thread that started it dies (prctl(2) PR_SET_PDEATHSIG = 1; Linux only)."""
    if _LIBC is not None:
        _LIBC.prctl(1, signal.SIGKILL, 0, 0, 0)


def die_with_parent_term() -> None:
    """preexec for `reaped` commands: SIGTERM (which the reaper shell traps) when the thread that
    started the child dies."""
    if _LIBC is not None:
        _LIBC.prctl(1, signal.SIGTERM, 0, 0, 0)


# The reaper: the command runs in the background of a shell that leads the process group, and a
# SIGTERM (the parent-death signal above) kills the group, the shell included. `wait` returns at
# once when a trapped signal arrives (POSIX "wait", "Signal Effects"), so the trap runs then.
_REAPER = 'trap "kill -KILL 0" TERM; "$@" & wait $!'


def reaped(cmd: list[str]) -> list[str]:
    """`cmd` under the reaper shell: start it with `start_new_session=True` and
    `preexec_fn=die_with_parent_term`, and the command's whole family dies with the starting thread.
    The exit status is the command's (a command killed by signal N gives 128 + N, not -N); its
    standard input is /dev/null (a shell's background job)."""
    return ["/bin/sh", "-c", _REAPER, "sh", *cmd]


def watch_parent(on_orphaned: Callable[[], object], poll_s: float = 0.5) -> threading.Thread:
    """Call `on_orphaned()` (once, from a daemon thread) when the process that started this one is
    gone: this process was re-parented. Returns the started thread."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        on_orphaned()

    thread = threading.Thread(target=watch, name="die-with-parent", daemon=True)
    thread.start()
    return thread


class CancelToken(Protocol):
    """Anything with `is_set()`, e.g. a `threading.Event`: set means "stop this job"."""

    def is_set(self) -> bool: ...


def kill_group(pid: int) -> None:
    """SIGKILL the process group led by `pid`; a group that is already gone is fine."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


GROUP_GONE_BOUND_S = 30.0  # a killed group's exits (CUDA teardown included) take well under a second


def group_members(pgid: int) -> list[int]:
    """The processes of group `pgid` still running (zombies, already exited, are not counted)."""
    return [pid for pid, fields in _stats() if int(fields[2]) == pgid and fields[0] != b"Z"]


def wait_group_gone(pgid: int, bound_s: float, poll_s: float = 0.01) -> bool:
    """Wait until no process of group `pgid` is running (at most `bound_s`); True when none is."""
    deadline = time.monotonic() + bound_s
    while group_members(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(poll_s)
    return True


def wait_or_kill(
    proc: subprocess.Popen[Any],
    timeout_s: float,
    cancel: CancelToken | None,
    poll_s: float = 0.02,
    finished: Callable[[], bool] | None = None,
) -> tuple[bool, bool]:
    """Wait for `proc` (started with `start_new_session=True`); kill its group on cancel or timeout.

    Returns (cancelled, timed_out); at most one is true (a cancel seen first wins). Between looks
    at the cancel token and the clock it waits on the process itself (at most `poll_s`), so it is
    back as soon as the process ends: a build's many short steps pay no sleep each. `finished`,
    when given, says the process has delivered all it will (a judge's result pipe closed): its
    group is killed then instead of waiting for its own orderly exit (a judge closing its runners
    one by one), and this returns once no member of the group is left running (a killed process's
    CUDA context is gone by then, so the next job on that GPU does not share it with a teardown).
    """
    deadline = time.monotonic() + timeout_s
    cancelled = timed_out = False
    while proc.poll() is None:
        cancelled = cancel is not None and cancel.is_set()
        timed_out = not cancelled and time.monotonic() > deadline
        if cancelled or timed_out:
            kill_group(proc.pid)
            break
        if finished is not None and finished():
            kill_group(proc.pid)
            wait_group_gone(proc.pid, GROUP_GONE_BOUND_S)
            break
        try:
            proc.wait(timeout=max(0.0, min(poll_s, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            pass
    proc.wait()
    return cancelled, timed_out


def run_process(
    cmd: list[str],
    timeout_s: float,
    cancel: CancelToken | None,
    cwd: Path | None = None,
    on_output: Callable[[str], None] | None = None,
    env: dict[str, str] | None = None,
    merge_stderr: bool = True,
) -> tuple[int, str, bool, bool]:
    """(returncode, merged output, cancelled, timed_out); the process group dies on cancel/timeout.

    `merge_stderr=False`: the output is stdout alone (a preprocessor's text) and stderr is dropped.
    """
    if env is None:
        env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
    if shutil.which(cmd[0], path=env.get("PATH")) is None:  # as Popen would, not the shell's 127
        raise FileNotFoundError(2, f"no such program: {cmd[0]}", cmd[0])
    proc = subprocess.Popen(
        reaped(cmd),  # the driver's own children die with the starting thread too
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if merge_stderr else subprocess.DEVNULL,
        text=True,
        env=env,
        cwd=cwd,
        start_new_session=True,
        errors="replace",
        preexec_fn=die_with_parent_term,
    )
    chunks: list[str] = []

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            chunks.append(line)
            if on_output is not None:
                on_output(line)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    cancelled, timed_out = wait_or_kill(proc, timeout_s, cancel, poll_s=0.05)
    reader.join(timeout=5)
    return proc.returncode, "".join(chunks), cancelled, timed_out


def tree_threads(pid: int) -> int:
    """Threads of process `pid` and all its descendants, read from /proc (0 when it is gone).

    Read from outside the process, so code inside it cannot forge the count; a thread that
    started and ended between two readings is not seen.
    """
    return sum(len(tids) for _, tids in _tree(pid))


def tree_pids(pid: int) -> list[int]:
    """Process `pid` and all its descendants that are alive now, read from /proc."""
    return [p for p, _ in _tree(pid)]


def tree_schedstat(pid: int) -> tuple[int, int]:
    """(ns on a CPU, ns runnable but waiting for one) summed over every thread of process `pid`
    and its descendants, from the kernel's /proc/<pid>/task/<tid>/schedstat ((0, 0) when it is
    gone or the kernel keeps no schedstat). Read from outside the process: code inside it can add
    to both (by running or yielding) but cannot take time off them. Threads that ended between two
    readings drop out of the sums."""
    run = wait = 0
    for p, tids in _tree(pid):
        for tid in tids:
            try:
                with open(f"/proc/{p}/task/{tid}/schedstat", "rb") as f:
                    fields = f.read().split()
                run += int(fields[0])
                wait += int(fields[1])
            except (OSError, ValueError, IndexError):
                continue
    return run, wait


def _tree(pid: int) -> list[tuple[int, list[str]]]:
    found: list[tuple[int, list[str]]] = []
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
        found.append((p, tids))
        for tid in tids:
            try:
                with open(f"/proc/{p}/task/{tid}/children") as f:
                    todo += [int(c) for c in f.read().split()]
            except (OSError, ValueError):
                continue
    return found


def _stat_fields(pid: int | str) -> list[bytes] | None:
    """The fields of `/proc/<pid>/stat` after the command name (which may hold spaces and `)`), or
    None when the process is gone. fields[0] is stat field 3 (state): ppid = fields[1],
    pgrp = fields[2], utime/stime = fields[11:13], cutime/cstime = fields[13:15] (proc(5))."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None


def process_state(pid: int) -> str:
    """The one-letter state of process `pid` in /proc ("X" when it is gone)."""
    fields = _stat_fields(pid)
    return fields[0].decode() if fields else "X"


@contextlib.contextmanager
def paused(pid: int) -> Iterator[bool]:
    """Stop process `pid` and its descendants (SIGSTOP) for the body, then continue them; yields
    whether every one was stopped (its state in /proc says so, within 2 s). A process started
    meanwhile by one not yet stopped is found on a second pass. Work the processes queued on a GPU
    before they stopped still runs."""
    stopped: list[int] = []
    ok = True
    try:
        for _ in range(2):
            for p in tree_pids(pid):
                if p in stopped:
                    continue
                try:
                    os.kill(p, signal.SIGSTOP)
                    stopped.append(p)
                except ProcessLookupError:
                    continue
                except OSError:
                    ok = False
        # a stop signal is delivered asynchronously
        ok = _await_states(stopped, lambda state: state in "TtZX") and ok
        yield ok and bool(stopped)
    finally:
        for p in stopped:
            with contextlib.suppress(OSError):
                os.kill(p, signal.SIGCONT)
        _await_states(stopped, lambda state: state not in "Tt")  # continued: scheduled again


def _await_states(pids: list[int], wanted: Any, within_s: float = 2.0) -> bool:
    """Poll /proc until every process of `pids` is in a state `wanted(state)` accepts, at most
    `within_s` in all; whether they all got there."""
    deadline = time.monotonic() + within_s
    for p in pids:
        while not wanted(process_state(p)) and time.monotonic() < deadline:
            pass
    return all(wanted(process_state(p)) for p in pids)


def descendant_running(pid: int, module: str) -> int | None:
    """The process in `pid`'s tree (itself included) whose command line runs `module` (`-m module`),
    the deepest one when several do; None when none does."""
    found = None
    for p in tree_pids(pid):
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if module.encode() in argv:
            found = p
    return found


FAMILY_ENV = "CUDICE_WORKER_FAMILY"  # a tag every member of a family inherits through the environment


def _stats() -> Iterator[tuple[int, list[bytes]]]:
    """(pid, `_stat_fields(pid)`) of every live process whose stat line is complete."""
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            fields = _stat_fields(entry.name)
            if fields is not None and len(fields) >= 15:  # None: exited meanwhile
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
    """In a process that leads its own process group (the server starts each worker in a session
    of its own): SIGKILL the group's other members, which finds a sandbox child that lost both its
    parent and its tag. Does nothing in a process that does not lead its group (one started from a
    shell shares the shell's job group). Returns how many were signalled."""
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


def distinct_cpus(count: int, prefer: set[int] | None = None) -> list[int]:
    """Up to `count` CPUs of this thread's affinity set, each on its own physical core (a second
    hardware thread of a core already picked is skipped), CPUs in `prefer` first. Without the
    topology in /sys every CPU counts as its own core."""
    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    cores: set[tuple[str, str]] = set()
    picked: list[int] = []
    for cpu in sorted(allowed, key=lambda c: (prefer is not None and c not in prefer, c)):
        top = f"/sys/devices/system/cpu/cpu{cpu}/topology"
        try:
            core = (_read(f"{top}/physical_package_id"), _read(f"{top}/core_id"))
        except OSError:
            core = ("cpu", str(cpu))
        if core in cores:
            continue
        cores.add(core)
        picked.append(cpu)
        if len(picked) == count:
            break
    return picked


def cpus_of_node(node: int, root: str = "/sys") -> set[int]:
    """The CPUs of NUMA node `node` (/sys's cpulist, e.g. "0-7,16-23"); empty when unknown."""
    try:
        text = _read(f"{root}/devices/system/node/node{node}/cpulist")
    except OSError:
        return set()
    cpus: set[int] = set()
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


@functools.cache
def gpu_node_cpus(root: str = "/sys") -> frozenset[int]:
    """The CPUs of the NUMA node the machine's NVIDIA GPUs hang on, within this process's
    affinity; empty when there is no such GPU, the GPUs sit on different nodes, or /sys does not
    say. A process started on these CPUs allocates its memory there (first touch), so the judge
    and both runners keep their memory as near the GPU as each other: a process whose memory
    landed on the far node is slower in every step of a timed call, not only in the kernel."""
    nodes: set[int] = set()
    try:
        devices = os.listdir(f"{root}/bus/pci/devices")
    except OSError:
        return frozenset()
    for dev in devices:
        base = f"{root}/bus/pci/devices/{dev}"
        try:
            if _read(f"{base}/vendor") != "0x10de" or not _read(f"{base}/class").startswith("0x03"):
                continue
            nodes.add(int(_read(f"{base}/numa_node")))
        except (OSError, ValueError):
            continue
    if len(nodes) != 1 or min(nodes) < 0:
        return frozenset()
    allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
    return frozenset(cpus_of_node(min(nodes), root) & set(allowed))


def start_near_gpu(cpus: frozenset[int]) -> None:
    """preexec: die with the parent (`die_with_parent`), and run on `cpus` (`gpu_node_cpus`, worked
    out in the parent) when that set is not empty."""
    die_with_parent()
    if cpus:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, cpus)


@contextlib.contextmanager
def pinned(assignment: dict[int, int]) -> Iterator[dict[int, bool]]:
    """Pin each thread id (0: the calling thread) to its one CPU for the body, then give back the
    affinity it had; yields which pins took (another user's process needs CAP_SYS_NICE)."""
    before: dict[int, set[int]] = {}
    took: dict[int, bool] = {}
    try:
        for tid, cpu in assignment.items():
            try:
                before[tid] = os.sched_getaffinity(tid)
                os.sched_setaffinity(tid, {cpu})
                took[tid] = True
            except OSError:
                took[tid] = False
        yield took
    finally:
        for tid, cpus in before.items():
            with contextlib.suppress(OSError):
                os.sched_setaffinity(tid, cpus)


def _read(path: str) -> str:
    with open(path) as f:
        return f.read().strip()
