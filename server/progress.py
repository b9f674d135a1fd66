"""Server-initiated work-done progress with a cancel signal, throttled reports, and a no-op fallback.

`await WorkProgress.start(ls, title)` creates a token (`window/workDoneProgress/create`) when the
client supports it and sends `begin`; `report` is rate-limited (editors redraw on each one);
`end` is idempotent. `cancelled` is an asyncio.Event set when the client sends
`window/workDoneProgress/cancel` for the token (pygls cancels the token's future) or when
`cancel()` is called (the `cudice.cancel` command, for clients whose progress UI has no button).

Not covered: client-initiated tokens (`workDoneToken` in request params): commands here always
create their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from typing import Any

from lsprotocol import types as lsp
from pygls.lsp.server import LanguageServer


class WorkProgress:
    def __init__(self, ls: LanguageServer | None, token: str | None, min_interval_s: float = 0.1) -> None:
        self.ls = ls
        self.token = token
        self.cancelled = asyncio.Event()
        self.min_interval_s = min_interval_s
        self._last = 0.0
        self._ended = False

    @classmethod
    async def start(cls, ls: LanguageServer, title: str, message: str = "", cancellable: bool = True) -> WorkProgress:
        caps = ls.client_capabilities
        supported = bool(caps.window and caps.window.work_done_progress)
        if not supported:
            return cls(None, None)
        token = f"cudice-{uuid.uuid4().hex[:12]}"
        try:
            await asyncio.wait_for(ls.work_done_progress.create_async(token), 5.0)
        except Exception:  # a client that refuses or never answers: work on, without a progress UI
            return cls(None, None)
        self = cls(ls, token)
        loop = asyncio.get_running_loop()
        fut = ls.work_done_progress.tokens.get(token)
        if fut is not None:
            fut.add_done_callback(lambda _f: loop.call_soon_threadsafe(self.cancelled.set))
        ls.work_done_progress.begin(token, lsp.WorkDoneProgressBegin(
            title=title, message=message or None, cancellable=cancellable))
        return self

    def cancel(self) -> None:
        self.cancelled.set()

    def report(self, message: str, percentage: int | None = None, *, force: bool = False) -> None:
        if self.ls is None or self.token is None or self._ended:
            return
        now = time.monotonic()
        if not force and now - self._last < self.min_interval_s:
            return
        self._last = now
        self.ls.work_done_progress.report(self.token, lsp.WorkDoneProgressReport(
            message=message, percentage=percentage))

    def end(self, message: str = "") -> None:
        if self.ls is None or self.token is None or self._ended:
            return
        self._ended = True
        self.ls.work_done_progress.end(self.token, lsp.WorkDoneProgressEnd(message=message or None))
        tokens: dict[Any, Any] = self.ls.work_done_progress.tokens
        with contextlib.suppress(KeyError):
            del tokens[self.token]
