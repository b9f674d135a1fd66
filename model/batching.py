"""Continuous batching for block-diffusion decoding over a paged KV cache.

Role: serve many generation requests with one model, each decoded exactly as the batch-1 sampler
(`cudice.model.sampler.BlockDiffusionSampler`) would decode it, while requests arrive and leave
at any time. `ContinuousBatcher.submit` (any thread) queues a request (prompt ids, a
`SamplerConfig`, an optional per-block callback and stop poll) and returns a `Request` handle
(`cancel()`, `wait()`, `result()`); a worker thread (`start()`, or `step()` driven by the caller)
runs iterations:

1. drop queued requests that were cancelled; admit queued requests (FIFO) while the batch has
   room (`max_batch`) and the paged cache can reserve each one's largest length (whole prompt
   blocks + its generated blocks);
2. finish rows whose request was cancelled or whose `should_stop()` is true (polled once per
   iteration): they keep their committed blocks, finish_reason "cancelled", and their pages return;
3. one prefill forward for the rows admitted in this iteration (their whole prompt blocks,
   block-causal), then they join the decode batch;
4. one decode forward for every live row, each at its own length and in its own phase: a row
   denoising its block (logits, K/V overwritten later) or committing it (K/V kept). So a new
   request joins at its own block boundary without waiting for the others' blocks, and a row whose
   block is done leaves or commits without holding anyone back.

Sampling rules are the sampler's own functions: `sample_tokens`, the `STRATEGIES` registry,
`quota_schedule`, and the sampler's block bookkeeping and stop rules (`close_block`: EOS, stop
strings, max_new_tokens, step map); each row's quota, step count and random generator are its
own. Hence the contract: a request's tokens and step map equal its batch-1 result from
`BlockDiffusionSampler.generate` at temperature 0 (float32; the tests check it for mixed prompt
lengths and arrival times), and with `temperature > 0` and a seed, the same draws as batch 1
(each seeded row samples with its own generator).

Threads: `on_block(tokens so far, forwards so far)` and `should_stop()` run on the worker thread,
between forwards; they may submit or cancel requests but must not call `close()` (it waits for
that thread). A callback or `should_stop` that raises, or a forward that raises (e.g. out of
memory), fails the requests concerned (`result()` raises the error, their pages return); the
others go on.

Differences from the sampler that do not change tokens: the last block is not committed (its K/V
would never be read); `fuse_commit` is accepted but each commit is a row-step of its own (it shares
the forward with other rows' denoise steps); `num_forwards` counts the forwards a request took part
in. The queue is bounded (`max_queue`): `submit` raises `QueueFull` beyond it, and `ValueError` for
a request that can never fit (too long for the model or for the whole page pool).

Decode paths: a decode forward whose rows all run whole blocks of one block length (every
iteration where the live requests share a block length) goes through `PagedRunner.decode`, the
fast decode (Triton attention reading the pages in place, static buffers per batch class, on CUDA
torch.compile'd layers and one CUDA graph per batch class); any other decode forward (rows of
different block lengths) and every prefill go through the eager ragged `PagedRunner.forward`.
`fast_decode` (default: on CUDA) switches the fast decode on or off; `fast_steps` and
`eager_steps` count the decode forwards each path ran, `decode_path` says which ran and how.

Not covered: preemption (admission reserves each request's largest length, so a running row never
waits for pages), prefix sharing between requests, chunked prefill of long prompts, a fast path
for prefills and for batches of mixed block lengths (the eager ragged forward serves them). The
team server's model worker serves its requests through this engine
(server/workers/model_batched.py).
"""

from __future__ import annotations

import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from cudice.model.config import SamplerConfig
from cudice.model.paged_forward import PagedRunner, Segment
from cudice.model.sampler import BlockDiffusionSampler, RowResult, RowState
from cudice.model.sampling import sample_tokens
from cudice.model.strategies import STRATEGIES

BlockProgress = Callable[[Sequence[int], int], None]  # (generated tokens so far, forwards so far)


class QueueFull(RuntimeError):
    """`submit` found `max_queue` requests already waiting; retry later or raise `max_queue`."""


@dataclass(frozen=True, slots=True)
class RequestResult:
    """A finished request: its row (as the sampler reports rows) and its timings."""

    row: RowResult
    num_forwards: int  # forwards this request took part in (prefill, denoise, commit)
    seconds: float  # submit -> finish
    queued_seconds: float  # submit -> admission (0 for a request cancelled in the queue)


class Request:
    """Handle of a submitted request. `cancel()` is safe from any thread."""

    def __init__(
        self,
        rid: int,
        prompt: Sequence[int],
        config: SamplerConfig,
        block_length: int,
        on_block: BlockProgress | None,
        should_stop: Callable[[], bool] | None,
    ) -> None:
        self.id = rid
        self.prompt = tuple(prompt)
        self.config = config
        self.block_length = block_length
        self.on_block = on_block
        self.should_stop = should_stop
        whole = len(self.prompt) // block_length * block_length
        blocks = -(-(len(self.prompt) - whole + config.max_new_tokens) // block_length)
        self.max_tokens = whole + blocks * block_length  # slots the request can ever need
        self.submitted = time.perf_counter()
        self.admitted: float | None = None
        self.admitted_iteration: int | None = None  # the engine iteration that admitted it
        self.finished_iteration: int | None = None
        self._cancel = threading.Event()
        self._done = threading.Event()
        self._result: RequestResult | None = None
        self._error: BaseException | None = None

    def cancel(self) -> None:
        """Ask the engine to stop this request at its next iteration (committed blocks are kept)."""
        self._cancel.set()

    @property
    def stopping(self) -> bool:
        """Cancelled, or `should_stop()` says so (a `should_stop` that raises fails the request)."""
        if self._cancel.is_set():
            return True
        try:
            return self.should_stop is not None and bool(self.should_stop())
        except Exception as exc:
            self._error = exc
            self._cancel.set()
            return True

    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)

    def result(self, timeout: float | None = None) -> RequestResult:
        """The result; raises TimeoutError if not finished within `timeout` seconds, or the error that
        failed the request (a forward or its callback raised)."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"request {self.id} did not finish within {timeout} s")
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result


@dataclass
class _Live:
    """A request in the batch: the sampler's row record plus this engine's per-row block state."""

    req: Request
    row: RowState
    length: int = 0  # committed slots: the current block starts here
    phase: str = "open"  # "prefill" | "open" | "denoise" | "commit"
    x: torch.Tensor = field(default_factory=lambda: torch.empty(0, dtype=torch.long))  # (bl,)
    is_masked: torch.Tensor = field(default_factory=lambda: torch.empty(0, dtype=torch.bool))
    quotas: list[int] = field(default_factory=list)  # reveal quota of each denoise step (S,)
    revealed_at: torch.Tensor = field(default_factory=lambda: torch.empty(0, dtype=torch.long))
    step: int = 0  # denoise steps of the current block
    forwards: int = 0
    generator: torch.Generator | None = None


class ContinuousBatcher:
    """Continuous batching engine over a `PagedRunner`; see the module docstring."""

    def __init__(
        self,
        model: Any,
        sampler: BlockDiffusionSampler,
        block_size: int | None,
        num_pages: int = 1024,
        page_size: int = 16,
        max_batch: int = 32,
        max_queue: int = 64,
        fast_decode: bool | None = None,
        compile: bool | None = None,
        use_graphs: bool = True,
        compile_mode: str | None = None,
        attention: str = "auto",
    ) -> None:
        """model: a Qwen3ForCausalLM (HF modules); sampler: supplies the mask id, stop ids, decode and the
        stop rules; block_size: the checkpoint's block length (a request's config may override it).

        fast_decode: run eligible decode forwards through `PagedRunner.decode` (None: on CUDA);
        compile: its layer math through torch.compile (None: with the fast decode on CUDA);
        use_graphs: capture it as CUDA graphs per batch class (CUDA only); attention: its attention,
        "triton", "sdpa" or "auto" (`PagedRunner`)."""
        if max_batch < 1 or max_queue < 0:
            raise ValueError(f"max_batch={max_batch} must be >= 1 and max_queue={max_queue} >= 0")
        on_cuda = next(model.parameters()).device.type == "cuda"
        self.fast_decode = on_cuda if fast_decode is None else fast_decode
        self.runner = PagedRunner(
            model,
            max_batch=max_batch,
            compile=(self.fast_decode and on_cuda) if compile is None else compile,
            compile_mode=compile_mode,
            use_graphs=use_graphs,
            attention=attention,
        )
        self.cache = self.runner.new_cache(num_pages, page_size)
        self.sampler = sampler
        self.block_size = block_size
        self.max_batch, self.max_queue = max_batch, max_queue
        self.device = self.runner.device
        self.num_forwards = 0
        self.warmup_seconds = 0.0  # `warm_up`'s time (compilation and graph capture)
        self.warmup_variants = 0  # decode variants (batch class, logits?) `warm_up` ran
        self.fast_steps = 0  # decode forwards through PagedRunner.decode
        self.eager_steps = 0  # decode forwards through the eager PagedRunner.forward
        self.iterations = 0
        self.peak_rows = 0
        self.peak_pages = 0
        self._queue: deque[Request] = deque()
        self._live: list[_Live] = []
        self._next_id = 0
        self._cond = threading.Condition()
        self._step_lock = threading.Lock()
        self._closed = False
        self._thread: threading.Thread | None = None

    @classmethod
    def from_engine(cls, engine: Any, **options: Any) -> ContinuousBatcher:
        """Over a loaded `cudice.model.engine.Engine` (its model, sampler and block size)."""
        return cls(engine.loaded.model, engine.sampler, engine.loaded.block_size, **options)

    # --- submission (any thread) ---------------------------------------------------------------
    def submit(
        self,
        prompt: Sequence[int],
        config: SamplerConfig,
        on_block: BlockProgress | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> Request:
        """Queue a request; raises QueueFull when `max_queue` wait, ValueError if it can never run."""
        if len(prompt) == 0:
            raise ValueError("every prompt needs at least one token (got an empty prompt)")
        block = config.block_length or self.block_size
        if block is None:
            raise ValueError(
                "no block length: the checkpoint has no block_size and the config sets no block_length; "
                "set SamplerConfig.block_length (DICE checkpoints use 4)"
            )
        with self._cond:
            if self._closed:
                raise RuntimeError("the batching engine is closed; build a new one to submit requests")
            req = Request(self._next_id, prompt, config, block, on_block, should_stop)
            limit = self.runner.max_positions
            if limit and req.max_tokens > limit:
                raise ValueError(
                    f"the prompt ({len(prompt)} tokens) plus max_new_tokens ({config.max_new_tokens}) needs "
                    f"{req.max_tokens} positions, more than the model's {limit}; lower max_new_tokens"
                )
            if self.cache.pages_for(req.max_tokens) > self.cache.num_pages:
                raise ValueError(
                    f"the request needs up to {req.max_tokens} tokens of KV cache "
                    f"({self.cache.pages_for(req.max_tokens)} pages of {self.cache.page_size}), "
                    f"more than the whole pool ({self.cache.num_pages} pages); lower max_new_tokens "
                    "or build the engine with more num_pages"
                )
            if len(self._queue) >= self.max_queue:
                raise QueueFull(
                    f"the batching engine's queue is full ({len(self._queue)} requests waiting, "
                    f"max_queue={self.max_queue}); retry when a request finishes or raise max_queue"
                )
            self._next_id += 1
            self._queue.append(req)
            self._cond.notify_all()
        return req

    @property
    def queued(self) -> int:
        with self._cond:
            return len(self._queue)

    @property
    def live(self) -> int:
        return len(self._live)

    @property
    def decode_path(self) -> str:
        """Which decode path ran so far, e.g. 'paged decode: triton attention, compiled, CUDA graphs
        (120 steps), eager ragged forward (3 steps)'."""
        fast = self.runner.describe() if self.fast_decode else "fast decode off"
        return f"{fast} ({self.fast_steps} steps), eager ragged forward ({self.eager_steps} steps)"

    def warm_up(self) -> ContinuousBatcher:
        """Compile and capture the fast decode of every batch class for the checkpoint's block length
        before serving (`PagedRunner.warm_up`; a no-op with the fast decode off). A failure here is
        reported on stderr and costs only speed: the first steps then compile and capture instead."""
        if not self.fast_decode or self.block_size is None:
            return self
        start = time.perf_counter()
        try:
            with self._step_lock:
                variants = self.runner.warm_up(self.cache, self.block_size)
        except Exception as exc:  # a failing warm-up must not take the engine down
            print(
                f"cudice.model: the batching engine's decode warm-up failed ({type(exc).__name__}: "
                f"{str(exc)[:300]}); requests compile and capture on their first steps instead",
                file=sys.stderr,
                flush=True,
            )
            return self
        self.warmup_seconds = time.perf_counter() - start
        self.warmup_variants = variants
        return self

    # --- the worker ----------------------------------------------------------------------------
    def start(self) -> ContinuousBatcher:
        """Run iterations on a daemon thread until `close()`."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="cudice-batching", daemon=True)
            self._thread.start()
        return self

    def close(self, timeout: float | None = 30.0) -> None:
        """Stop the worker; requests still queued or running finish as cancelled (pages freed)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
        with self._step_lock:
            with self._cond:
                queued = list(self._queue)
                self._queue.clear()
            for req in queued:
                self._resolve_queued_cancel(req)
            for lv in list(self._live):
                self._finish(lv, "cancelled")

    def __enter__(self) -> ContinuousBatcher:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._closed and not self._queue and not self._live:
                    self._cond.wait()
                if self._closed:
                    return
            try:
                self.step()
            except Exception as exc:  # an engine bug must not leave waiters hanging: fail the batch
                with self._step_lock:
                    for lv in list(self._live):
                        lv.req._error = exc
                        self._finish(lv, None)

    def run_until_idle(self) -> None:
        """Drive iterations on the calling thread until nothing is queued or running (no worker thread)."""
        while True:
            with self._cond:
                if not self._queue and not self._live:
                    return
            self.step()

    def step(self) -> None:
        """One iteration (module docstring, 1-4). Call from one thread at a time; `start()` does."""
        with self._step_lock:
            self.iterations += 1
            admitted = self._admit()
            for lv in list(self._live):
                if lv.req.stopping:
                    self._finish(lv, "cancelled")
            fresh = [lv for lv in admitted if lv.phase == "prefill" and lv in self._live]
            if fresh:
                self._run(fresh, prefill=True)
            if self._live:
                self._run(list(self._live), prefill=False)

    # --- iteration parts -----------------------------------------------------------------------
    def _admit(self) -> list[_Live]:
        with self._cond:  # requests cancelled while queued leave at once, wherever they wait
            dropped = [r for r in self._queue if r.stopping]
            for r in dropped:
                self._queue.remove(r)
        for r in dropped:
            self._resolve_queued_cancel(r)
        admitted: list[_Live] = []
        while True:
            with self._cond:
                if not self._queue or len(self._live) >= self.max_batch:
                    break
                req = self._queue[0]
                if not req.stopping and not self.cache.can_add(req.max_tokens):
                    break  # FIFO: the head waits for pages; later requests wait behind it
                self._queue.popleft()
            if req.stopping:
                self._resolve_queued_cancel(req)
                continue
            self.cache.add(req.id, req.max_tokens)
            bl = req.block_length
            whole = len(req.prompt) // bl * bl
            lv = _Live(req, RowState(index=0, pad=0, tail=list(req.prompt[whole:])))
            lv.phase = "prefill" if whole else "open"
            if req.config.temperature > 0 and req.config.seed is not None:
                lv.generator = torch.Generator(device=self.device).manual_seed(req.config.seed)
            req.admitted, req.admitted_iteration = time.perf_counter(), self.iterations
            self._live.append(lv)
            admitted.append(lv)
        self.peak_rows = max(self.peak_rows, len(self._live))
        return admitted

    def _run(self, rows: list[_Live], prefill: bool) -> None:
        """One forward over `rows` and what follows it; a failing forward fails exactly these rows."""
        segments = []
        if not prefill:
            self._open_blocks([lv for lv in rows if lv.phase == "open"])
        for lv in rows:
            bl = lv.req.block_length
            if prefill:
                whole = len(lv.req.prompt) // bl * bl
                ids = torch.tensor(lv.req.prompt[:whole], dtype=torch.long)
                segments.append(Segment(lv.req.id, ids, 0, bl, logits=False))
                continue
            segments.append(Segment(lv.req.id, lv.x, lv.length, bl, logits=lv.phase == "denoise"))
        try:
            if prefill:
                logits = self.runner.forward(self.cache, segments)
            elif self.fast_decode and self.runner.decode_eligible(self.cache, segments):
                logits = self.runner.decode(self.cache, segments)
                self.fast_steps += 1
            else:
                logits = self.runner.forward(self.cache, segments)
                self.eager_steps += 1
        except Exception as exc:  # e.g. out of memory: these rows fail, the engine goes on
            for lv in rows:
                lv.req._error = exc
                self._finish(lv, None)
            return
        self.num_forwards += 1
        self.peak_pages = max(self.peak_pages, self.cache.pages_in_use)
        for lv in rows:
            lv.forwards += 1
        if prefill:
            for lv in rows:
                lv.length, lv.phase = len(lv.req.prompt) // lv.req.block_length * lv.req.block_length, "open"
            return
        denoise = [(lv, out) for lv, out in zip(rows, logits, strict=True) if lv.phase == "denoise"]
        for lv in rows:
            if lv.phase == "commit":
                lv.length += lv.req.block_length
                lv.phase = "open"
        self._denoise(denoise)

    def _open_blocks(self, rows: list[_Live]) -> None:
        """Each row's next block: the prompt tail (first block only), then masks; its reveal quotas
        (`quota_schedule`'s, computed on the host). Rows of one block length share one host -> device
        copy and one kernel per tensor; each row keeps views of them."""
        mask_id = self.sampler.mask_id
        by_length: dict[int, list[_Live]] = {}
        for lv in rows:
            by_length.setdefault(lv.req.block_length, []).append(lv)
        for bl, members in by_length.items():
            host = [(lv.row.tail + [mask_id] * bl)[:bl] for lv in members]
            x = torch.tensor(host, dtype=torch.long).to(self.device)  # (g, bl)
            is_masked = x == mask_id
            revealed_at = torch.full((len(members), bl), -1, dtype=torch.long, device=self.device)
            for i, lv in enumerate(members):
                masked, steps = host[i].count(mask_id), lv.req.config.denoising_steps
                lv.x, lv.is_masked, lv.revealed_at = x[i], is_masked[i], revealed_at[i]
                lv.quotas = [masked // steps + (s < masked % steps) for s in range(steps)]
                lv.step = 0
                lv.phase = "denoise"

    def _denoise(self, rows: list[tuple[_Live, torch.Tensor | None]]) -> None:
        """Sample and reveal for every denoising row; rows with equal sampling settings (and no seeded
        generator of their own) share one `sample_tokens` and one strategy call."""
        groups: dict[tuple[Any, ...], list[tuple[_Live, torch.Tensor]]] = {}
        closing: list[_Live] = []
        for lv, out in rows:
            assert out is not None
            c = lv.req.config
            own = lv.req.id if lv.generator is not None else None
            key = (lv.req.block_length, c.temperature, c.top_k, c.top_p, c.strategy, c.threshold, own)
            groups.setdefault(key, []).append((lv, out))
        for members in groups.values():
            lvs = [lv for lv, _ in members]
            cfg = lvs[0].req.config
            stacked = torch.stack([out for _, out in members])  # (g, bl, V)
            tokens, confidence = sample_tokens(
                stacked, cfg.temperature, cfg.top_k, cfg.top_p, lvs[0].generator
            )  # (g, bl), (g, bl)
            is_masked = torch.stack([lv.is_masked for lv in lvs])
            host = [  # (this step's quota, the step index a reveal records) per row
                (max(1, lv.quotas[min(lv.step, len(lv.quotas) - 1)]), lv.row.steps_done + lv.step)
                for lv in lvs
            ]
            quota, at = torch.tensor(host, dtype=torch.long).to(self.device).unbind(1)  # (g,) each
            reveal = STRATEGIES[cfg.strategy](confidence, is_masked, quota, cfg.threshold)  # (g, bl)
            x = torch.where(reveal, tokens, torch.stack([lv.x for lv in lvs]))
            revealed_at = torch.where(reveal, at[:, None], torch.stack([lv.revealed_at for lv in lvs]))
            still = is_masked & ~reveal
            left = still.any(dim=1).tolist()  # sync point
            for i, lv in enumerate(lvs):
                lv.x, lv.revealed_at, lv.is_masked = x[i], revealed_at[i], still[i]
                lv.step += 1
                if not left[i]:
                    closing.append(lv)
        self._close_blocks(closing)

    def _close_blocks(self, rows: list[_Live]) -> None:
        """Append each row's block through the sampler's bookkeeping and stop rules (one `close_block`,
        one device -> host read, per config object), then report each row in order; leave or commit."""
        by_config: dict[int, list[_Live]] = {}
        for lv in rows:
            by_config.setdefault(id(lv.req.config), []).append(lv)
        for members in by_config.values():  # one config: one block length, so the blocks stack
            x = torch.stack([lv.x for lv in members])
            revealed_at = torch.stack([lv.revealed_at for lv in members])
            steps = torch.tensor([lv.step for lv in members])
            self.sampler.close_block([lv.row for lv in members], x, revealed_at, steps, members[0].req.config)
        for lv in rows:
            if lv.req.on_block is not None:
                try:
                    lv.req.on_block(list(lv.row.tokens), lv.forwards)
                except Exception as exc:  # a broken callback fails its own request only
                    lv.req._error = exc
                    self._finish(lv, None)
                    continue
            if lv.row.finish is not None:
                self._finish(lv, None)
            else:
                lv.phase = "commit"

    def _finish(self, lv: _Live, reason: str | None) -> None:
        """Leave the batch, free the pages, resolve the handle (`reason` overrides the row's own)."""
        if lv in self._live:
            self._live.remove(lv)
        self.cache.free(lv.req.id)
        r = lv.row
        if reason is not None:
            r.finish = reason
        req = lv.req
        req.finished_iteration = self.iterations
        if req._error is None:
            now = time.perf_counter()
            row = RowResult(
                tuple(r.tokens),
                tuple(r.step_map),
                r.text or self.sampler.decode(r.tokens),
                r.finish or "length",
                tuple(r.block_tokens),
                tuple(r.block_step_map),
            )
            admitted = req.admitted if req.admitted is not None else req.submitted
            req._result = RequestResult(row, lv.forwards, now - req.submitted, admitted - req.submitted)
        req._done.set()

    def _resolve_queued_cancel(self, req: Request) -> None:
        req.finished_iteration = self.iterations
        if req._error is None:
            row = RowResult((), (), "", "cancelled")
            req._result = RequestResult(row, 0, time.perf_counter() - req.submitted, 0.0)
        req._done.set()
