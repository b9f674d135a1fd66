"""The server's log, sent to the client as `window/logMessage` with each record's own level.

Over stdio the server's stderr is the editor's server log, and Neovim writes every stderr line
of a server to its `lsp.log` as `[ERROR]`, so the routine info lines looked like failures.
`route_to_client` is called by app.py's `run()` before the server reads its first message: from
then on cudice's records below ERROR never go to stderr. They go to the client as
`window/logMessage` (Neovim logs them at their level, VS Code shows them in the output channel)
once `start_sending` is called from the `initialize` handler (the LSP specification allows
`window/logMessage` while `initialize` is handled); the few logged before that (none but the
settings' warnings in practice) wait in a bounded buffer and are sent then, in order. Errors stay
on stderr, and so does every record of other libraries (pygls' own).

Not covered: TCP mode (its stderr is the terminal of whoever started the server: unchanged), the
workers' own stderr (read by the server and reported through its log), records below ERROR of a
connection that never sends `initialize` (dropped), and those logged after the loop has closed.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
from typing import Any

from lsprotocol import types as lsp

_TYPES = (
    (logging.ERROR, lsp.MessageType.Error),
    (logging.WARNING, lsp.MessageType.Warning),
    (logging.INFO, lsp.MessageType.Info),
)


def message_type(levelno: int) -> lsp.MessageType:
    """The LSP message type of a logging level (DEBUG and below: `Log`)."""
    return next((kind for level, kind in _TYPES if levelno >= level), lsp.MessageType.Log)


class ClientLogHandler(logging.Handler):
    """Sends records below ERROR as `window/logMessage`; from any thread, never recursively.
    Until `start_sending` gives it the connection's event loop, it keeps the last `PENDING_MAX`."""

    PENDING_MAX = 200

    def __init__(self, ls: Any, loop: asyncio.AbstractEventLoop | None = None) -> None:
        super().__init__()
        self.ls, self.loop = ls, loop
        self._local = threading.local()
        self._pending: collections.deque[lsp.LogMessageParams] = collections.deque(maxlen=self.PENDING_MAX)
        self._lock = threading.Lock()
        self.addFilter(lambda record: record.levelno < logging.ERROR)

    def start_sending(self, loop: asyncio.AbstractEventLoop) -> None:
        """Send from now on through `loop` (call it on that loop's thread), the kept records first."""
        with self._lock:
            self.loop = loop
            pending, self._pending = list(self._pending), collections.deque(maxlen=self.PENDING_MAX)
        for params in pending:
            self.ls.window_log_message(params)

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(self._local, "busy", False):  # sending logged something itself
            return
        self._local.busy = True
        try:
            params = lsp.LogMessageParams(type=message_type(record.levelno), message=self.format(record))
            with self._lock:
                loop = self.loop
                if loop is None:
                    self._pending.append(params)
                    return
            if loop.is_closed():
                return
            try:
                is_loop_thread = asyncio.get_running_loop() is loop
            except RuntimeError:
                is_loop_thread = False
            if is_loop_thread:
                self.ls.window_log_message(params)
            else:
                loop.call_soon_threadsafe(self.ls.window_log_message, params)
        except Exception:
            self.handleError(record)
        finally:
            self._local.busy = False


def route_to_client(ls: Any, loop: asyncio.AbstractEventLoop | None = None) -> ClientLogHandler:
    """Send the `cudice` log below ERROR to the client and keep only errors on stderr. Without a
    `loop` the records wait until `start_sending(ls, loop)`."""
    handler = ClientLogHandler(ls, loop)
    handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    logging.getLogger("cudice").addHandler(handler)
    for h in logging.getLogger().handlers:  # basicConfig's stderr handler (run() in app.py)
        if isinstance(h, logging.StreamHandler) and not isinstance(h, ClientLogHandler):
            h.addFilter(_errors_or_foreign)
    return handler


def start_sending(ls: Any, loop: asyncio.AbstractEventLoop) -> bool:
    """Start sending `ls`'s routed records (route_to_client without a loop) through `loop`;
    False when none was routed for `ls`."""
    handlers = [
        h for h in logging.getLogger("cudice").handlers if isinstance(h, ClientLogHandler) and h.ls is ls
    ]
    for h in handlers:
        h.start_sending(loop)
    return bool(handlers)


def _errors_or_foreign(record: logging.LogRecord) -> bool:
    """On stderr: cudice's errors, and every record of other libraries (pygls' own)."""
    return record.levelno >= logging.ERROR or not record.name.startswith("cudice")
