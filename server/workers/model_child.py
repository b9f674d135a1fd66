"""The model worker: `python -m cudice.server.workers.model_child`. Loads the engine, runs its jobs.

Jobs run one at a time, unless the load asks for batching (`"batch"`, the multi-client server)
and the engine can batch: then every generate and infill job is a row of one continuous-batching
engine (`model_batched.py`), submitted at once, and jobs of several editors decode together.

Requests on stdin (framing and the child's promises: `protocol.py`):
  {"op": "load", "path", "device", "dtype", "fast", "batch": null | {"max_batch", "max_queue",
   "num_pages", "page_size"}}  (batching loads without the static fast path: the batcher has its
   own forward)
  {"op": "generate", "id", "reference_source", "settings": {...Settings fields}} (a key that is no
  `Settings` field fails the job with an `error` event naming it and the valid ones)
  {"op": "infill", "id", "prefix", "suffix", "pytorch_code", "settings": {...}}
  {"op": "cancel", "id"}        (read by a thread while a job runs; the engine stops at its next check;
                                 batched: only that job's row stops)
Events on stdout:
  {"event": "started", "pid"}
  {"event": "loaded", "path", "seconds", "batched", "capacity", "batch_note", "style_warning"}
  {"event": "load_error", "message"}
  {"event": "progress", "id", "num_tokens", "num_forwards", "seconds"}   (`cudice.model.generation.Progress`)
  {"event": "done", "id", ...every `cudice.model.generation.Generation` field, "batch_rows" when batched}
  {"event": "error", "id", "message", "busy"}   (busy: the batching engine's queue is full; not started)
Closing stdin stops the running job and ends the process within `STOP_GRACE_S`.

`CUDICE_ENGINE_MODULE` (default `cudice.model.engine`) names the module providing
`load_engine(path, device, dtype)`; tests point it at a scripted engine. If that module has a
`sampler_config(settings)` function it builds the sampler config, else
`cudice.model.config.SamplerConfig.from_settings` does. This is the only module of
`cudice.server` that imports the model runtime's heavy parts (and thus torch) — and only in the
child; the server's side reads the torch-free records of `cudice.model.generation`.
Not covered: several jobs at once without batching (one engine, one stream); a stuck `generate`
that never checks `should_stop` is ended by the server killing this process (serial jobs only).
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import queue
import sys
import threading
import time
import traceback
from typing import Any

from cudice.model.threads import apply_torch_threads, cpu_thread_env
from cudice.server.settings import FAST_MODES, Settings
from cudice.server.workers import child
from cudice.server.workers.protocol import EventStream, requests

STOP_GRACE_S = 5.0  # after stdin closes: how long the running job may take to stop before the exit


class ModelChild:
    def __init__(self, stream: EventStream) -> None:
        self.emit = stream.emit
        self.jobs: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.cancelled: set[str] = set()
        self.stop_all = False
        self.engine: Any = None
        self.module: Any = None
        self.batched: Any = None  # model_batched.BatchedJobs when jobs are batched

    def read_stdin(self) -> None:
        for msg in requests(sys.stdin, "model worker"):
            if msg.get("op") == "cancel":
                self.cancelled.add(str(msg.get("id")))
            else:
                self.jobs.put(msg)
        # stdin closed: the server is gone or shutting down. Stop the running job and make sure
        # this process (and what it started: torch.compile's workers) does not outlive the server
        # by more than a few seconds.
        self.stop_all = True
        self.jobs.put(None)
        threading.Timer(STOP_GRACE_S, child.exit_with_family, args=(0,)).start()

    def load(self, msg: dict[str, Any]) -> None:
        t0 = time.perf_counter()
        try:
            self.module = importlib.import_module(
                os.environ.get("CUDICE_ENGINE_MODULE", "cudice.model.engine")
            )
            if "torch" in sys.modules:
                apply_torch_threads()  # the thread defaults main() put in the environment
            batch = msg.get("batch")
            self.engine = self.module.load_engine(
                msg["path"],
                msg.get("device", "auto"),
                msg.get("dtype", "auto"),
                # the batcher runs its own paged forward: no static cache, no compile to warm up
                fast=False if batch else FAST_MODES.get(str(msg.get("fast", "auto"))),
                freeze=True,  # it only generates
            )
            note = self.start_batching(batch) if batch else None
        except Exception as exc:
            traceback.print_exc(file=sys.stderr)
            self.engine = None
            self.emit("load_error", message=f"{type(exc).__name__}: {exc}")
            return
        self.emit(
            "loaded",
            path=msg["path"],
            seconds=time.perf_counter() - t0,
            batched=self.batched is not None,
            capacity=self.batched.capacity if self.batched is not None else None,
            batch_note=note,
            style_warning=str(getattr(self.engine, "style_warning", "") or ""),
        )

    def start_batching(self, options: dict[str, Any]) -> str | None:
        """Serve jobs through a continuous-batching engine; why not (jobs then run one at a time)."""
        from cudice.server.workers.model_batched import BatchedJobs, batch_note

        if self.batched is not None:
            self.batched.close()
            self.batched = None
        note = batch_note(self.engine)
        if note is None:
            self.batched = BatchedJobs(self.engine, options, self.emit, _generation_fields)
        else:
            print(f"model worker: jobs run one at a time: {note}", file=sys.stderr)
        return note

    def submit_batched(self, msg: dict[str, Any]) -> None:
        """A generate/infill job as a row of the batching engine; its events follow from its threads."""
        from cudice.server.workers.model_batched import QueueFull

        job_id = str(msg.get("id"))
        try:
            config = self.sampler_config(msg.get("settings") or {})
            self.batched.submit(job_id, msg, config, lambda: self.stop_all or job_id in self.cancelled)
        except QueueFull as exc:
            self.emit("error", id=job_id, message=str(exc), busy=True)
        except Exception as exc:
            traceback.print_exc(file=sys.stderr)
            self.emit("error", id=job_id, message=f"{type(exc).__name__}: {exc}")

    def sampler_config(self, raw: dict[str, Any]) -> Any:
        names = [f.name for f in dataclasses.fields(Settings)]
        unknown = sorted(str(k) for k in raw if k not in names)
        if unknown:  # the job fails with this message: a key is never dropped unseen
            named = ", ".join(map(repr, unknown))
            raise ValueError(f"Settings has no field {named}; valid fields: {', '.join(names)}.")
        settings = Settings(**raw)
        custom = getattr(self.module, "sampler_config", None)
        if custom is not None:
            return custom(settings)
        from cudice.model.config import SamplerConfig

        return SamplerConfig.from_settings(settings)

    def run_job(self, msg: dict[str, Any]) -> None:
        job_id = str(msg.get("id"))
        if self.engine is None:
            self.emit("error", id=job_id, message="no model is loaded")
            return
        t0 = time.perf_counter()

        def on_progress(*args: Any, **kwargs: Any) -> None:
            info = _progress_fields(args[0] if args else kwargs)
            info.setdefault("seconds", time.perf_counter() - t0)
            self.emit("progress", id=job_id, **info)

        def should_stop() -> bool:
            return self.stop_all or job_id in self.cancelled

        try:
            config = self.sampler_config(msg.get("settings") or {})
            if msg["op"] == "generate":
                gen = self.engine.generate_kernel(
                    msg["reference_source"], config, on_progress=on_progress, should_stop=should_stop
                )
            else:
                gen = self.engine.infill(
                    msg["prefix"],
                    msg["suffix"],
                    msg.get("pytorch_code", ""),
                    config,
                    on_progress=on_progress,
                    should_stop=should_stop,
                )
        except Exception as exc:
            traceback.print_exc(file=sys.stderr)
            self.emit("error", id=job_id, message=f"{type(exc).__name__}: {exc}")
            return
        self.emit("done", id=job_id, **_generation_fields(gen, time.perf_counter() - t0))

    def serve(self) -> None:
        threading.Thread(target=self.read_stdin, daemon=True).start()
        while (msg := self.jobs.get()) is not None:
            op = msg.get("op")
            if op == "load":
                self.load(msg)
            elif op in ("generate", "infill") and self.batched is not None:
                self.submit_batched(msg)
            elif op in ("generate", "infill"):
                self.run_job(msg)
            else:
                self.emit("error", id=str(msg.get("id")), message=f"unknown op {op!r}")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _progress_fields(obj: Any) -> dict[str, Any]:
    """The engine's progress report (dataclass, dict or a token count) -> JSON-able numbers."""
    if _number(obj):
        return {"num_tokens": obj}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        obj = dataclasses.asdict(obj)
    if isinstance(obj, dict):
        return {k: v for k, v in obj.items() if _number(v) and k != "id"}
    return {
        k: getattr(obj, k)
        for k in ("num_tokens", "num_forwards", "seconds")
        if _number(getattr(obj, k, None))
    }


def _generation_fields(gen: Any, seconds: float) -> dict[str, Any]:
    num_tokens = int(getattr(gen, "num_tokens", 0) or 0)
    num_forwards = int(getattr(gen, "num_forwards", 0) or 0)
    tpf: Any = getattr(gen, "tokens_per_forward", None)
    return {
        "text": str(getattr(gen, "text", "") or ""),
        "middle": getattr(gen, "middle", None),
        "num_tokens": num_tokens,
        "num_forwards": num_forwards,
        "tokens_per_forward": float(tpf)
        if _number(tpf)
        else (num_tokens / num_forwards if num_forwards else 0.0),
        "seconds": float(gen.seconds) if _number(getattr(gen, "seconds", None)) else seconds,
        "cancelled": bool(getattr(gen, "cancelled", False)),
        "step_map": [int(step) for step in getattr(gen, "step_map", ()) or ()],
        "finish_reason": str(getattr(gen, "finish_reason", "") or "length"),
        "raw_text": str(getattr(gen, "raw_text", "") or ""),
    }


def main() -> None:
    # Thread defaults before torch loads: one thread per physical core, no spinning.
    ModelChild(child.start(cpu_thread_env())).serve()


if __name__ == "__main__":
    main()
