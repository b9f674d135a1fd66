"""The model worker process: `python -m cudice.server.workers.model_child`. Loads the engine, runs one job at a time.

Protocol (JSON lines). Requests on stdin:
  {"op": "load", "path", "device", "dtype"}
  {"op": "generate", "id", "reference_source", "settings": {...Settings fields}}
  {"op": "infill", "id", "prefix", "suffix", "pytorch_code", "settings": {...}}
  {"op": "cancel", "id"}        (read by a thread while a job runs; the engine stops at its next check)
Events on stdout:
  {"event": "started", "pid"}
  {"event": "loaded", "path", "seconds"} | {"event": "load_error", "message"}
  {"event": "progress", "id", "num_tokens", "num_forwards", "seconds"}
  {"event": "done", "id", "text", "middle", "num_tokens", "num_forwards", "tokens_per_forward", "seconds", "cancelled"}
  {"event": "error", "id", "message"}
Closing stdin ends the process. The real stdout is kept for the protocol only: anything a
library prints goes to stderr (fd 1 is re-pointed there).

`CUDICE_ENGINE_MODULE` (default `cudice.model.engine`) names the module providing
`load_engine(path, device, dtype)`; tests point it at a scripted engine. If that module has a
`sampler_config(settings)` function it builds the sampler config, else
`cudice.model.config.SamplerConfig.from_settings` does. This is the only module of
`cudice.server` that imports the model runtime (and thus torch) — and only in the child.
Not covered: several jobs at once (one engine, one stream); a stuck `generate` that never checks
`should_stop` is ended by the server killing this process.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import queue
import sys
import threading
import time
import traceback
from typing import Any, TextIO

from cudice.server.settings import Settings
from cudice.server.workers.procs import apply_torch_threads, cpu_thread_env, die_with_parent, lower_priority


class Worker:
    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.lock = threading.Lock()
        self.jobs: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.cancelled: set[str] = set()
        self.stop_all = False
        self.engine: Any = None
        self.module: Any = None

    def emit(self, **event: Any) -> None:
        with self.lock:
            self.out.write(json.dumps(event) + "\n")
            self.out.flush()

    def read_stdin(self) -> None:
        for line in sys.stdin:
            try:
                msg = json.loads(line)
            except json.JSONDecodeError:
                print(f"model worker: ignoring non-JSON line {line[:80]!r}", file=sys.stderr)
                continue
            if not isinstance(msg, dict):
                continue
            if msg.get("op") == "cancel":
                self.cancelled.add(str(msg.get("id")))
            else:
                self.jobs.put(msg)
        # stdin closed: the server is gone or shutting down. Stop the running job and make sure
        # this process does not outlive the server by more than a few seconds.
        self.stop_all = True
        self.jobs.put(None)
        threading.Timer(5.0, os._exit, args=(0,)).start()

    def load(self, msg: dict[str, Any]) -> None:
        t0 = time.perf_counter()
        try:
            self.module = importlib.import_module(os.environ.get("CUDICE_ENGINE_MODULE", "cudice.model.engine"))
            if "torch" in sys.modules:
                apply_torch_threads()  # the thread defaults main() put in the environment
            self.engine = self.module.load_engine(msg["path"], msg.get("device", "auto"), msg.get("dtype", "auto"))
        except Exception as exc:
            traceback.print_exc(file=sys.stderr)
            self.engine = None
            self.emit(event="load_error", message=f"{type(exc).__name__}: {exc}")
            return
        self.emit(event="loaded", path=msg["path"], seconds=time.perf_counter() - t0)

    def sampler_config(self, raw: dict[str, Any]) -> Any:
        names = {f.name for f in dataclasses.fields(Settings)}
        settings = Settings(**{k: v for k, v in raw.items() if k in names})
        custom = getattr(self.module, "sampler_config", None)
        if custom is not None:
            return custom(settings)
        from cudice.model.config import SamplerConfig

        return SamplerConfig.from_settings(settings)

    def run_job(self, msg: dict[str, Any]) -> None:
        job_id = str(msg.get("id"))
        if self.engine is None:
            self.emit(event="error", id=job_id, message="no model is loaded")
            return
        t0 = time.perf_counter()

        def on_progress(*args: Any, **kwargs: Any) -> None:
            info = _progress_fields(args[0] if args else kwargs)
            info.setdefault("seconds", time.perf_counter() - t0)
            self.emit(event="progress", id=job_id, **info)

        def should_stop() -> bool:
            return self.stop_all or job_id in self.cancelled

        try:
            config = self.sampler_config(msg.get("settings") or {})
            if msg["op"] == "generate":
                gen = self.engine.generate_kernel(msg["reference_source"], config,
                                                  on_progress=on_progress, should_stop=should_stop)
            else:
                gen = self.engine.infill(msg["prefix"], msg["suffix"], msg.get("pytorch_code", ""), config,
                                         on_progress=on_progress, should_stop=should_stop)
        except Exception as exc:
            traceback.print_exc(file=sys.stderr)
            self.emit(event="error", id=job_id, message=f"{type(exc).__name__}: {exc}")
            return
        self.emit(event="done", id=job_id, **_generation_fields(gen, time.perf_counter() - t0))

    def serve(self) -> None:
        threading.Thread(target=self.read_stdin, daemon=True).start()
        self.emit(event="started", pid=os.getpid())
        while (msg := self.jobs.get()) is not None:
            op = msg.get("op")
            if op == "load":
                self.load(msg)
            elif op in ("generate", "infill"):
                self.run_job(msg)
            else:
                self.emit(event="error", id=str(msg.get("id")), message=f"unknown op {op!r}")


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
    return {k: getattr(obj, k) for k in ("num_tokens", "num_forwards", "seconds") if _number(getattr(obj, k, None))}


def _generation_fields(gen: Any, seconds: float) -> dict[str, Any]:
    num_tokens = int(getattr(gen, "num_tokens", 0) or 0)
    num_forwards = int(getattr(gen, "num_forwards", 0) or 0)
    tpf: Any = getattr(gen, "tokens_per_forward", None)
    return {
        "text": str(getattr(gen, "text", "") or ""),
        "middle": getattr(gen, "middle", None),
        "num_tokens": num_tokens,
        "num_forwards": num_forwards,
        "tokens_per_forward": float(tpf) if _number(tpf) else (num_tokens / num_forwards if num_forwards else 0.0),
        "seconds": float(gen.seconds) if _number(getattr(gen, "seconds", None)) else seconds,
        "cancelled": bool(getattr(gen, "cancelled", False)),
    }


def main() -> None:
    lower_priority()
    os.environ.update(cpu_thread_env())  # before torch loads: one thread per physical core, no spinning
    die_with_parent()  # a killed server takes this worker (and its children) down within a second
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # stray prints from libraries must not corrupt the protocol
    sys.stdout = sys.stderr
    Worker(out).serve()


if __name__ == "__main__":
    main()
