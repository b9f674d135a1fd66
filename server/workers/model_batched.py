"""The model worker's batched jobs (child side, team mode): generate and infill as rows of one engine.

Role: in a worker loaded with `"batch"` options (server/team.py's shared worker), `model_child.py`
hands every `generate` and `infill` job to `BatchedJobs.submit`, which builds the same prompt as
`cudice.model.engine.Engine.generate_kernel` / `.infill` (the KernelBench one-shot prompt; the
prefix-forced infill prompt and its suffix stop string), submits its ids to one
`cudice.model.batching.ContinuousBatcher` and returns at once; the answer is post-processed as the
engine does (first fenced code block; the spliced middle) and reported from a waiter thread.

Contract: a job's tokens equal what the serial engine gives alone (the batcher's contract: greedy,
float32; `temperature > 0` with a seed draws as batch 1); `progress` comes after every block
(`num_tokens`, `num_forwards`, `seconds`) and `done` carries every `Generation` field plus
`batch_rows`, the most rows its blocks were decoded beside (itself included). `should_stop` (the
job's cancel, or the server leaving) is polled once per engine iteration: that row leaves with what
it committed and the others go on. `submit` raises `QueueFull` (the engine's queue bound: refuse,
never wait), or ValueError / GenerationError for a job that can never run (too long for the model
or the KV pool; no block length).

Decode path: the batcher's own (`cudice.model.batching`): on CUDA its fast paged decode
(torch.compile'd layers, Triton paged attention, a CUDA graph per batch class), compiled and
captured by `warm_up` while the worker loads; prefills and batches of mixed block lengths on its
eager ragged forward. The worker loads without the static fast path (the batcher does not use it).

Not covered: an engine without `loaded.model` and a mask token (`batch_note` says why; the worker
then runs jobs one at a time); growing the KV pool after the load.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from cudice.model.batching import ContinuousBatcher, QueueFull, Request
from cudice.model.config import SamplerConfig
from cudice.model.generation import Generation
from cudice.model.prompts import extract_first_code_block, infill_stop_marker, splice_middle

__all__ = ["BatchedJobs", "QueueFull", "batch_note"]

Report = Callable[..., None]  # (event name, **fields): the child's `emit`
Fields = Callable[[Generation, float], dict[str, Any]]  # a Generation -> the `done` event's fields


def batch_note(engine: Any) -> str | None:
    """Why `engine` cannot be batched, or None when it can."""
    loaded = getattr(engine, "loaded", None)
    if loaded is None or getattr(loaded, "model", None) is None or not hasattr(engine, "encode"):
        return f"{type(engine).__name__} is not a cudice.model.engine.Engine (no loaded model to batch)"
    try:
        engine.sampler  # noqa: B018  # raises when the checkpoint has no mask token
    except Exception as exc:
        return str(exc)
    return None


def default_pages(engine: Any) -> int:
    """KV pages of 16 slots when the server's environment sets none: 4096 (65,536 token slots, 32
    generations of 2,048 tokens; 7.5 GB at DICE-1.7B in bf16) where the model runs on a GPU, 2048
    on a CPU (fp32 caches of a small model; every page is allocated when the worker loads)."""
    device = getattr(next(engine.loaded.model.parameters()), "device", None)
    return 4096 if getattr(device, "type", "cpu") == "cuda" else 2048


class BatchedJobs:
    """Generate/infill jobs of one loaded engine through a running `ContinuousBatcher`."""

    def __init__(self, engine: Any, options: dict[str, Any], emit: Report, fields: Fields) -> None:
        self.engine = engine
        self.emit = emit
        self.fields = fields
        self.batcher = (
            ContinuousBatcher.from_engine(
                engine,
                max_batch=int(options.get("max_batch", 32)),
                max_queue=int(options.get("max_queue", 64)),
                num_pages=int(options.get("num_pages") or default_pages(engine)),
                page_size=int(options.get("page_size", 16)),
            )
            .warm_up()
            .start()
        )

    @property
    def capacity(self) -> int:
        return self.batcher.max_batch + self.batcher.max_queue

    def submit(
        self, job_id: str, msg: dict[str, Any], config: SamplerConfig, should_stop: Callable[[], bool]
    ) -> None:
        """Queue the job (module docstring); its events follow from other threads."""
        if msg["op"] == "generate":
            ids = self.engine.encode(self.engine.kernel_prompt(msg["reference_source"]))
        else:  # the forced opening tokenised apart, as Engine.infill does
            ids = self.engine.infill_ids(msg["prefix"], msg["suffix"], msg.get("pytorch_code", ""))
            config = config.replace(stop_strings=(*config.stop_strings, infill_stop_marker(msg["suffix"])))
        self.engine.block_length(config)  # GenerationError (what to set) when there is none
        t0 = time.perf_counter()
        rows = [0]

        def on_block(tokens: Any, num_forwards: int) -> None:
            rows[0] = max(rows[0], self.batcher.live)
            self.emit(
                "progress",
                id=job_id,
                num_tokens=len(tokens),
                num_forwards=num_forwards,
                seconds=time.perf_counter() - t0,
            )

        try:
            request = self.batcher.submit(ids, config, on_block=on_block, should_stop=should_stop)
        except ValueError as exc:
            raise ValueError(
                f"{exc} (the shared server's pool: CUDICE_TEAM_KV_PAGES x CUDICE_TEAM_KV_PAGE_SIZE)"
            ) from exc
        threading.Thread(
            target=self._report, args=(job_id, msg, request, rows), name=f"job-{job_id}", daemon=True
        ).start()

    def _report(self, job_id: str, msg: dict[str, Any], request: Request, rows: list[int]) -> None:
        try:
            result = request.result()
        except Exception as exc:  # a forward (e.g. out of memory) or a callback failed this row only
            self.emit("error", id=job_id, message=f"{type(exc).__name__}: {exc}")
            return
        row = result.row
        if msg["op"] == "generate":
            code = extract_first_code_block(row.text)
            text, middle = (code if code is not None else row.text), None
        else:
            middle = splice_middle(row.text, msg["suffix"])
            text = msg["prefix"] + middle + msg["suffix"]
        n = len(row.tokens)
        gen = Generation(
            text=text,
            middle=middle,
            num_tokens=n,
            num_forwards=result.num_forwards,
            tokens_per_forward=n / result.num_forwards if result.num_forwards else 0.0,
            seconds=result.seconds,
            cancelled=row.finish_reason == "cancelled",
            step_map=row.step_map,
            finish_reason=row.finish_reason,
            raw_text=row.text,
        )
        self.emit("done", id=job_id, batch_rows=max(rows[0], 1), **self.fields(gen, result.seconds))

    def close(self) -> None:
        self.batcher.close(timeout=5.0)
