"""The server's log, sent to the client as `window/logMessage` with each record's own level.

Over stdio the server's stderr is the editor's server log, and Neovim writes every stderr line
of a server to its `lsp.log` as `[ERROR]`, so the routine info lines looked like failures. Once
the client is initialized, records below ERROR go to the client as `window/logMessage` (Neovim
logs them at their level, VS Code shows them in the output channel); errors stay on stderr,
which is also where everything goes before `initialized` and after the connection is gone.

Not covered: TCP mode (its stderr is the terminal of whoever started the server: unchanged), and
the workers' own stderr (read by the server and reported through its log).
"""

from __future__ import annotations

import asyncio
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
    """Sends records below ERROR as `window/logMessage`; from any thread, never recursively."""

    def __init__(self, ls: Any, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self.ls, self.loop = ls, loop
        self._local = threading.local()
        self.addFilter(lambda record: record.levelno < logging.ERROR)

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(self._local, "busy", False):  # sending logged something itself
            return
        self._local.busy = True
        try:
            params = lsp.LogMessageParams(type=message_type(record.levelno), message=self.format(record))
            if self.loop.is_closed():
                return
            try:
                is_loop_thread = asyncio.get_running_loop() is self.loop
            except RuntimeError:
                is_loop_thread = False
            if is_loop_thread:
                self.ls.window_log_message(params)
            else:
                self.loop.call_soon_threadsafe(self.ls.window_log_message, params)
        except Exception:
            self.handleError(record)
        finally:
            self._local.busy = False


def route_to_client(ls: Any, loop: asyncio.AbstractEventLoop) -> ClientLogHandler:
    """Send the `cudice` log below ERROR to the client and keep only errors on stderr."""
    handler = ClientLogHandler(ls, loop)
    handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    logging.getLogger("cudice").addHandler(handler)
    for h in logging.getLogger().handlers:  # basicConfig's stderr handler (run() in app.py)
        if isinstance(h, logging.StreamHandler) and not isinstance(h, ClientLogHandler):
            h.addFilter(_errors_or_foreign)
    return handler


def _errors_or_foreign(record: logging.LogRecord) -> bool:
    """On stderr: cudice's errors, and every record of other libraries (pygls' own)."""
    return record.levelno >= logging.ERROR or not record.name.startswith("cudice")
