"""The server's handle on the quick-check worker (quick_child.py): one request at a time, restarts on death.

`QuickChecks.check(path, source)` returns the quick `VerifyResult`, or None when the worker died,
is stuck, or did not answer in time. None loses nothing: the full verification runs beside it and
publishes the build's diagnostics either way; the user only waits longer for the first ones.

How long a check may take adapts to what the worker is doing (it reports its CPU use every 2 s):
- the first check after the worker (re)starts may take `first_timeout_s` (10 min): clangd builds
  its torch-header preamble first, which takes far longer on a loaded small machine than on an idle
  one (docs/benchmarks.md);
- later checks get `timeout_s` (`cudice.verify.quickCheckTimeoutSeconds`, 60 s);
- past that bound the server stops waiting, but kills the worker only if it made no progress
  (no CPU used) for `stall_s` (60 s): a worker still building its preamble is kept, and the next
  check profits from it. A worker stalled that long is killed at once, bound or not.
The server hands each check the static stage's result it computed for the save (`static`,
server/verification.py), so the worker runs clangd and no static checks of its own when that
result fits the text, reference and strictness it checks.
Not covered: cancelling a check in flight (a warm check is short; a stale answer is dropped
by the caller, which compares document versions).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from typing import TYPE_CHECKING, Any

from cudice.server.workers.protocol import STATIC_FIELD, ChildProcess
from cudice.verifier.config import VerifyConfig
from cudice.verifier.source.result import VerifyResult

if TYPE_CHECKING:
    from cudice.verifier.api import StaticResult

log = logging.getLogger(__name__)


MIN_PROGRESS_CPU_S = 0.05  # CPU seconds between heartbeats that count as progress


def quick_request(
    job_id: str, path: str, source: str, static_policy: str | None, static: StaticResult | None
) -> dict[str, Any]:
    """The request sent to the quick worker (quick_child.py lists its fields). Its config is a
    `VerifyConfig` with `static_policy` (the verifier's default when None), sent as the verify
    worker's is (`VerifyConfig.overrides()`, read back with `from_dict`); an invalid policy raises
    `ValueError` here."""
    config = VerifyConfig() if static_policy is None else VerifyConfig(static_policy=static_policy)
    request: dict[str, Any] = {"id": job_id, "path": path, "source": source, "config": config.overrides()}
    if static is not None:
        request[STATIC_FIELD] = static.to_dict()
    return request


class QuickChecks:
    def __init__(
        self,
        *,
        env: dict[str, str] | None = None,
        timeout_s: float = 60.0,
        first_timeout_s: float = 600.0,
        stall_s: float = 60.0,
    ) -> None:
        if min(timeout_s, first_timeout_s, stall_s) <= 0:
            raise ValueError("quick-check timeouts must be positive")
        self.env = env
        self.timeout_s = timeout_s
        self.first_timeout_s = first_timeout_s
        self.stall_s = stall_s
        self._proc: ChildProcess | None = None
        self._waiters: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._ids = itertools.count(1)
        self._lock = asyncio.Lock()
        self._start_lock = asyncio.Lock()  # a save right after `initialize` must not start a second worker
        self._reader: asyncio.Task[None] | None = None
        self._warm = False  # the current worker has answered a check (its preamble is built)
        self._cpu_s: float | None = None  # its last reported CPU use ...
        self._progress_at = 0.0  # ... and when that last grew

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.is_alive else None

    async def start(self) -> None:
        """Start (and warm) the worker if it is not running; concurrent callers share one start."""
        async with self._start_lock:
            if self._proc is not None and self._proc.is_alive:
                return
            self._proc = ChildProcess("cudice.server.workers.quick_child", env=self.env)
            self._warm, self._cpu_s = False, None
            await self._proc.start()
            self._reader = asyncio.create_task(self._read(self._proc))

    async def _read(self, proc: ChildProcess) -> None:
        async for event in proc.events():
            if event.get("event") == "progress":
                cpu = event.get("cpu_s")
                if isinstance(cpu, (int, float)) and (
                    self._cpu_s is None or cpu >= self._cpu_s + MIN_PROGRESS_CPU_S
                ):
                    self._cpu_s, self._progress_at = float(cpu), time.monotonic()
                continue
            if event.get("event") == "result" and proc is self._proc:
                self._warm = True
            fut = self._waiters.get(str(event.get("id")))
            if fut is not None and not fut.done():
                fut.set_result(event)
        code = await proc.wait()
        log.warning("quick-check worker exited with code %s: %s", code, proc.error_tail(3))
        for fut in self._waiters.values():
            if not fut.done():
                fut.set_result({"event": "error", "message": "quick-check worker exited"})

    async def check(
        self,
        path: str,
        source: str,
        *,
        timeout_s: float | None = None,
        static_policy: str | None = None,
        static: StaticResult | None = None,
    ) -> VerifyResult | None:
        """The quick result, or None (see the module docstring). `timeout_s` overrides the warm bound;
        `static_policy` is the strictness the static checks use (the verifier's default when None);
        `static` the static stage's result computed for this save (the worker then runs no checks
        when it fits the text, reference and policy checked)."""
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
                try:
                    request = quick_request(job_id, path, source, static_policy, static)
                except ValueError as exc:  # the worker would refuse it as well
                    log.warning("quick check of %s failed: %s", path, exc)
                    return None
                if not await self._proc.send(request):
                    return None
                event = await self._wait(fut, path, timeout_s if timeout_s is not None else self.timeout_s)
            finally:
                del self._waiters[job_id]
        if event is None:
            return None
        if event.get("event") != "result":
            log.warning("quick check of %s failed: %s", path, event.get("message"))
            return None
        try:
            return VerifyResult.from_dict(event["result"])
        except (KeyError, ValueError, TypeError) as exc:
            log.error("unreadable quick-check result: %s", exc)
            return None

    async def _wait(
        self, fut: asyncio.Future[dict[str, Any]], path: str, warm_bound_s: float
    ) -> dict[str, Any] | None:
        assert self._proc is not None
        proc = self._proc
        bound = warm_bound_s if self._warm else max(warm_bound_s, self.first_timeout_s)
        start = self._progress_at = time.monotonic()
        poll_s = min(1.0, self.stall_s / 4, bound / 4)
        while True:
            try:
                return await asyncio.wait_for(asyncio.shield(fut), poll_s)
            except asyncio.TimeoutError:
                pass
            now = time.monotonic()
            if now - self._progress_at > self.stall_s:
                log.warning(
                    "quick check of %s: its worker used no CPU for %.0f s; restarting it", path, self.stall_s
                )
                proc.kill()
                await proc.wait()  # reaped: the next check starts a fresh worker
                return None
            if now - start > bound:
                log.warning(
                    "quick check of %s took over %.0f s; not waiting for it (the full build's diagnostics "
                    "follow); its worker is still working, so it is kept",
                    path,
                    bound,
                )
                return None

    async def shutdown(self) -> None:
        if self._proc is not None:
            await self._proc.close(grace_s=1.0)  # stateless: a kill loses nothing
