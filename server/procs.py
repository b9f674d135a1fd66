"""A child Python process speaking JSON lines on stdin/stdout, driven from asyncio.

The server's worker processes (model, verification) are built on this: it never blocks the
event loop or pygls' thread pool (asyncio subprocess pipes), keeps the tail of the child's
stderr for error messages (and forwards it to the server's stderr), and kills the child's
whole process group (the child may have spawned compilers or its own sandbox workers).

Not covered: resource limits — the verifier's sandbox applies those to untrusted code.
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
from collections.abc import AsyncIterator, Sequence
from typing import Any

log = logging.getLogger(__name__)

STREAM_LIMIT = 64 * 1024 * 1024  # one event line may carry a whole generated file


def lower_priority() -> None:
    """Called first in each worker: run below the server's CPU priority (nice +5, inherited by nvcc
    and the sandbox), so hovers and code actions stay fast while a build or a generation runs.
    `CUDICE_WORKER_NICE` changes the increment (0 disables it)."""
    with contextlib.suppress(OSError, ValueError):
        os.nice(int(os.environ.get("CUDICE_WORKER_NICE", "5")))


class ChildProcess:
    """One child `python -m <module>`; `events()` yields its JSON lines until it exits."""

    def __init__(self, module: str, *, env: dict[str, str] | None = None, stderr_lines: int = 40) -> None:
        self.module = module
        self.env = env
        self.proc: asyncio.subprocess.Process | None = None
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=stderr_lines)
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
        """SIGKILL the child's process group (compilers and sandbox children included)."""
        if self.proc is None or self.proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
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

    def error_tail(self, num_lines: int = 8) -> str:
        return "\n".join(list(self.stderr_tail)[-num_lines:])
