"""pygls 2.1.1 fixes that are not the read loop or the TCP listener: the stdio server, the exit
code and the request-future table.

`serve_stdio(server, ...)` is pygls' `start_io` with cudice's read loop (`rpc_reader.py`: bad frames
never deafen the server, unreadable requests are answered, nothing pops up), started from a first
frame `fast_init` may already have read (and answered: pygls' own reply to that id is then
dropped). pygls' `exit` closes stdout and raises SystemExit at once, also while the `shutdown`
before it is still being handled (a client need not wait for its reply): ending the event loop
there would cancel that handler mid-way, and asyncio would print the traceback of pygls' callback
on it. So the loop first awaits `after_exit` (the server's wait for its shutdown), and a reply
that comes after `exit` is dropped (`StdoutWriter`) instead of written to the closed stdout.
`serve_stdio` returns the exit code the LSP specification asks for (`exit_code`: 0 when `shutdown`
came before `exit`, else 1). pygls' own code reads a flag it sets only once the server's `shutdown`
handler has returned, so an `exit` right behind `shutdown` would get 1: `CudiceProtocol` notes the
`shutdown` request as it arrives instead.
`SnapshotItems` replaces the protocol's `_request_futures` table (`install`): pygls' `shutdown`
cancels the requests in flight while iterating it, and a running command's future removes itself
from it as it is cancelled ("dictionary changed size during iteration": `shutdown` failed while a
generation ran); iterating over a snapshot fixes that.

Not covered: pygls versions other than 2.1 (the attributes patched here are pygls internals).
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, BinaryIO

from lsprotocol import types as lsp
from pygls.protocol import LanguageServerProtocol, lsp_method

if TYPE_CHECKING:
    from collections.abc import Generator

    from cudice.server.fast_init import EarlyFrame
    from pygls.lsp.server import LanguageServer

log = logging.getLogger("cudice.server")


class SnapshotItems(dict[Any, Any]):
    """A dict whose `items()` is a list: iterating it survives removals meanwhile."""

    def items(self) -> Any:
        return list(super().items())


class StdoutWriter:
    """pygls' stdout writer (`pygls.io_.StdoutWriter`), which drops what is written after `close`
    (pygls' `exit` closes stdout; a reply still pending then has nobody to read it)."""

    def __init__(self, stdout: BinaryIO) -> None:
        self._stdout = stdout
        self.is_closed = False

    def close(self) -> None:
        self.is_closed = True
        self._stdout.close()

    def write(self, data: bytes) -> None:
        if self.is_closed:
            log.debug("dropping %d bytes for the client: it sent `exit`", len(data))
            return
        self._stdout.write(data)
        self._stdout.flush()


class CudiceProtocol(LanguageServerProtocol):
    """pygls' LSP protocol, which notes the `shutdown` request as it arrives (`shutdown_received`),
    before the server's own handler runs."""

    shutdown_received = False

    @lsp_method(lsp.SHUTDOWN)
    def lsp_shutdown(self, *args: Any) -> Generator[Any, Any, None]:
        self.shutdown_received = True
        yield from super().lsp_shutdown(*args)


INTERRUPTED = 130  # serve_stdio's exit code after Ctrl-C (SIGINT)


def exit_code(server: LanguageServer) -> int:
    """The exit code for `exit`: 0 when `shutdown` came before it, else 1 (LSP specification,
    https://microsoft.github.io/language-server-protocol/specifications/lsp/3.17/specification/#exit)."""
    protocol = server.protocol
    received = protocol.shutdown_received if isinstance(protocol, CudiceProtocol) else protocol._shutdown
    return 0 if received else 1


def install(server: LanguageServer) -> None:
    """Apply the fixes that live on a server object (its request-future table)."""
    server.protocol._request_futures = SnapshotItems()


def serve_stdio(
    server: LanguageServer,
    stdin: Any = None,
    stdout: Any = None,
    *,
    early: EarlyFrame | None = None,
    after_exit: Callable[[], Awaitable[None]] | None = None,
) -> int:
    """Serve `server` on stdio until EOF, `exit`, Ctrl-C or a lost connection, then shut it down
    (blocks); the process's exit code (`exit_code` after `exit`, `INTERRUPTED` after Ctrl-C, else
    0). After Ctrl-C a thread may still be blocked reading stdin: the caller must end the process
    with `os._exit` (a normal exit would wait for that read). After `exit` or at the end of
    stdin, `after_exit` is awaited before the event loop ends."""
    from cudice.server.transport.rpc_reader import read_messages
    from pygls.io_ import StdinAsyncReader

    server._stop_event = threading.Event()
    reader = StdinAsyncReader(stdin or sys.stdin.buffer, server.thread_pool)
    writer: Any = StdoutWriter(stdout or sys.stdout.buffer)
    if early is not None and early.answered_id is not None:
        from cudice.server.fast_init import DropReply

        writer = DropReply(writer, early.answered_id)
    server.protocol.set_writer(writer)
    first = [early.body] if early is not None else []
    code = 0

    async def serve() -> None:
        nonlocal code
        try:
            await read_messages(server._stop_event, reader, server.protocol, first)  # type: ignore[arg-type]
        except SystemExit:  # `exit`: what it would cut short ends first
            code = exit_code(server)
        # `exit`, or the end of stdin (a client that went away without it): the release ends first
        if after_exit is not None:
            await after_exit()

    try:
        asyncio.run(serve())
    except BrokenPipeError:
        log.error("the connection to the client is lost; shutting down")
    except KeyboardInterrupt:  # Ctrl-C: 128 + SIGINT, as the TCP server exits
        code = INTERRUPTED
        # A thread of the pool is blocked reading stdin, and pygls' shutdown would wait for it:
        # the pool is let go instead, and the caller ends the process without joining it (app.run).
        if server._stop_event is not None:
            server._stop_event.set()
        server.thread_pool.shutdown(wait=False, cancel_futures=True)
        return code
    server.shutdown()  # type: ignore[no-untyped-call]
    return code
