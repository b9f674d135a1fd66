"""The server's handle on the model worker process: load, generate/infill with progress, cancel, restart.

State is one of `missing` (no checkpoint configured), `idle` (configured, loads on first use:
`defer`), `loading`, `ready`, `error`; every change is reported through `on_state`. A job returns
the engine's own record, `cudice.model.generation.Generation`, and reports its `Progress`, both
rebuilt from the events of the child (`model_child.py`). A worker that dies on its own is
restarted up to `max_restarts` times in a row, and `on_notice` tells the user.

Two ways of running jobs, chosen per worker:
- serial (`batch=None`: the single-editor stdio/TCP server): one job at a time (the engine is
  single-stream); later jobs wait, and one cancelled while it waits never starts. Cancel = a
  `cancel` message, then SIGKILL of the worker if it has not stopped after `cancel_grace_s` (the
  worker is then restarted and the model reloaded).
- batched (`batch=BatchOptions(...)`: the multi-client server, server/team.py): the child serves
  generate AND infill jobs as rows of one continuous-batching engine
  (`cudice.model.batching.ContinuousBatcher`, `model_batched.py`), so jobs of several editors run
  at once, each joining at a block boundary. Cancel = a `cancel` message for that job only: its row
  leaves at the engine's next iteration and the other rows go on; the worker is never killed for a
  late cancel (after `cancel_grace_s` the job is reported cancelled and its late answer dropped).
  The engine's queue bound (`max_queue`) refuses a job with `ModelBusy`, never a wait. Whether the
  loaded engine batches is known after the load (`batched`, `capacity`); an engine that cannot
  (no `loaded.model`/sampler, as the tests' scripted engines) falls back to serial jobs.
A (re)load waits until the running jobs have ended, in both ways.

Not covered: running several models at once; preemption or priorities inside the batch (the
engine is FIFO; see `cudice.model.batching` for what it does not do).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from cudice.model.generation import Generation, Progress
from cudice.server.workers.protocol import ChildProcess

log = logging.getLogger(__name__)

WORKER_MODULE = "cudice.server.workers.model_child"


def _cancelled() -> Generation:
    """The result of a job cancelled before it produced anything."""
    return Generation("", None, 0, 0, 0.0, 0.0, cancelled=True, finish_reason="cancelled")


class ModelUnavailable(RuntimeError):
    """The model is not loaded (message says why and what to do)."""


class WorkerDied(RuntimeError):
    """The worker process exited during a job."""


class ModelBusy(RuntimeError):
    """The batching engine's queue is full: the job was refused, not queued (message says what to do)."""


BATCH_ENV = {
    "max_batch": "CUDICE_TEAM_MAX_BATCH",
    "max_queue": "CUDICE_TEAM_MAX_QUEUE",
    "num_pages": "CUDICE_TEAM_KV_PAGES",
    "page_size": "CUDICE_TEAM_KV_PAGE_SIZE",
}
BATCHING_ENV = "CUDICE_TEAM_BATCHING"  # "0" turns batching off (team jobs are then serialised)


@dataclass(frozen=True, slots=True)
class BatchOptions:
    """The continuous-batching engine of a batched worker: rows decoded together (`max_batch`),
    requests that may wait for a row (`max_queue`), and its paged KV pool (`num_pages` pages of
    `page_size` token slots). The defaults serve 32 editors' generations at once with 64 more
    waiting; `num_pages` 0 sizes the pool by the device where the model loads (`default_pages`)."""

    max_batch: int = 32
    max_queue: int = 64
    num_pages: int = 0
    page_size: int = 16

    @property
    def capacity(self) -> int:
        """Jobs the engine takes at once: running rows + waiting requests."""
        return self.max_batch + self.max_queue

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> BatchOptions | None:
        """The options the environment sets (`BATCH_ENV`, defaults otherwise); None when
        `CUDICE_TEAM_BATCHING=0`. Raises ValueError naming the variable that is not a positive integer."""
        env = os.environ if env is None else env
        if env.get(BATCHING_ENV, "1").strip() == "0":
            return None
        values: dict[str, int] = {}
        for name, var in BATCH_ENV.items():
            raw = env.get(var, "").strip()
            if not raw:
                continue
            if not raw.isdigit() or int(raw) < 1:
                raise ValueError(
                    f"{var}={raw!r} is not a positive integer; set it to a whole number >= 1 or unset it "
                    f"(default {getattr(cls(), name) or 'sized by the device'})"
                )
            values[name] = int(raw)
        return cls(**values)


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
        batch: BatchOptions | None = None,
    ) -> None:
        """`batch`: serve jobs through the child's continuous-batching engine (module docstring);
        None runs them one at a time."""
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
        self.batch = batch
        self.batched = False  # the loaded engine batches (the child said so in `loaded`)
        self.capacity: int | None = None  # batched: jobs it takes at once (rows + queue)
        self._active = 0  # batched jobs in flight
        self._idle = asyncio.Event()  # set while no batched job is in flight
        self._idle.set()

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
                await self._idle.wait()  # batched jobs in flight end first (serial ones hold the lock)
                self.batched, self.capacity = False, None
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
                        "batch": asdict(self.batch) if self.batch is not None else None,
                    }
                )
                event = await self._load_waiter
            if event.get("event") == "loaded":
                self.batched = bool(event.get("batched"))
                self.capacity = int(event.get("capacity") or 0) if self.batched else None
                if self.batch is not None:
                    note = event.get("batch_note") or "the engine cannot batch"
                    log.info(
                        "model worker: %s",
                        f"continuous batching, up to {self.capacity} jobs at once"
                        if self.batched
                        else f"jobs run one at a time ({note})",
                    )
                warning = event.get("style_warning") or ""
                if warning:
                    log.warning("model worker: %s", warning)
                self._set_state(
                    "ready",
                    f"model ready: {request.path} (loaded in {event.get('seconds', 0):.1f} s)"
                    + ("; prompted in a wording it was not trained on (see the log)" if warning else ""),
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
        """Run `generate` or `infill` in the worker. Raises ModelUnavailable / WorkerDied / ModelBusy
        (batched, the engine's queue is full) / RuntimeError."""
        if self.state != "ready":
            raise ModelUnavailable(self.message)
        if self.batched:
            return await self._run_batched(op, payload, cancel, on_progress)
        async with self._job_lock:
            if self.state != "ready" or self._proc is None:
                raise ModelUnavailable(self.message)
            return await self._run_serial_locked(op, payload, cancel, on_progress)

    async def _run_batched(
        self,
        op: str,
        payload: dict[str, Any],
        cancel: asyncio.Event,
        on_progress: Callable[[Progress], None] | None,
    ) -> Generation:
        """Send the job to the batching child at once: jobs of several callers are in flight together."""
        async with self._job_lock:  # only while a (re)load holds it: then run on the new worker
            if self.state != "ready" or self._proc is None:
                raise ModelUnavailable(self.message)
            if not self.batched:  # reloaded meanwhile with an engine that cannot batch
                return await self._run_serial_locked(op, payload, cancel, on_progress)
            proc = self._proc
            self._active += 1
            self._idle.clear()
        job_id = str(next(self._ids))
        q: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._queues[job_id] = q
        try:
            if cancel.is_set():  # cancelled while a load held the lock (its client left)
                return _cancelled()
            await proc.send({"op": op, "id": job_id, **payload})
            return await self._follow(proc, job_id, q, cancel, on_progress, batched=True)
        finally:
            del self._queues[job_id]
            self._active -= 1
            if self._active == 0:
                self._idle.set()

    async def _run_serial_locked(
        self,
        op: str,
        payload: dict[str, Any],
        cancel: asyncio.Event,
        on_progress: Callable[[Progress], None] | None,
    ) -> Generation:
        """One job while holding the job lock (serial workers)."""
        if cancel.is_set():  # cancelled while it waited for another job (its client left)
            return _cancelled()
        assert self._proc is not None
        proc = self._proc
        job_id = str(next(self._ids))
        q: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._queues[job_id] = q
        try:
            await proc.send({"op": op, "id": job_id, **payload})
            return await self._follow(proc, job_id, q, cancel, on_progress, batched=False)
        finally:
            del self._queues[job_id]

    async def _follow(
        self,
        proc: ChildProcess,
        job_id: str,
        q: asyncio.Queue[dict[str, Any]],
        cancel: asyncio.Event,
        on_progress: Callable[[Progress], None] | None,
        *,
        batched: bool,
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
                    if batched:  # the other rows go on: report this one cancelled, drop its late answer
                        log.warning(
                            "model job %s: no answer %.1f s after its cancel; reported cancelled",
                            job_id,
                            self.cancel_grace_s,
                        )
                        return _cancelled()
                    # the grace period ran out: kill the worker; it is restarted and reloaded.
                    log.warning("model worker ignored cancel for %.1f s; killing it", self.cancel_grace_s)
                    self._expected_exit = True
                    proc.kill()
                    asyncio.get_running_loop().create_task(self._reload_after_kill())
                    return _cancelled()
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
                    gen = _generation(event, was_cancelled=deadline is not None)
                    if batched:
                        log.info(
                            "model job %s %s: %d tokens in %.1f s, in a batch of up to %s rows",
                            job_id,
                            "cancelled" if gen.cancelled else "done",
                            gen.num_tokens,
                            gen.seconds,
                            event.get("batch_rows", "?"),
                        )
                    return gen
                elif kind == "error" and event.get("busy"):
                    raise ModelBusy(
                        f"the shared model is busy: {event.get('message')}; this generation was not "
                        "started. Try again when a generation finishes, or cancel one (cudice.cancel)"
                    )
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
