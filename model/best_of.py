"""Best-of-N generation with the verifier in the loop (`cudice generate --samples N`).

Role: decode N answers to one request in one batch, verify each distinct one with the public
verifier (`cudice.verifier.api.verify`), and pick the best, as code assistants that own a checker
do. The CLI is a thin caller; the language server can call `best_of` (or its parts) the same way.

Contract:
- `sample_configs(config, n)`: row 0 is greedy (temperature 0: exactly the `--samples 1` answer),
  rows 1.. are sampled at `config.temperature`, or `DEFAULT_TEMPERATURE` (0.5) when it is 0, each
  with its own seed (`config.seed + i`; no seed: fresh randomness). Why row 0 stays greedy: the
  greedy answer is the model's single best guess, and keeping it means best-of-N never ranks
  below `--samples 1` (ties go to the earliest sample). Why 0.5: with the bundled demo model on
  `examples/relu.py` and `softmax.py` (CPU, compile-only verdicts, 5-8 seeded rows per
  temperature and file: a small sample), 0.3 gave nothing new (8 of 10 rows repeated the greedy
  answer, 2 failed to compile); 0.5 and 0.7-0.8 gave as many rows that compiled and differ from
  the greedy answer (7 of 16 each; 2 of 8 relu rows with the right op, `fmaxf(v, 0.0f)` where
  greedy writes `fabsf`, in both), but at 0.7-0.8 more softmax rows were broken (5 of 8 not valid
  Python, against 3 of 8) and more failed builds, each of which costs a compile; 1.0 gave
  nothing usable (0 of 6 compiled). A larger model may want another value: pass `--temperature`.
- `generate_samples(engine, ...)`: the N rows decode in ONE batch through
  `cudice.model.batching.ContinuousBatcher` (which takes a `SamplerConfig` per row, so row 0 can
  stay greedy beside sampled rows; its contract: a greedy row equals the batch-1 sampler's answer
  and a seeded row draws as it would alone, so sample i is the same for any N > i). Prompts and
  post-processing are the engine's own (`kernel_prompt` + first code block; `infill_prompt` +
  the suffix's stop marker + `splice_middle`), so each `Generation` is what `Engine.generate_kernel`
  / `Engine.infill` would return for that row's config.
- `distinct(texts)`: for each text, None or the index of the first earlier identical text; only
  first occurrences are verified (a duplicate shares its original's verdict).
- `verify_samples(texts, path, reference)`: `verify()` of each text as the unsaved source of
  `path` (the verifier reads nothing there but the reference), at most `workers` at a time
  (default `cudice.verifier.pool.default_compile_workers()`: one build per two cores, the
  verifier pool's own knob). The builds run in the verifier's child processes (compilers, the
  reference probe; on a GPU the sandboxed judge), which die with the thread that started them;
  an interrupt (Ctrl-C) sets the cancel token every verification polls, so no build outlives the
  call. This process only parses and waits: nothing of the model's state (torch threads, CUDA
  context) is touched by the verifier.
- `rank_key(result, index)` / `choose(results)`: by verdict tier (correct > compiled > checked >
  everything else; `checked`, a compile-only build whose headers were unavailable, decided no
  error), then by speedup (a missing or suspicious speedup ranks below any measured one), then
  the earliest sample.
- `best_of(...)`: the three steps; returns a `BestOf` (every sample, its verdict or the sample it
  duplicates, and the chosen index).

Not covered: a GPU-side fast path for the batch (the continuous batcher is eager: no CUDA graphs
or torch.compile; on a GPU N rows cost about what one eager generation costs, not N), per-row
cancellation, early stop once a sample is `correct` (every distinct sample is verified), and
spreading verifications over a `VerifyPool` / Ray (each `verify()` starts its own children).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudice.model.config import SamplerConfig
from cudice.model.generation import Generation, Progress
from cudice.model.prompts import extract_first_code_block, infill_stop_marker, splice_middle
from cudice.verifier.api import verify
from cudice.verifier.config import VerifyConfig
from cudice.verifier.source.result import Severity, Verdict, VerifyResult

DEFAULT_TEMPERATURE = 0.5  # sampled rows' temperature when none is given (module docstring)
PAGE_SIZE = 16  # the batcher's KV page size

# verdict tiers: higher is better; everything not listed is 0
_TIERS = {Verdict.CORRECT: 3, Verdict.COMPILED: 2, Verdict.CHECKED: 1}
PASSING = frozenset({Verdict.CORRECT, Verdict.COMPILED})


@dataclass(frozen=True, slots=True)
class Sample:
    """One row of the batch: its answer, and its verdict or the earlier sample it repeats."""

    index: int  # row in the batch; 0 is greedy
    temperature: float
    generation: Generation
    duplicate_of: int | None = None  # index of the first identical sample (then `result` is its)
    result: VerifyResult | None = None

    @property
    def verdict(self) -> str:
        return self.result.verdict.value if self.result is not None else "not verified"

    @property
    def speedup(self) -> float | None:
        return self.result.speedup if self.result is not None else None

    @property
    def error(self) -> str | None:
        return first_error(self.result) if self.result is not None else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "temperature": self.temperature,
            "verdict": self.verdict,
            "speedup": self.speedup,
            "error": self.error,
            "duplicate_of": self.duplicate_of,
            "num_tokens": self.generation.num_tokens,
            "finish_reason": self.generation.finish_reason,
        }


@dataclass(frozen=True, slots=True)
class BestOf:
    """Every sample in batch order and the chosen one's index."""

    samples: tuple[Sample, ...]
    chosen: int
    seconds: float  # decoding the batch
    num_forwards: int  # forwards the batch took (rows share them)

    @property
    def best(self) -> Sample:
        return self.samples[self.chosen]

    @property
    def passed(self) -> bool:
        """The chosen sample is `correct` or `compiled`."""
        result = self.best.result
        return result is not None and result.verdict in PASSING


def sample_configs(config: SamplerConfig, n: int) -> list[SamplerConfig]:
    """Row 0 greedy; rows 1..n-1 sampled at `config.temperature` (or `DEFAULT_TEMPERATURE` when it
    is 0), seeded `config.seed + i` when a seed is set."""
    if n < 1:
        raise ValueError(f"samples={n}: need at least one sample")
    temperature = config.temperature or DEFAULT_TEMPERATURE
    rows = [config.replace(temperature=0.0)]
    for i in range(1, n):
        seed = None if config.seed is None else config.seed + i
        rows.append(config.replace(temperature=temperature, seed=seed))
    return rows


def generate_samples(
    engine: Any,
    pytorch_code: str,
    configs: Sequence[SamplerConfig],
    *,
    scaffold: tuple[str, str] | None = None,
    on_progress: Callable[[Progress], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> tuple[list[Generation], float, int]:
    """Decode one row per config in one batch: e2e for `pytorch_code`, or with `scaffold=(prefix,
    suffix)` the infilling of its CUDA string. Returns the generations, the batch's seconds and its
    forwards. `on_progress` gets the tokens of all rows together. Raises GenerationError (the
    engine's: no mask token, no block length, too long for the model)."""
    from cudice.model.batching import ContinuousBatcher
    from cudice.model.engine import GenerationError

    if scaffold is None:
        ids = engine.encode(engine.kernel_prompt(pytorch_code))
    else:
        ids = engine.infill_ids(scaffold[0], scaffold[1], pytorch_code)
        marker = infill_stop_marker(scaffold[1])
        configs = [c.replace(stop_strings=(*c.stop_strings, marker)) for c in configs]
    block = max(engine.block_length(c) for c in configs)  # GenerationError when there is none
    longest = len(ids) + max(c.max_new_tokens for c in configs) + 2 * block
    batcher = ContinuousBatcher.from_engine(
        engine,
        max_batch=len(configs),
        max_queue=len(configs),
        num_pages=len(configs) * math.ceil(longest / PAGE_SIZE),
        page_size=PAGE_SIZE,
    )
    start = time.perf_counter()
    tokens = [0] * len(configs)
    forwards = [0]

    def on_block_of(row: int) -> Callable[[Sequence[int], int], None]:
        def on_block(so_far: Sequence[int], num_forwards: int) -> None:
            tokens[row] = len(so_far)
            forwards[0] = max(forwards[0], num_forwards)
            if on_progress is not None:
                on_progress(Progress(sum(tokens), forwards[0], time.perf_counter() - start))

        return on_block

    try:
        try:
            requests = [
                batcher.submit(ids, c, on_block=on_block_of(i), should_stop=should_stop)
                for i, c in enumerate(configs)
            ]
        except ValueError as exc:  # too long for the model's positions
            raise GenerationError(str(exc)) from exc
        batcher.run_until_idle()
        results = [r.result() for r in requests]
    finally:
        batcher.close()
    seconds = time.perf_counter() - start
    gens = []
    for res in results:
        row = res.row
        if scaffold is None:
            code = extract_first_code_block(row.text)
            text, middle = (code if code is not None else row.text), None
        else:
            middle = splice_middle(row.text, scaffold[1])
            text = scaffold[0] + middle + scaffold[1]
        n = len(row.tokens)
        gens.append(
            Generation(
                text=text,
                middle=middle,
                num_tokens=n,
                num_forwards=res.num_forwards,
                tokens_per_forward=n / res.num_forwards if res.num_forwards else 0.0,
                seconds=res.seconds,
                cancelled=row.finish_reason == "cancelled",
                step_map=row.step_map,
                finish_reason=row.finish_reason,
                raw_text=row.text,
            )
        )
    return gens, seconds, max(r.num_forwards for r in results)


def distinct(texts: Sequence[str]) -> list[int | None]:
    """Per text: None for a first occurrence, else the index of the first identical earlier text."""
    first: dict[str, int] = {}
    out: list[int | None] = []
    for i, text in enumerate(texts):
        out.append(first.get(text))
        first.setdefault(text, i)
    return out


def first_error(result: VerifyResult) -> str | None:
    """The first error diagnostic's message, else the result's `error` text (None when clean)."""
    for d in result.diagnostics:
        if d.severity is Severity.ERROR:
            return d.message
    return result.error


def rank_key(result: VerifyResult, index: int) -> tuple[int, float, int]:
    """Sort key, larger is better: verdict tier, then speedup (missing or suspicious: -inf), then
    the earlier sample."""
    speedup = result.speedup
    measured = speedup if speedup is not None and not result.is_suspicious else -math.inf
    return (_TIERS.get(result.verdict, 0), measured, -index)


def choose(results: Sequence[VerifyResult | None]) -> int:
    """Index of the best-ranked result (None entries, unverified duplicates, never win)."""
    ranked = [(rank_key(r, i), i) for i, r in enumerate(results) if r is not None]
    if not ranked:
        raise ValueError("no verified sample to choose from")
    return max(ranked)[1]


def verify_samples(
    texts: Sequence[str],
    path: Path,
    reference: Path | None,
    *,
    config: VerifyConfig | None = None,
    workers: int | None = None,
    on_result: Callable[[int, VerifyResult], None] | None = None,
) -> list[VerifyResult]:
    """`verify()` each text as the unsaved source of `path` against `reference` (None: what the text
    names) under `config` (default: `VerifyConfig()`), at most `workers` at a time (default: the
    verifier pool's `default_compile_workers()`); `on_result(i, result)` as each finishes (on the
    caller's thread). An exception here (Ctrl-C) cancels the verifications still running."""
    from concurrent.futures import FIRST_COMPLETED, wait

    from cudice.verifier.pool import default_compile_workers

    workers = max(1, workers or default_compile_workers())
    cancel = threading.Event()
    results: list[VerifyResult | None] = [None] * len(texts)
    pool = ThreadPoolExecutor(max_workers=min(workers, max(1, len(texts))), thread_name_prefix="best-of")
    try:
        futures = {
            pool.submit(verify, path, source=text, reference=reference, config=config, cancel=cancel): i
            for i, text in enumerate(texts)
        }
        pending = set(futures)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in sorted(done, key=futures.__getitem__):
                i = futures[fut]
                results[i] = fut.result()
                if on_result is not None:
                    on_result(i, fut.result())
    finally:
        cancel.set()  # a no-op when every verification has finished
        pool.shutdown(wait=True, cancel_futures=True)
    return [r for r in results if r is not None]


def best_of(
    engine: Any,
    pytorch_code: str,
    config: SamplerConfig,
    n: int,
    *,
    path: Path,
    reference: Path | None,
    scaffold: tuple[str, str] | None = None,
    finish: Callable[[str], str] = lambda text: text,
    verify_config: VerifyConfig | None = None,
    workers: int | None = None,
    on_progress: Callable[[Progress], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    on_generated: Callable[[], None] | None = None,
    on_sample: Callable[[Sample], None] | None = None,
) -> BestOf:
    """Decode `n` samples in one batch, verify each distinct one, choose the best (module docstring).

    `finish(text)` turns an answer into the file that is verified (the CLI adds the reference
    comment it prints); duplicates are judged on that file; `generation.text` stays the answer.
    `path`/`reference`/`verify_config`/`workers`: as in `verify_samples`. `on_generated()` runs
    once decoding is done (a progress line's cue); `on_sample(sample)` as each sample's verdict is
    known, in the order they finish (duplicates right after their original)."""
    configs = sample_configs(config, n)
    gens, seconds, num_forwards = generate_samples(
        engine, pytorch_code, configs, scaffold=scaffold, on_progress=on_progress, should_stop=should_stop
    )
    if on_generated is not None:
        on_generated()
    files = [finish(g.text) for g in gens]
    dup = distinct(files)
    originals = [i for i, d in enumerate(dup) if d is None]
    by_index: dict[int, VerifyResult] = {}

    def sample(i: int) -> Sample:
        first = dup[i]
        original = i if first is None else first
        return Sample(i, configs[i].temperature, gens[i], dup[i], by_index.get(original))

    def on_result(k: int, result: VerifyResult) -> None:
        by_index[originals[k]] = result
        if on_sample is not None:
            for i in range(len(gens)):
                if i == originals[k] or dup[i] == originals[k]:
                    on_sample(sample(i))

    verify_samples(
        [files[i] for i in originals],
        path,
        reference,
        config=verify_config,
        workers=workers,
        on_result=on_result,
    )
    samples = tuple(sample(i) for i in range(len(gens)))
    chosen = choose([by_index.get(i) for i in range(len(gens))])
    return BestOf(samples, chosen, seconds, num_forwards)
