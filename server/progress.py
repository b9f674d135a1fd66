"""Server-initiated work-done progress with a cancel signal, throttled reports, and a no-op fallback.

`await WorkProgress.start(ls, title)` creates a token (`window/workDoneProgress/create`) when the
client supports it and sends `begin`; `report` is rate-limited (editors redraw on each one);
`end` is idempotent. `tick()` starts a task that re-sends the last message with the elapsed
time every `interval_s` (builds and model loads go minutes without a new stage: the editor
shows they are alive), until `end`. `cancelled` is an asyncio.Event set when the client sends
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
        self.started = time.monotonic()
        self.label = ""
        self.percentage: int | None = None
        self._ticker: asyncio.Task[None] | None = None

    @classmethod
    async def start(
        cls,
        ls: LanguageServer,
        title: str,
        message: str = "",
        cancellable: bool = True,
        percentage: int | None = None,
    ) -> WorkProgress:
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
        ls.work_done_progress.begin(
            token,
            lsp.WorkDoneProgressBegin(
                title=title, message=message or None, cancellable=cancellable, percentage=percentage
            ),
        )
        return self

    def cancel(self) -> None:
        self.cancelled.set()

    def tick(self, interval_s: float = 2.0) -> None:
        """Re-send the last message with the elapsed seconds every `interval_s` until `end`."""
        if self.ls is None or self._ticker is not None:
            return

        async def run() -> None:
            while not self._ended and not getattr(self.ls, "released", False):  # no ticks after shutdown
                await asyncio.sleep(interval_s)
                self._send(
                    f"{self.label} · {time.monotonic() - self.started:.0f} s"
                    if self.label
                    else f"{time.monotonic() - self.started:.0f} s",
                    self.percentage,
                )

        self._ticker = asyncio.get_running_loop().create_task(run())

    def report(self, message: str, percentage: int | None = None, *, force: bool = False) -> None:
        self.label, self.percentage = message, percentage if percentage is not None else self.percentage
        if self.ls is None or self.token is None or self._ended:
            return
        now = time.monotonic()
        if not force and now - self._last < self.min_interval_s:
            return
        self._send(message, self.percentage)

    def _send(self, message: str, percentage: int | None) -> None:
        if self.ls is None or self.token is None or self._ended:
            return
        self._last = time.monotonic()
        self.ls.work_done_progress.report(
            self.token, lsp.WorkDoneProgressReport(message=message, percentage=percentage)
        )

    def end(self, message: str = "") -> None:
        if self.ls is None or self.token is None or self._ended:
            return
        self._ended = True
        if self._ticker is not None:
            self._ticker.cancel()
        self.ls.work_done_progress.end(self.token, lsp.WorkDoneProgressEnd(message=message or None))
        tokens: dict[Any, Any] = self.ls.work_done_progress.tokens
        with contextlib.suppress(KeyError):
            del tokens[self.token]
