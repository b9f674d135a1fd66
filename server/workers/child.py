"""The one child-side set-up every worker runs first: `stream = child.start()`.

`start` makes the calling process keep the promises of `protocol.py`:
1. it runs below the server's CPU priority (nice +5, inherited by clangd, nvcc and the sandbox;
   `CUDICE_WORKER_NICE` changes the increment, 0 disables it), so hovers stay fast during a build;
2. it applies the caller's environment defaults (thread counts), each only where none is set;
3. it dies with the server: `cudice.verifier.process.watch_parent` (the one owner of dying with
   a parent) polls `getppid` from a daemon thread and, once the process is re-parented, this
   process kills its family and exits (PR_SET_PDEATHSIG would kill it before it could take its
   own children down); SIGTERM does the same;
4. it keeps the real stdout for the protocol and points fd 1 and `sys.stdout` at stderr;
5. it announces itself with the `started` event.
What a child does when its stdin closes differs by worker (the quick child closes clangd, the
verify child drops its build at once, the model child lets its job stop first); each ends with
`exit_with_family` or a plain return.

Not covered: resource limits (the verifier's sandbox sets those for untrusted code) and
platforms without `getppid` re-parenting (the stdin-EOF path still ends the child there).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Mapping
from types import FrameType
from typing import NoReturn

from cudice.server.workers.procs import FAMILY_ENV, kill_family, kill_own_group
from cudice.server.workers.protocol import EventStream
from cudice.verifier.process import watch_parent

PARENT_POLL_S = 0.5  # how often a child checks that the server is still its parent


def exit_with_family(code: int = 1) -> NoReturn:
    """Kill this process's family (descendants, their groups, the processes with our tag) and the
    rest of its own group, then exit with `code` (no cleanup handlers run: the server is gone)."""
    kill_family(os.getpid(), os.environ.get(FAMILY_ENV))
    kill_own_group()
    os._exit(code)


def lower_priority() -> None:
    """nice +`CUDICE_WORKER_NICE` (default 5) for this process and what it starts."""
    with contextlib.suppress(OSError, ValueError):
        os.nice(int(os.environ.get("CUDICE_WORKER_NICE", "5")))


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    exit_with_family(128 + signum)


def take_stdout() -> EventStream:
    """The protocol stream on the real stdout; from now on fd 1 and `sys.stdout` write to stderr."""
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # a library's print must not corrupt the protocol
    sys.stdout = sys.stderr
    return EventStream(out)


def start(env_defaults: Mapping[str, str] | None = None) -> EventStream:
    """Set up this worker process (see the module docstring) and return its event stream."""
    lower_priority()
    for key, value in (env_defaults or {}).items():  # before any library reads them (OpenMP, torch)
        os.environ.setdefault(key, value)
    watch_parent(lambda: exit_with_family(1), PARENT_POLL_S)
    signal.signal(signal.SIGTERM, _on_sigterm)
    stream = take_stdout()
    stream.emit("started", pid=os.getpid())
    return stream
