"""Continuous batching on the tiny checkpoint (float32, CPU): every request's tokens equal its
batch-1 result from the existing sampler whatever else runs beside it and whenever it arrives;
pages return to the pool on finish and cancel; the queue bound refuses with a clear message.

Requests that must arrive mid-run are submitted from inside another request's block callback (the
worker thread), so they join a running batch deterministically; other waits are on events with
generous bounds."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from cudice.model.batching import ContinuousBatcher, QueueFull
from cudice.model.config import SamplerConfig

TEXT = (
    "import torch\nclass Model(nn.Module):\n    def forward(self, a, b):\n        return a + b\n"
    "def get_inputs():\n    return [torch.randn(16, 16384)]\n"
)
LENGTHS = (9, 14, 1, 7, 8, 23)  # every remainder mod the block length 4, one shorter than a block
CFG = SamplerConfig(threshold=0.3, max_new_tokens=20)
WAIT = 120.0  # seconds: a bound for a loaded 2-core box, never reached when things work


@pytest.fixture(scope="module")
def prompts(tiny_engine) -> list[list[int]]:
    ids = tiny_engine.encode(TEXT)
    assert len(ids) >= max(LENGTHS)
    return [ids[:n] for n in LENGTHS]


@pytest.fixture(scope="module")
def singles(tiny_engine, prompts):
    """Batch-1 results of the existing sampler (HF runner, dynamic cache): the reference."""
    return [tiny_engine.sampler.generate([p], CFG, 4).rows[0] for p in prompts]


@pytest.fixture
def make(tiny_engine) -> Iterator:
    made: list[ContinuousBatcher] = []

    def build(**options) -> ContinuousBatcher:
        engine = ContinuousBatcher.from_engine(tiny_engine, **{"num_pages": 64, "page_size": 8, **options})
        made.append(engine)
        return engine

    yield build
    for engine in made:
        engine.close()


def _pool_is_full(engine: ContinuousBatcher) -> bool:
    cache = engine.cache
    return cache.pages_in_use == 0 and cache.unreserved_pages == cache.num_pages and not cache.sequences()


@pytest.mark.parametrize("fast", [False, True])
def test_staggered_arrivals_decode_exactly_as_batch_one(make, prompts, singles, fast) -> None:
    """Eager ragged decode forwards, or the fast decode (`PagedRunner.decode`, batch classes of 1 to 8
    rows with padded rows on the scratch page as requests come and go) forced on."""
    engine = make(fast_decode=fast, max_batch=8).start()
    handles = []

    def arrivals(tokens, forwards) -> None:  # request 0's blocks: one new request per block
        k = len(handles)
        if k < len(prompts):
            handles.append(engine.submit(prompts[k], CFG))

    handles.append(engine.submit(prompts[0], CFG, on_block=arrivals))
    first = handles[0].result(WAIT)
    while len(handles) < len(prompts):  # request 0 ended before every arrival: the rest now
        handles.append(engine.submit(prompts[len(handles)], CFG))
    results = [h.result(WAIT) for h in handles]
    for got, want in zip(results, singles, strict=True):
        assert got.row.tokens == want.tokens
        assert got.row.step_map == want.step_map
        assert got.row.block_tokens == want.block_tokens
        assert (got.row.text, got.row.finish_reason) == (want.text, want.finish_reason)
    # the late requests joined a running batch, each at a different iteration
    joined = [h.admitted_iteration for h in handles[1:4]]
    assert all(j is not None and j < handles[0].finished_iteration for j in joined)
    assert len(set(joined)) == 3
    assert engine.peak_rows >= 4 and first.num_forwards > 0
    if fast:  # every decode forward had one block length: all of them took the fast decode
        assert engine.fast_steps > 0 and engine.eager_steps == 0, engine.decode_path
        assert engine.runner.decodes == engine.fast_steps
        assert len({key[0] for key in engine.cache.decode_states}) >= 3  # several batch classes ran
    else:
        assert engine.fast_steps == 0 and engine.eager_steps > 0, engine.decode_path
    engine.close()
    assert _pool_is_full(engine)


@pytest.mark.parametrize("strategy", ["low_confidence_static", "sequential"])
def test_other_strategies_and_a_stop_string_match_batch_one(make, tiny_engine, prompts, strategy) -> None:
    base = SamplerConfig(strategy=strategy, denoising_steps=2, max_new_tokens=12)
    first = tiny_engine.sampler.generate([prompts[1]], base, 4).rows[0]
    stop = first.text[len(first.text) // 2 :][:3]  # a piece of the middle of the answer
    configs = [base, base.replace(stop_strings=(stop,)), base.replace(max_new_tokens=7)]
    cases = [(p, c) for p in prompts[1:3] for c in configs]
    want = [tiny_engine.sampler.generate([p], c, 4).rows[0] for p, c in cases]
    engine = make()
    handles = [engine.submit(p, c) for p, c in cases]  # all in one batch, three configs mixed
    engine.run_until_idle()
    for h, w in zip(handles, want, strict=True):
        got = h.result(0).row
        assert (got.tokens, got.step_map, got.text, got.finish_reason) == (
            w.tokens,
            w.step_map,
            w.text,
            w.finish_reason,
        )
    assert "stop_string" in {w.finish_reason for w in want}
    assert _pool_is_full(engine)


@pytest.mark.parametrize("fast", [False, True])
def test_mixed_block_lengths_and_fuse_commit_share_a_batch(make, tiny_engine, prompts, fast) -> None:
    """Rows of block 4 and block 8 (ragged forwards), and a fuse_commit row, in one batch; with the
    fast decode on, the mixed iterations fall back to the ragged forward."""
    configs = [
        SamplerConfig(threshold=0.0, block_length=8, denoising_steps=3, max_new_tokens=16),
        CFG.replace(fuse_commit=True, max_new_tokens=12),
    ]
    cases = [(p, c) for p in prompts[:3] for c in configs] + [(prompts[3], CFG)]
    want = [tiny_engine.sampler.generate([p], c, c.block_length or 4).rows[0] for p, c in cases]
    engine = make(fast_decode=fast)
    handles = [engine.submit(p, c) for p, c in cases]
    engine.run_until_idle()
    for h, w in zip(handles, want, strict=True):
        got = h.result(0).row
        assert (got.tokens, got.step_map) == (w.tokens, w.step_map)
    assert engine.eager_steps > 0  # iterations with both block lengths live
    assert (engine.fast_steps > 0) == fast, engine.decode_path  # the block-4 rows outlive the others
    assert _pool_is_full(engine)


def test_seeded_sampling_with_the_fast_decode_draws_as_batch_one(make, tiny_engine, prompts) -> None:
    cfgs = [SamplerConfig(temperature=1.0, top_k=50, top_p=0.95, seed=s, max_new_tokens=12) for s in (1, 2)]
    want = [tiny_engine.sampler.generate([prompts[i]], c, 4).rows[0].tokens for i, c in enumerate(cfgs)]
    engine = make(fast_decode=True).warm_up()
    assert engine.warmup_variants == 2 * 6  # batch classes 1 to 32, with and without logits
    handles = [engine.submit(prompts[i], c) for i, c in enumerate(cfgs)]
    engine.run_until_idle()
    assert [h.result(0).row.tokens for h in handles] == want
    assert engine.fast_steps > 0 and engine.eager_steps == 0


def test_seeded_sampling_draws_as_batch_one(make, tiny_engine, prompts) -> None:
    cfgs = [SamplerConfig(temperature=1.0, top_k=50, top_p=0.95, seed=s, max_new_tokens=12) for s in (1, 2)]
    want = [tiny_engine.sampler.generate([prompts[i]], c, 4).rows[0].tokens for i, c in enumerate(cfgs)]
    engine = make()
    handles = [engine.submit(prompts[i], c) for i, c in enumerate(cfgs)]
    handles.append(engine.submit(prompts[2], CFG))  # a greedy row beside them
    engine.run_until_idle()
    assert [h.result(0).row.tokens for h in handles[:2]] == want


def test_submissions_from_many_threads(make, prompts, singles) -> None:
    engine = make().start()
    handles: dict[int, object] = {}
    go = threading.Event()

    def client(i: int) -> None:
        go.wait(WAIT)
        handles[i] = engine.submit(prompts[i], CFG)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    go.set()
    for t in threads:
        t.join(WAIT)
    assert sorted(handles) == list(range(len(prompts)))
    for i, want in enumerate(singles):
        assert handles[i].result(WAIT).row.tokens == want.tokens  # type: ignore[attr-defined]


def test_memory_holds_real_lengths_not_batch_times_longest(make, prompts, singles) -> None:
    """Pages in use always equal the sum over live rows of ceil(extent / page), where a row's extent is
    its prompt + generated tokens + the block being decoded, and a pool smaller than what a static
    cache of the same batch needs (batch x longest) serves all rows at once."""
    page = 8
    engine = make(page_size=page, num_pages=30)
    longest = max(len(p) for p in prompts) + CFG.max_new_tokens + 4
    assert len(prompts) * -(-longest // page) > engine.cache.num_pages  # a static layout would not fit
    snapshots: list[tuple[int, dict[int, int]]] = []

    def snap(tokens, forwards) -> None:
        snapshots.append((engine.cache.pages_in_use, engine.cache.sequences()))

    handles = [engine.submit(p, CFG, on_block=snap) for p in prompts]
    engine.run_until_idle()
    assert engine.peak_rows == len(prompts)
    assert snapshots
    bound = {h.id: len(p) + CFG.max_new_tokens + 4 for h, p in zip(handles, prompts, strict=True)}
    for in_use, extents in snapshots:
        assert in_use == sum(-(-n // page) for n in extents.values())
        assert all(n <= bound[seq] for seq, n in extents.items())
    assert engine.peak_pages < len(prompts) * -(-longest // page)
    assert [h.result(0).row.tokens for h in handles] == [s.tokens for s in singles]
    assert _pool_is_full(engine)


def test_a_small_pool_queues_requests_until_pages_return(make, prompts, singles) -> None:
    need = -(-(24 + CFG.max_new_tokens + 4) // 8)  # the longest prompt's reservation, in pages
    engine = make(num_pages=need + 2)
    handles = [engine.submit(p, CFG) for p in prompts]
    engine.run_until_idle()
    assert engine.peak_rows < len(prompts)
    assert [h.result(0).row.tokens for h in handles] == [s.tokens for s in singles]
    assert _pool_is_full(engine)


def test_queue_bound_refuses_with_a_clear_message(make, prompts, singles) -> None:
    engine = make(max_queue=2)  # not started: nothing leaves the queue
    a, b = engine.submit(prompts[0], CFG), engine.submit(prompts[1], CFG)
    with pytest.raises(QueueFull, match=r"queue is full \(2 requests waiting, max_queue=2\); retry"):
        engine.submit(prompts[2], CFG)
    engine.start()
    assert a.result(WAIT).row.tokens == singles[0].tokens
    assert b.result(WAIT).row.tokens == singles[1].tokens
    engine.submit(prompts[2], CFG).result(WAIT)  # room again


def test_requests_that_can_never_run_are_refused(make, prompts) -> None:
    engine = make(num_pages=4)
    with pytest.raises(ValueError, match=r"more than the whole pool .* more num_pages"):
        engine.submit(prompts[0], CFG.replace(max_new_tokens=64))
    with pytest.raises(ValueError, match="empty prompt"):
        engine.submit([], CFG)
    with pytest.raises(ValueError, match="model's 8192"):
        make(num_pages=4096).submit(prompts[0], CFG.replace(max_new_tokens=9000))


def test_cancelling_one_request_leaves_the_others_untouched(make, prompts, singles) -> None:
    engine = make().start()
    victim_blocks: list[int] = []
    handles = []

    def cancel_after_first_block(tokens, forwards) -> None:
        victim_blocks.append(len(tokens))
        handles[1].cancel()

    for i, p in enumerate(prompts):
        handles.append(engine.submit(p, CFG, on_block=cancel_after_first_block if i == 1 else None))
    results = [h.result(WAIT) for h in handles]
    victim = results[1].row
    assert victim.finish_reason == "cancelled" and victim_blocks == [len(victim.tokens)]
    assert victim.tokens == singles[1].tokens[: len(victim.tokens)]
    for i, (got, want) in enumerate(zip(results, singles, strict=True)):
        if i != 1:
            assert got.row.tokens == want.tokens and got.row.finish_reason == want.finish_reason
    engine.close()
    assert _pool_is_full(engine)


def test_should_stop_and_cancel_in_the_queue_and_close(make, prompts) -> None:
    engine = make(max_batch=1)
    stop = threading.Event()
    polled = engine.submit(prompts[0], CFG, on_block=lambda t, f: stop.set(), should_stop=stop.is_set)
    queued = engine.submit(prompts[1], CFG)
    queued.cancel()
    left = engine.submit(prompts[2], CFG)
    engine.step()  # admits the first only (max_batch=1); the cancelled one leaves the queue at once
    assert not polled.done() and not left.done()
    assert queued.result(0).row.finish_reason == "cancelled" and queued.result(0).num_forwards == 0
    assert engine.queued == 1
    while not polled.done():
        engine.step()
    assert polled.result(0).row.finish_reason == "cancelled" and len(polled.result(0).row.tokens) > 0
    engine.step()  # admits the last
    assert engine.queued == 0 and engine.live == 1
    engine.close()  # the running one ends as cancelled, its pages returned
    assert left.result(0).row.finish_reason == "cancelled"
    assert _pool_is_full(engine)
    with pytest.raises(RuntimeError, match="closed"):
        engine.submit(prompts[0], CFG)


def test_a_failing_callback_fails_only_its_request(make, prompts, singles) -> None:
    def broken(tokens, forwards) -> None:
        raise RuntimeError("editor went away")

    engine = make().start()
    bad = engine.submit(prompts[0], CFG, on_block=broken)
    good = engine.submit(prompts[1], CFG)
    with pytest.raises(RuntimeError, match="editor went away"):
        bad.result(WAIT)
    assert good.result(WAIT).row.tokens == singles[1].tokens
    engine.close()
    assert _pool_is_full(engine)


def test_a_failing_forward_or_should_stop_fails_only_its_rows(make, prompts, singles) -> None:
    engine = make()
    real = engine.runner.forward
    calls = {"n": 0}

    def flaky(cache, segments):
        calls["n"] += 1
        if calls["n"] == 3:  # the decode forward of the second iteration: rows 0 and 1
            raise RuntimeError("CUDA out of memory (simulated)")
        return real(cache, segments)

    engine.runner.forward = flaky  # type: ignore[method-assign]
    a, b = engine.submit(prompts[0], CFG), engine.submit(prompts[1], CFG)
    engine.step()  # prefill + decode
    c = engine.submit(prompts[4], CFG, should_stop=lambda: 1 / 0 > 0)
    engine.step()  # the failing decode forward; c's should_stop raises
    d = engine.submit(prompts[3], CFG)
    engine.run_until_idle()
    for h in (a, b):
        with pytest.raises(RuntimeError, match="simulated"):
            h.result(0)
    with pytest.raises(ZeroDivisionError):
        c.result(0)
    assert d.result(0).row.tokens == singles[3].tokens
    assert _pool_is_full(engine)
