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
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
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


def wait_or_kill(
    proc: subprocess.Popen[Any], timeout_s: float, cancel: CancelToken | None, poll_s: float = 0.02
) -> tuple[bool, bool]:
    """Wait for `proc` (started with `start_new_session=True`); kill its group on cancel or timeout.

    Returns (cancelled, timed_out); at most one is true (a cancel seen first wins). Between looks
    at the cancel token and the clock it waits on the process itself (at most `poll_s`), so it is
    back as soon as the process ends: a build's many short steps pay no sleep each.
    """
    deadline = time.monotonic() + timeout_s
    cancelled = timed_out = False
    while proc.poll() is None:
        cancelled = cancel is not None and cancel.is_set()
        timed_out = not cancelled and time.monotonic() > deadline
        if cancelled or timed_out:
            kill_group(proc.pid)
            break
        try:
            proc.wait(timeout=max(0.0, min(poll_s, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            pass
    proc.wait()
    return cancelled, timed_out


def tree_threads(pid: int) -> int:
    """Threads of process `pid` and all its descendants, read from /proc (0 when it is gone).

    Read from outside the process, so code inside it cannot forge the count; a thread that
    started and ended between two readings is not seen.
    """
    return sum(len(tids) for _, tids in _tree(pid))


def tree_pids(pid: int) -> list[int]:
    """Process `pid` and all its descendants that are alive now, read from /proc."""
    return [p for p, _ in _tree(pid)]


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


def process_state(pid: int) -> str:
    """The one-letter state of process `pid` in /proc ("X" when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "X"


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
