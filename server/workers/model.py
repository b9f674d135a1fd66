"""The server's handle on the model worker process: load, generate/infill with progress, cancel, restart.

State is one of `missing` (no checkpoint configured), `idle` (configured, loads on first use:
`defer`), `loading`, `ready`, `error`; every change is reported through `on_state`. One job runs at
a time (the engine is single-stream); later jobs wait (in multi-client mode, server/team.py, the
jobs of every editor: serialised), and one cancelled while it waits never starts. Cancel = a
`cancel` message, then SIGKILL of the worker if it has not stopped after `cancel_grace_s` (the
worker is then restarted and the model reloaded). A worker that dies on its own is restarted up to
`max_restarts` times in a row, and `on_notice` tells the user. A job returns the engine's own
record, `cudice.model.generation.Generation`, and reports its `Progress`, both rebuilt from the
events of the child (`model_child.py`).

Not covered: batching several users' requests; running several models at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cudice.model.generation import Generation, Progress
from cudice.server.workers.protocol import ChildProcess

log = logging.getLogger(__name__)

WORKER_MODULE = "cudice.server.workers.model_child"


class ModelUnavailable(RuntimeError):
    """The model is not loaded (message says why and what to do)."""


class WorkerDied(RuntimeError):
    """The worker process exited during a job."""


@dataclass(frozen=True, slots=True)
class LoadRequest:
    path: str
    device: str
    dtype: str
    fast: str = "auto"  # cudice.model.fast: auto | on | off


class ModelWorker:
    def __init__(
        self,
        *,
        on_state: Callable[[str, str], None],
        on_notice: Callable[[str], None],
        env: dict[str, str] | None = None,
        cancel_grace_s: float = 3.0,
        max_restarts: int = 3,
    ) -> None:
        self.on_state = on_state
        self.on_notice = on_notice
        self.env = env
        self.cancel_grace_s = cancel_grace_s
        self.max_restarts = max_restarts
        # Until the first `load` (once the editor's settings arrive, usually the bundled model) the
        # model counts as loading: nothing is known to be missing yet.
        self.state = "loading"
        self.message = "the model is not loaded yet: the server is starting"
        self._settled = asyncio.Event()  # set while the state is anything but "loading"
        self.request: LoadRequest | None = None
        self.num_restarts = 0
        self._proc: ChildProcess | None = None
        self._reader: asyncio.Task[None] | None = None
        self._queues: dict[str, asyncio.Queue[dict[str, Any]]] = {}
        self._load_waiter: asyncio.Future[dict[str, Any]] | None = None
        self._job_lock = asyncio.Lock()
        self._load_lock = asyncio.Lock()
        self._ids = itertools.count(1)
        self._closing = False
        self._expected_exit = False

    # -- state ---------------------------------------------------------------------------------
    def _set_state(self, state: str, message: str) -> None:
        self.state, self.message = state, message
        if state == "loading":
            self._settled.clear()
        else:
            self._settled.set()
        self.on_state(state, message)

    def defer(self, request: LoadRequest) -> None:
        """Configured but not loaded: state "idle" until `load` (the first generate or infill)."""
        if self._proc is None:
            self.request = request
            self._set_state("idle", f"the model loads on the first generate: {request.path}")

    async def wait_until_loaded(self) -> str:
        """Wait while the model is loading (also before the first load); returns the state then."""
        await self._settled.wait()
        return self.state

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    # -- process -------------------------------------------------------------------------------
    async def _spawn(self) -> None:
        self._proc = ChildProcess(WORKER_MODULE, env=self.env)
        self._expected_exit = False
        await self._proc.start()
        self._reader = asyncio.create_task(self._read(self._proc))

    async def _read(self, proc: ChildProcess) -> None:
        async for event in proc.events():
            kind = event.get("event")
            if kind in ("loaded", "load_error"):
                if self._load_waiter is not None and not self._load_waiter.done():
                    self._load_waiter.set_result(event)
            elif kind in ("progress", "done", "error"):
                q = self._queues.get(str(event.get("id")))
                if q is not None:
                    q.put_nowait(event)
        code = await proc.wait()
        if proc is not self._proc:
            return
        died = {"event": "died", "message": f"model worker exited with code {code}: {proc.error_tail(3)}"}
        if self._load_waiter is not None and not self._load_waiter.done():
            self._load_waiter.set_result(died)
        for q in self._queues.values():
            q.put_nowait(died)
        if not self._closing and not self._expected_exit:
            asyncio.get_running_loop().create_task(self._restart(str(died["message"])))

    async def _restart(self, why: str) -> None:
        self.num_restarts += 1
        if self.request is None:
            self._set_state("missing", self.message)
            return
        if self.num_restarts > self.max_restarts:
            self._set_state(
                "error",
                f"{why}; gave up after {self.max_restarts} restarts (run cudice.reloadModel to try again)",
            )
            self.on_notice(self.message)
            return
        self.on_notice(f"cudice: {why}. Restarting the model worker (restart {self.num_restarts}).")
        await self.load(self.request)

    async def _stop_process(self) -> None:
        if self._proc is not None:
            self._expected_exit = True
            proc, self._proc = self._proc, None
            proc.kill()
            await proc.wait()

    # -- public --------------------------------------------------------------------------------
    async def load(self, request: LoadRequest | None) -> bool:
        """(Re)load the model in a fresh worker; returns whether it is ready. None unloads."""
        async with self._load_lock:
            self.request = request
            async with self._job_lock:
                await self._stop_process()
                if request is None or not request.path:
                    self._set_state("missing", "no model configured: set cudice.model.path")
                    return False
                self._set_state("loading", f"loading {request.path}")
                await self._spawn()
                assert self._proc is not None
                self._load_waiter = asyncio.get_running_loop().create_future()
                await self._proc.send(
                    {
                        "op": "load",
                        "path": request.path,
                        "device": request.device,
                        "dtype": request.dtype,
                        "fast": request.fast,
                    }
                )
                event = await self._load_waiter
            if event.get("event") == "loaded":
                self._set_state(
                    "ready", f"model ready: {request.path} (loaded in {event.get('seconds', 0):.1f} s)"
                )
                return True
            self._set_state("error", f"model failed to load from {request.path}: {event.get('message')}")
            return False

    async def run(
        self,
        op: str,
        payload: dict[str, Any],
        *,
        cancel: asyncio.Event,
        on_progress: Callable[[Progress], None] | None = None,
    ) -> Generation:
        """Run `generate` or `infill` in the worker. Raises ModelUnavailable / WorkerDied / RuntimeError."""
        if self.state != "ready":
            raise ModelUnavailable(self.message)
        async with self._job_lock:
            if self.state != "ready" or self._proc is None:
                raise ModelUnavailable(self.message)
            if cancel.is_set():  # cancelled while it waited for another job (its client left)
                return Generation("", None, 0, 0, 0.0, 0.0, cancelled=True, finish_reason="cancelled")
            proc = self._proc
            job_id = str(next(self._ids))
            q: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
            self._queues[job_id] = q
            try:
                await proc.send({"op": op, "id": job_id, **payload})
                return await self._follow(proc, job_id, q, cancel, on_progress)
            finally:
                del self._queues[job_id]

    async def _follow(
        self,
        proc: ChildProcess,
        job_id: str,
        q: asyncio.Queue[dict[str, Any]],
        cancel: asyncio.Event,
        on_progress: Callable[[Progress], None] | None,
    ) -> Generation:
        cancel_wait = asyncio.ensure_future(cancel.wait())
        deadline: float | None = None
        try:
            while True:
                get = asyncio.ensure_future(q.get())
                timeout = None if deadline is None else max(deadline - asyncio.get_running_loop().time(), 0)
                done, _ = await asyncio.wait(
                    {get, cancel_wait}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                )
                if get not in done:
                    get.cancel()
                    if cancel_wait in done and deadline is None:
                        await proc.send({"op": "cancel", "id": job_id})
                        deadline = asyncio.get_running_loop().time() + self.cancel_grace_s
                        cancel_wait = asyncio.ensure_future(asyncio.Event().wait())  # never again
                        continue
                    # the grace period ran out: kill the worker; it is restarted and reloaded.
                    log.warning("model worker ignored cancel for %.1f s; killing it", self.cancel_grace_s)
                    self._expected_exit = True
                    proc.kill()
                    asyncio.get_running_loop().create_task(self._reload_after_kill())
                    return Generation("", None, 0, 0, 0.0, 0.0, cancelled=True, finish_reason="cancelled")
                event = get.result()
                kind = event.get("event")
                if kind == "progress" and on_progress is not None:
                    on_progress(
                        Progress(
                            int(event.get("num_tokens", 0)),
                            int(event.get("num_forwards", 0)),
                            float(event.get("seconds", 0.0)),
                        )
                    )
                elif kind == "done":
                    self.num_restarts = 0  # a job went through: restarts count "in a row"
                    return _generation(event, was_cancelled=deadline is not None)
                elif kind == "error":
                    raise RuntimeError(str(event.get("message")))
                elif kind == "died":
                    raise WorkerDied(str(event.get("message")))
        finally:
            cancel_wait.cancel()

    async def _reload_after_kill(self) -> None:
        if self.request is not None:
            await self.load(self.request)

    async def shutdown(self) -> None:
        self._closing = True
        if self._proc is not None:
            await self._proc.close(grace_s=1.0)
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader


def _generation(event: dict[str, Any], *, was_cancelled: bool) -> Generation:
    """The `done` event (`model_child._generation_fields`) as the engine's record."""
    cancelled = bool(event.get("cancelled")) or was_cancelled
    return Generation(
        text=str(event.get("text", "")),
        middle=event.get("middle"),
        num_tokens=int(event.get("num_tokens", 0)),
        num_forwards=int(event.get("num_forwards", 0)),
        tokens_per_forward=float(event.get("tokens_per_forward", 0.0)),
        seconds=float(event.get("seconds", 0.0)),
        cancelled=cancelled,
        step_map=tuple(int(step) for step in event.get("step_map") or ()),
        finish_reason=str(event.get("finish_reason") or ("cancelled" if cancelled else "length")),
        raw_text=str(event.get("raw_text", "")),
    )
