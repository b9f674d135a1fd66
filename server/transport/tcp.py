"""`cudice-lsp --tcp`: one client at a time, one connection after another, until `exit`.

pygls 2.1's `start_tcp` calls `shutdown()` when its first connection ends, and that closes the
listening socket: a port probe or health check (connect, close) made the process exit and refuse
every later editor. Here the listener stays open until a client sends `exit`:

- each connection gets a fresh server from `make_server()` (its own workspace, settings and
  workers), so nothing of an earlier client leaks into the next;
- a connection that ends without `shutdown` (probe, crashed editor, dropped ssh tunnel) has its
  workers closed by `release(server)`, and the next connection is served; a release that takes
  over RELEASE_TIMEOUT_S goes on in the background (`release_in_background`) rather than being
  cancelled half-way, which would leave a worker process running beside the live server;
- a second client while one is connected (for over 2 s) gets a JSON-RPC error for its first
  request, saying why, and is disconnected; the connected client is not disturbed;
- `exit` ends the process (exit code 0 after `shutdown`, also one whose reply is still pending,
  else 1: `pygls_fixes.exit_code`), as the LSP specification says.

Not covered here: several editors sharing one server at once (that is `--multi`, team.py), TLS or
authentication (bind to 127.0.0.1 and forward the port over ssh, docs/server.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from threading import Event
from typing import Any

from cudice.server.transport import pygls_fixes
from cudice.server.transport.rpc_reader import read_messages
from pygls.lsp.server import LanguageServer

log = logging.getLogger(__name__)

BUSY_ERROR_CODE = -32803  # LSP RequestFailed
FIRST_MESSAGE_TIMEOUT_S = 10.0
RELEASE_TIMEOUT_S = 10.0  # how long a connection's end waits for its session's release
_LINGERING: set[asyncio.Task[Any]] = set()  # releases still running past that wait (strong refs)


async def release_in_background(release: Awaitable[None], timeout_s: float) -> bool:
    """Wait up to `timeout_s` for `release` (a session's release); True if it ended. One still
    running goes on as a task, never cancelled: cancelling a worker's close half-way would leave
    its process running, and in TCP mode the parent lives on, so the worker never notices."""
    task = asyncio.ensure_future(release)
    done, _ = await asyncio.wait({task}, timeout=timeout_s)
    if not done:
        _LINGERING.add(task)
        task.add_done_callback(_LINGERING.discard)
    return bool(done)


BUSY_GRACE_S = 2.0  # how long a new client waits for the slot before it is refused


async def _read_message(reader: asyncio.StreamReader) -> dict[str, Any] | None:
    """One LSP message (headers + JSON body), or None at end of stream or on garbage."""
    length = 0
    while True:
        line = await reader.readline()
        if not line:
            return None
        if not line.strip():
            break
        name, _, value = line.decode("ascii", "replace").partition(":")
        if name.strip().lower() == "content-length" and value.strip().isdigit():
            length = int(value.strip())
    if length <= 0:
        return None
    try:
        message = json.loads(await reader.readexactly(length))
    except (asyncio.IncompleteReadError, ValueError):
        return None
    return message if isinstance(message, dict) else None


def _frame(message: dict[str, Any]) -> bytes:
    body = json.dumps(message).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


async def refuse_busy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: str) -> None:
    """Answer a second client's first request with an error that says why, then disconnect it."""
    try:
        message = await asyncio.wait_for(_read_message(reader), FIRST_MESSAGE_TIMEOUT_S)
        if message is not None and "id" in message:
            writer.write(
                _frame(
                    {
                        "jsonrpc": "2.0",
                        "id": message["id"],
                        "error": {
                            "code": BUSY_ERROR_CODE,
                            "message": (
                                f"cudice-lsp already serves another client ({peer}); it serves one "
                                "client at a time over TCP. Close the other editor's connection, "
                                "start a second `cudice-lsp --tcp` on another port, or run the "
                                "server with `--tcp --multi` to serve several editors at once."
                            ),
                        },
                    }
                )
            )
            await writer.drain()
    except (asyncio.TimeoutError, ConnectionError):
        pass
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def _take(slot: asyncio.Lock, cleaning_up: Callable[[], bool]) -> bool:
    """Take the one client slot: wait `BUSY_GRACE_S` (the previous client may have just closed its
    socket), and as long as the previous session's clean-up takes while it is cleaning up."""
    try:
        await asyncio.wait_for(slot.acquire(), BUSY_GRACE_S)
        return True
    except asyncio.TimeoutError:
        if not cleaning_up():
            return False
    try:
        await asyncio.wait_for(slot.acquire(), RELEASE_TIMEOUT_S + BUSY_GRACE_S)
        return True
    except asyncio.TimeoutError:
        return False


async def serve_tcp(
    host: str, port: int, make_server: Callable[[], LanguageServer], release: Callable[[Any], Awaitable[None]]
) -> int:
    """Listen on host:port and serve clients one after another; returns the exit code from `exit`.
    `release(server)` is awaited when each connection ends, also after a `shutdown` that started
    it: it must join a release in progress, not start a second one (`session.release` does)."""
    exit_code: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    slot = asyncio.Lock()  # held while a client is served and while its session is cleaned up
    current: list[str] = []  # the connected client's address, while there is one

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = str(writer.get_extra_info("peername"))
        if not await _take(slot, lambda: not current):
            log.warning("refusing %s: already serving %s", peer, current[0] if current else "another client")
            await refuse_busy(reader, writer, current[0] if current else "another client")
            return
        if exit_code.done():
            slot.release()
            writer.close()
            return
        current.append(peer)
        exiting: list[int] = []
        log.info("client %s connected", peer)
        server = make_server()
        server._stop_event = stop = Event()
        server.protocol.set_writer(writer)  # a StreamWriter, as in pygls' own TCP server
        try:
            await read_messages(stop, reader, server.protocol)
            log.info("client %s disconnected without `exit`; waiting for the next one", peer)
        except SystemExit:  # the `exit` notification: serve_tcp returns once this is cleaned up
            exiting.append(pygls_fixes.exit_code(server))
        except (ConnectionError, asyncio.IncompleteReadError) as exc:
            log.info("client %s: connection lost (%s); waiting for the next one", peer, exc)
        finally:
            current.clear()  # gone: a newcomer now waits for the clean-up instead of being refused
            try:
                if not await release_in_background(release(server), RELEASE_TIMEOUT_S):
                    log.error(
                        "closing the workers of %s's session took over %.0f s; serving the next client "
                        "while it goes on",
                        peer,
                        RELEASE_TIMEOUT_S,
                    )
            finally:
                server.shutdown()  # type: ignore[no-untyped-call]  # its thread pool; it has no listener
                writer.close()
                slot.release()
                if exiting and not exit_code.done():
                    exit_code.set_result(exiting[0])

    listener = await asyncio.start_server(connection, host, port)
    addrs = ", ".join(str(s.getsockname()) for s in listener.sockets)
    log.info("cudice language server listening on %s (one client at a time)", addrs)
    async with listener:
        code = await exit_code
    return code
