"""How a session ends: `exit` with and without `shutdown`, and a client that just disconnects.

Real cudice servers (`app.create_server`) run in-process: over stdio (`serve_stdio` reading the
client's frames from a buffer, with the `after_exit` hook `app.run` passes), and over real sockets
with `serve_tcp` (`cudice-lsp --tcp`) and `serve_team` (`--tcp --multi`) on the test's event loop.
The client writes raw frames, so `exit` can come in the same write as `shutdown`, before the
server has even started handling it. Each server's quick worker is a stand-in that records the
session it is closed for (every release of a session closes it), and whose close waits for the
test's `gate`. Checked: the exit code the LSP specification asks for (0 when `shutdown` came before
`exit`, else 1), that the session's workers are closed either way, and that `exit` on a `--multi`
server ends only that client's session.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from cudice.server.app import create_server
from cudice.server.core import CudiceServer
from cudice.server.session import finish_release, release
from cudice.server.shared import Team
from cudice.server.team import serve_team
from cudice.server.transport.pygls_fixes import serve_stdio
from cudice.server.transport.tcp import serve_tcp

WAIT_S = 60.0  # bound on each wait below (a loaded 2-core box; each takes milliseconds)
SHUTDOWN = {"id": 1, "method": "shutdown"}
EXIT = {"method": "exit"}


class _Sessions:
    """The servers `make_server` built, one per connection, and the releases of each."""

    def __init__(self, *, stand_in_model: bool) -> None:
        self.made: list[CudiceServer] = []
        self.closed: list[CudiceServer] = []  # a session, once per release of it
        self.finished: list[CudiceServer] = []  # a session whose quick worker's close ran to its end
        self.gate = asyncio.Event()
        self.stand_in_model = stand_in_model  # a --multi session's model is the team's, not its own
        self._changed = asyncio.Event()  # set on each session made or closed

    def make_server(self) -> CudiceServer:
        ls = create_server()
        ls.__dict__["quick"] = _Worker(self, ls, is_counted=True)  # cached properties: stand in first
        if self.stand_in_model:
            ls.__dict__["model"] = _Worker(self, ls, is_counted=False)
        self.made.append(ls)
        self._changed.set()
        return ls

    def note_closed(self, ls: CudiceServer) -> None:
        self.closed.append(ls)
        self._changed.set()

    async def wait(self, done: Callable[[], bool]) -> None:
        async def loop() -> None:
            while not done():
                self._changed.clear()
                await self._changed.wait()

        await asyncio.wait_for(loop(), WAIT_S)


class _Worker:
    """Stands in for a session's worker: `shutdown` records its session (the quick worker's, once
    per release), then waits for the sessions' `gate`."""

    def __init__(self, sessions: _Sessions, ls: CudiceServer, *, is_counted: bool) -> None:
        self.sessions, self.ls, self.is_counted = sessions, ls, is_counted

    async def shutdown(self) -> None:
        if self.is_counted:
            self.sessions.note_closed(self.ls)
        await self.sessions.gate.wait()
        if self.is_counted:
            self.sessions.finished.append(self.ls)
            self.sessions._changed.set()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _frames(*messages: dict[str, Any]) -> bytes:
    out = b""
    for message in messages:
        body = json.dumps({"jsonrpc": "2.0", **message}).encode()
        out += b"Content-Length: %d\r\n\r\n" % len(body) + body
    return out


async def _connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to the server on `port`, once it listens (it starts on this loop)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            return await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            assert time.monotonic() < deadline, f"nothing listened on {port} within {WAIT_S:.0f} s"
            await asyncio.sleep(0.01)


async def _read_reply(reader: asyncio.StreamReader) -> dict[str, Any]:
    length = 0
    while (line := await asyncio.wait_for(reader.readline(), WAIT_S)).strip():
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    found: dict[str, Any] = json.loads(await reader.readexactly(length))
    return found


def _serve_stdio(messages: list[dict[str, Any]]) -> tuple[int, _Sessions]:
    """`serve_stdio` reading `messages` and then the end of its input; (its exit code, its sessions)."""
    sessions = _Sessions(stand_in_model=True)
    sessions.gate.set()
    ls = sessions.make_server()
    code = serve_stdio(
        ls, io.BytesIO(_frames(*messages)), io.BytesIO(), after_exit=lambda: finish_release(ls)
    )
    return code, sessions


def test_exit_right_behind_shutdown_ends_the_stdio_server_with_code_0() -> None:
    code, sessions = _serve_stdio([SHUTDOWN, EXIT])
    assert code == 0
    assert sessions.closed == sessions.made


def test_exit_without_shutdown_ends_the_stdio_server_with_code_1_and_closes_its_workers() -> None:
    code, sessions = _serve_stdio([EXIT])
    assert code == 1
    assert sessions.closed == sessions.made


async def _serve_one_client(messages: list[dict[str, Any]]) -> tuple[int, _Sessions]:
    """`serve_tcp` with one client that writes `messages` in one go; (its exit code, its sessions)."""
    sessions = _Sessions(stand_in_model=True)
    sessions.gate.set()
    port = _free_port()
    serving = asyncio.ensure_future(serve_tcp("127.0.0.1", port, sessions.make_server, release))
    try:
        _, writer = await _connect(port)
        writer.write(_frames(*messages))
        await writer.drain()
        code = await asyncio.wait_for(serving, WAIT_S)
        writer.close()
    finally:
        serving.cancel()
    return code, sessions


async def test_exit_in_the_same_write_as_shutdown_ends_the_tcp_server_with_code_0() -> None:
    code, sessions = await _serve_one_client([SHUTDOWN, EXIT])
    assert code == 0
    assert len(sessions.made) == 1 and sessions.closed[0] is sessions.made[0]


async def test_exit_without_shutdown_ends_the_tcp_server_with_code_1() -> None:
    code, sessions = await _serve_one_client([EXIT])
    assert code == 1
    assert sessions.closed == sessions.made and len(sessions.made) == 1  # its workers closed all the same


async def test_exit_on_a_multi_client_server_ends_only_that_session() -> None:
    sessions = _Sessions(stand_in_model=False)
    sessions.gate.set()
    port = _free_port()
    serving = asyncio.ensure_future(serve_team("127.0.0.1", port, sessions.make_server, release, Team()))
    try:
        _, first = await _connect(port)
        other_reader, other = await _connect(port)
        await sessions.wait(lambda: len(sessions.made) == 2)
        first.write(_frames(EXIT))  # without `shutdown`
        await first.drain()
        await sessions.wait(lambda: sessions.made[0] in sessions.closed)
        assert not serving.done()
        other.write(_frames(SHUTDOWN))  # the other client is still served
        await other.drain()
        assert (await _read_reply(other_reader)).get("id") == SHUTDOWN["id"]
        assert not serving.done()
        first.close()
        other.close()
    finally:
        serving.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(serving, WAIT_S)


async def _released_once_more(ls: CudiceServer) -> None:
    """Let a release that `shutdown` started end too (it would be counted by then)."""
    if ls.releasing is not None:
        await asyncio.wait_for(ls.releasing, WAIT_S)


async def test_a_tcp_session_ended_by_shutdown_and_exit_is_released_once() -> None:
    sessions = _Sessions(stand_in_model=True)  # its gate stays closed until the first release is in
    port = _free_port()
    serving = asyncio.ensure_future(serve_tcp("127.0.0.1", port, sessions.make_server, release))
    try:
        _, writer = await _connect(port)
        writer.write(_frames(SHUTDOWN, EXIT))
        await writer.drain()
        await sessions.wait(lambda: len(sessions.closed) >= 1)
        assert not serving.done()  # the end of the connection waits for the release in progress
        sessions.gate.set()
        code = await asyncio.wait_for(serving, WAIT_S)
        writer.close()
    finally:
        serving.cancel()
    await _released_once_more(sessions.made[0])
    assert code == 0
    assert sessions.closed == sessions.made  # one session, released once


async def test_a_tcp_client_that_disconnects_without_shutdown_is_released_and_the_next_served() -> None:
    sessions = _Sessions(stand_in_model=True)
    sessions.gate.set()
    port = _free_port()
    serving = asyncio.ensure_future(serve_tcp("127.0.0.1", port, sessions.make_server, release))
    try:
        _, vanishing = await _connect(port)
        await sessions.wait(lambda: len(sessions.made) == 1)
        vanishing.close()  # a crashed editor, a dropped tunnel
        await sessions.wait(lambda: sessions.closed == sessions.made)
        _, writer = await _connect(port)
        writer.write(_frames(SHUTDOWN, EXIT))
        await writer.drain()
        code = await asyncio.wait_for(serving, WAIT_S)
        writer.close()
    finally:
        serving.cancel()
    await _released_once_more(sessions.made[1])
    assert code == 0
    assert sessions.closed == sessions.made and len(sessions.made) == 2  # each session released once


async def test_a_multi_client_session_ended_by_shutdown_and_exit_is_released_once() -> None:
    sessions = _Sessions(stand_in_model=False)
    port = _free_port()
    serving = asyncio.ensure_future(serve_team("127.0.0.1", port, sessions.make_server, release, Team()))
    try:
        reader, writer = await _connect(port)
        writer.write(_frames(SHUTDOWN, EXIT))
        await writer.drain()
        await sessions.wait(lambda: len(sessions.closed) >= 1)
        sessions.gate.set()
        await asyncio.wait_for(reader.read(), WAIT_S)  # until the server has closed the connection
        await _released_once_more(sessions.made[0])
        assert sessions.closed == sessions.made  # one session, released once
        assert not serving.done()
        writer.close()
    finally:
        serving.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(serving, WAIT_S)


async def test_a_release_past_its_bound_goes_on_while_the_next_client_is_served(monkeypatch: Any) -> None:
    """A vanished client's workers that take longer to close than the connection's end waits are
    not cancelled half-way (a worker process would outlive its close): the next client is served
    meanwhile, and the close runs to its end once it can."""
    import cudice.server.transport.tcp as tcp

    monkeypatch.setattr(tcp, "RELEASE_TIMEOUT_S", 0.05)
    sessions = _Sessions(stand_in_model=True)  # the gate stays closed: the first close hangs
    port = _free_port()
    serving = asyncio.ensure_future(serve_tcp("127.0.0.1", port, sessions.make_server, release))
    try:
        _, vanishing = await _connect(port)
        await sessions.wait(lambda: len(sessions.made) == 1)
        vanishing.close()
        await sessions.wait(lambda: len(sessions.closed) == 1)
        reader, writer = await _connect(port)  # served although the first close has not ended
        writer.write(_frames(SHUTDOWN))
        await writer.drain()
        await sessions.wait(lambda: len(sessions.made) == 2)
        assert sessions.finished == []
        sessions.gate.set()
        assert (await _read_reply(reader)).get("id") == SHUTDOWN["id"]
        await sessions.wait(lambda: sessions.made[0] in sessions.finished)  # not cancelled: it ended
        writer.write(_frames(EXIT))
        await writer.drain()
        assert await asyncio.wait_for(serving, WAIT_S) == 0
        writer.close()
    finally:
        serving.cancel()


HELD_AT_EXIT = """
import threading, time
import cudice.server.session as session
session.EXIT_HARD_S = 3.0
def held_in_a_blocking_call():
    time.sleep(3600)
threading.Thread(target=held_in_a_blocking_call, name="held").start()  # not a daemon: exit joins it
from cudice.server.__main__ import main
main(["--stdio"])
"""


def test_a_server_held_by_a_thread_at_exit_ends_within_its_bound_and_says_where_it_was_held() -> None:
    """A real server process whose interpreter would wait an hour at its end for a thread: it
    still ends, with the LSP exit code, and its stderr shows that thread's stack."""
    params = {"processId": None, "rootUri": None, "capabilities": {}}
    init = {"id": 0, "method": "initialize", "params": params}
    proc = subprocess.Popen(
        [sys.executable, "-c", HELD_AT_EXIT],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    # as editors do: `exit` only once `shutdown` is answered (sent at once, a busy box could end the
    # process at the 3 s bound while the workers' release was still running, before the answer)
    got = bytearray()
    answered = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        while chunk := proc.stdout.read1(65536):
            got.extend(chunk)
            if b'"id": 1' in got or b'"id":1' in got:
                answered.set()

    errs = bytearray()  # stderr drained alongside, so a full pipe cannot stall the server

    def drain() -> None:
        assert proc.stderr is not None
        while chunk := proc.stderr.read1(65536):
            errs.extend(chunk)

    reader = threading.Thread(target=read, daemon=True)
    drainer = threading.Thread(target=drain, daemon=True)
    drainer.start()
    try:
        assert proc.stdin is not None
        proc.stdin.write(_frames(init, SHUTDOWN))
        proc.stdin.flush()
        reader.start()
        assert answered.wait(WAIT_S), bytes(got)[-2000:]
        proc.stdin.write(_frames(EXIT))
        proc.stdin.close()
        proc.wait(timeout=WAIT_S + 3.0)
        reader.join(WAIT_S)
        drainer.join(WAIT_S)  # stderr complete: the process has ended and its pipe is drained
    finally:
        proc.kill()
    assert proc.returncode == 0, bytes(errs).decode(errors="replace")
    text = bytes(errs).decode(errors="replace")
    assert "still running 3 s after `exit`" in text
    assert "held_in_a_blocking_call" in text
