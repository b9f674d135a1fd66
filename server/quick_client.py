"""The server's handle on the quick-check worker (quick_worker.py): one request at a time, restarts on death.

`QuickChecks.check(path, source)` returns the quick `VerifyResult`, or None when the worker died
or did not answer within `timeout_s` (the full verification still runs, so nothing is lost: the
user only waits longer for the first diagnostics). A dead worker is restarted on the next call.
Not covered: cancelling a check in flight (they take ~0.3 s once warm; a stale answer is dropped
by the caller, which compares document versions).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Any

from cudice.server.procs import ChildProcess
from cudice.verifier.result import VerifyResult

log = logging.getLogger(__name__)


class QuickChecks:
    def __init__(self, *, env: dict[str, str] | None = None, timeout_s: float = 60.0) -> None:
        self.env = env
        self.timeout_s = timeout_s
        self._proc: ChildProcess | None = None
        self._waiters: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._ids = itertools.count(1)
        self._lock = asyncio.Lock()
        self._reader: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Start (and warm) the worker if it is not running."""
        if self._proc is not None and self._proc.is_alive:
            return
        self._proc = ChildProcess("cudice.server.quick_worker", env=self.env)
        await self._proc.start()
        self._reader = asyncio.create_task(self._read(self._proc))

    async def _read(self, proc: ChildProcess) -> None:
        async for event in proc.events():
            fut = self._waiters.get(str(event.get("id")))
            if fut is not None and not fut.done():
                fut.set_result(event)
        code = await proc.wait()
        log.warning("quick-check worker exited with code %s: %s", code, proc.error_tail(3))
        for fut in self._waiters.values():
            if not fut.done():
                fut.set_result({"event": "error", "message": "quick-check worker exited"})

    async def check(self, path: str, source: str) -> VerifyResult | None:
        async with self._lock:
            try:
                await self.start()
            except OSError as exc:
                log.error("cannot start the quick-check worker: %s", exc)
                return None
            assert self._proc is not None
            job_id = str(next(self._ids))
            fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
            self._waiters[job_id] = fut
            try:
                if not await self._proc.send({"id": job_id, "path": path, "source": source}):
                    return None
                event = await asyncio.wait_for(fut, self.timeout_s)
            except asyncio.TimeoutError:
                log.warning("quick check of %s took over %.0f s; restarting its worker", path, self.timeout_s)
                self._proc.kill()
                return None
            finally:
                del self._waiters[job_id]
        if event.get("event") != "result":
            log.warning("quick check of %s failed: %s", path, event.get("message"))
            return None
        try:
            return VerifyResult.from_dict(event["result"])
        except (KeyError, ValueError, TypeError) as exc:
            log.error("unreadable quick-check result: %s", exc)
            return None

    async def shutdown(self) -> None:
        if self._proc is not None:
            await self._proc.close(grace_s=1.0)  # stateless: a kill loses nothing
