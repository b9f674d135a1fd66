"""The fast paged decode: `attention.attend_paged` equals a gather + SDPA reference, and
`PagedRunner.decode` equals the eager ragged `PagedRunner.forward` on the same segments (logits and
cache writes), padded batch-class rows staying on the scratch page.

The Triton kernel runs in Triton's interpreter on this CPU box, which must be switched on before
triton is imported: those checks run in a child Python with TRITON_INTERPRET=1 (as in
test_attention.py). The in-process decode checks run the decode with the reference attention (no
Triton on CPU). On a GPU (`gpu` marker): the compiled kernel against the reference in bf16 and
float32, and the batching engine's tokens with CUDA graphs on and off.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from cudice.model import attention
from cudice.model.paged import PagedKVCache
from cudice.model.paged_forward import DecodeCache, PagedRunner, Segment

needs_triton = pytest.mark.skipif(not attention.available(), reason="triton is not installed (dev extra)")

# batch, tokens per row, heads, KV heads, head dim, page size, table width, splits, table dtype
KERNEL_CASES = [
    (3, 4, 4, 2, 16, 8, 20, 1, "int32"),
    (3, 4, 4, 2, 16, 8, 20, 3, "int32"),  # several splits over mixed lengths
    (5, 4, 8, 2, 24, 16, 9, 2, "int64"),  # B not a power of two; head dim not one; int64 table
    (1, 16, 8, 2, 16, 4, 70, 5, "int32"),  # tiles of 128 keys over 32 pages of 4
    (2, 1, 4, 4, 32, 16, 12, 64, "int32"),  # no GQA; more splits than a row has tiles
]


def paged_inputs(case: tuple, device: str = "cpu", dtype: torch.dtype = torch.float32):
    """q, pools, table, lengths for a kernel case: pages handed out in a random order (rows' pages
    interleave in the pool), lengths from 1 to the whole table width."""
    b, n, h, hkv, d, ps, width, _, tdtype = case
    gen = torch.Generator().manual_seed(b * 100 + width)
    pages = b * width + 3
    k_pool, v_pool = (torch.randn(pages * ps, hkv, d, generator=gen) for _ in range(2))
    table = torch.randperm(pages, generator=gen)[: b * width].view(b, width)
    lengths = [max(1, width * ps * (r + 1) // b - 3 * r) for r in range(b)]
    lengths[0] = 1 if b > 1 else lengths[0]
    q = torch.randn(b, n, h, d, generator=gen)
    to = {"dtype": dtype, "device": device}
    idx = {"dtype": getattr(torch, tdtype), "device": device}
    return q.to(**to), k_pool.to(**to), v_pool.to(**to), table.to(**idx), torch.tensor(lengths).to(**idx)


KERNEL_CHILD = textwrap.dedent(
    """
    import json, sys, torch
    sys.path.insert(0, {here!r})
    from test_paged_decode import KERNEL_CASES, paged_inputs
    from cudice.model import attention
    out = []
    for case in KERNEL_CASES:
        q, kp, vp, table, lengths = paged_inputs(case)
        d, ps, splits = case[4], case[5], case[7]
        before = (kp.clone(), vp.clone())
        got = attention.attend_paged(q, kp, vp, table, lengths, d ** -0.5, ps, splits=splits)
        ref = attention.paged_reference(q, kp, vp, table, lengths, d ** -0.5, ps)
        # the reference's own check: row 1 (or 0) by hand, keys read through its pages
        r = min(1, q.shape[0] - 1)
        pos = torch.arange(int(lengths[r]))
        slots = table[r].long()[pos // ps] * ps + pos % ps
        g = q.shape[2] // kp.shape[1]
        k, v = kp[slots].repeat_interleave(g, 1), vp[slots].repeat_interleave(g, 1)  # (K, H, D)
        s = torch.einsum("thd,khd->htk", q[r], k) * d ** -0.5
        hand = torch.einsum("htk,khd->thd", s.softmax(-1), v)
        out.append({{"case": case, "err": (got - ref).abs().max().item(), "scale": ref.abs().max().item(),
                    "ref_err": (ref[r] - hand).abs().max().item(),
                    "pools_kept": bool(torch.equal(before[0], kp) and torch.equal(before[1], vp)),
                    "shape": list(got.shape), "dtype": str(got.dtype)}})
    print(json.dumps(out))
    """
)


@needs_triton
def test_paged_kernel_equals_the_reference_in_the_interpreter() -> None:
    code = KERNEL_CHILD.format(here=os.path.dirname(__file__))
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(results) == len(KERNEL_CASES)
    for r in results:
        assert r["err"] <= 1e-5 * max(1.0, r["scale"]), r
        assert r["ref_err"] <= 1e-5 * max(1.0, r["scale"]), r
        assert r["pools_kept"] and r["dtype"] == "torch.float32", r
        b, n, h, _, d = r["case"][:5]
        assert r["shape"] == [b, n, h, d], r


def test_bad_shapes_and_cpu_without_the_interpreter_are_clear_errors(monkeypatch) -> None:
    q, kp, vp, table, lengths = paged_inputs((2, 4, 6, 4, 16, 8, 4, 1, "int32"))  # 6 heads over 4 KV heads
    with pytest.raises(ValueError, match="divisible"):
        attention.attend_paged(q, kp, vp, table, lengths, 0.25, 8)
    q, kp, vp, table, lengths = paged_inputs(KERNEL_CASES[0])
    with pytest.raises(ValueError, match="one length per row"):
        attention.attend_paged(q, kp, vp, table, lengths[:2], 0.25, 8)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(ValueError, match="interpreter"):
        attention.attend_paged(q, kp, vp, table, lengths, 0.25, 8)


# --- the decode step against the eager ragged forward ---------------------------------------------
PROMPTS = (8, 16, 4, 12, 20)  # whole blocks of 4 (a prefill leaves whole blocks in the cache)
BLOCK = 4


def decode_against_forward(model, attention_kind: str = "auto") -> dict:
    """Two caches prefilled alike; decode steps of 3, 5, 1 and 5 rows (batch classes 4, 8, 1, 8: padded
    rows in three) through `decode` in one and `forward` in the other. Returns the largest logit
    difference, whether the decode changed any slot outside its segments' own slots and the scratch
    page, whether the caches agree, and what the scratch page saw."""
    runner = PagedRunner(model, max_batch=8, attention=attention_kind)
    gen = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    prompts = [torch.randint(0, vocab, (n,), generator=gen) for n in PROMPTS]
    fast, slow = (runner.new_cache(num_pages=64, page_size=4) for _ in range(2))
    for cache in (fast, slow):
        for seq, p in enumerate(prompts):
            cache.add(seq, len(p) + 4 * BLOCK)
        runner.forward(cache, [Segment(s, p, 0, BLOCK, logits=False) for s, p in enumerate(prompts)])
    lengths = [len(p) for p in prompts]
    steps = [
        [(0, True), (2, False), (4, True)],  # class 4: one padded row
        [(0, True), (1, True), (2, True), (3, False), (4, True)],  # class 8: three padded rows
        [(3, False)],  # class 1, a commit alone: no logits at all
        [(4, True), (3, True), (2, False), (1, True), (0, True)],  # rows in another order
    ]
    report = {
        "err": 0.0,
        "outside": False,
        "caches_differ": 0.0,
        "nones_right": True,
        "scratch_written": True,
    }
    ps = fast.page_size
    scratch = slice(fast.scratch_page * ps, (fast.scratch_page + 1) * ps)
    for step in steps:
        segments = [
            Segment(seq, torch.randint(0, vocab, (BLOCK,), generator=gen), lengths[seq], BLOCK, logits)
            for seq, logits in step
        ]
        assert runner.decode_eligible(fast, segments)
        before = [k.clone() for k in fast.keys]
        want = runner.forward(slow, segments)
        got = runner.decode(fast, segments)
        for (_, logits), g, w in zip(step, got, want, strict=True):
            report["nones_right"] &= (g is None) == (w is None) == (not logits)
            if g is not None and w is not None:
                report["err"] = max(report["err"], (g - w).abs().max().item())
        own = torch.cat([fast.slots(s.seq, s.start, s.start + BLOCK) for s in segments])
        padded = runner.batch_class(len(segments)) > len(segments)
        for layer, old in enumerate(before):
            changed = (fast.keys[layer] != old).any(dim=(1, 2))
            changed[own] = False
            scratch_changed = bool(changed[scratch].any())
            changed[scratch] = False
            report["outside"] |= bool(changed.any())
            if padded:
                report["scratch_written"] &= scratch_changed or bool(fast.keys[layer][scratch].any())
        for seq in {s.seq for s in segments}:  # commit rows advance; denoise rows are redone later
            if not dict(step)[seq]:
                lengths[seq] += BLOCK
    n = fast.num_pages * ps
    for layer in range(len(fast.keys)):
        for a, b in ((fast.keys[layer], slow.keys[layer]), (fast.values[layer], slow.values[layer])):
            report["caches_differ"] = max(report["caches_differ"], (a[:n] - b[:n]).abs().max().item())
    report["pages_in_use"] = [fast.pages_in_use, slow.pages_in_use]
    report["unreserved"] = [fast.unreserved_pages, fast.num_pages - sum(-(-(n + 16) // 4) for n in PROMPTS)]
    report["decodes"] = runner.decodes
    report["path"] = runner.describe()
    return report


def _check(report: dict) -> None:
    assert report["err"] <= 1e-4, report
    assert report["caches_differ"] <= 1e-5, report
    assert not report["outside"], report  # no slot of another sequence (or of its own) was touched
    assert report["nones_right"] and report["scratch_written"], report
    assert report["pages_in_use"][0] == report["pages_in_use"][1], report  # the scratch page is uncounted
    assert report["unreserved"][0] == report["unreserved"][1], report
    assert report["decodes"] == 4, report


def test_decode_equals_the_ragged_forward(tiny_engine) -> None:
    report = decode_against_forward(tiny_engine.loaded.model)
    _check(report)
    assert report["path"].startswith("paged decode: sdpa attention"), report


@needs_triton
def test_decode_with_the_kernel_equals_the_ragged_forward_in_the_interpreter(tiny_sdar_dir) -> None:
    code = textwrap.dedent(
        f"""
        import json, sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from test_paged_decode import decode_against_forward
        from cudice.model.engine import load_engine
        lm = load_engine({str(tiny_sdar_dir)!r}, device="cpu", freeze=True).loaded
        print(json.dumps(decode_against_forward(lm.model, "triton")))
        """
    )
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    _check(report)
    assert report["path"].startswith("paged decode: triton attention"), report  # no fallback happened


def test_what_the_decode_refuses(tiny_engine) -> None:
    runner = PagedRunner(tiny_engine.loaded.model, max_batch=2)
    cache = runner.new_cache(num_pages=16, page_size=4)
    assert isinstance(cache, DecodeCache) and cache.scratch_page == 16 and cache.pages_in_use == 0
    assert cache.keys[0].shape[0] == 17 * 4 and cache.width == 16  # the pool's pages bound the width
    for seq in range(3):
        cache.add(seq, 8)
    ids = torch.zeros(4, dtype=torch.long)
    one = [Segment(0, ids, 4, 4, True)]
    assert runner.decode_eligible(cache, one)
    assert [runner.batch_class(n) for n in (1, 2)] == [1, 2]
    cases = {
        "mixed block lengths": [Segment(0, ids, 4, 4, True), Segment(1, ids.repeat(2), 8, 8, True)],
        "a partial block": [Segment(0, ids[:3], 4, 4, True)],
        "an unaligned start": [Segment(0, ids, 2, 4, True)],
        "more rows than max_batch": [Segment(s, ids, 0, 4, True) for s in range(3)],
        "nothing": [],
    }
    for what, segments in cases.items():
        assert not runner.decode_eligible(cache, segments), what
        with pytest.raises(ValueError, match="run forward instead"):
            runner.decode(cache, segments)
    plain = PagedKVCache(runner.num_layers, runner.num_kv, runner.head_dim, 16, 4)  # no scratch page
    plain.add(0, 8)
    assert not runner.decode_eligible(plain, one)
    narrow = runner.new_cache(num_pages=16, page_size=4, max_tokens=8)  # tables of 2 pages
    narrow.add(0, 12)
    assert narrow.width == 2 and not runner.decode_eligible(narrow, [Segment(0, ids, 8, 4, True)])


def test_warm_up_runs_every_batch_class_on_the_scratch_page_only(tiny_engine) -> None:
    runner = PagedRunner(tiny_engine.loaded.model, max_batch=6)
    cache = runner.new_cache(num_pages=16, page_size=4)
    cache.add(0, 8)
    runner.forward(cache, [Segment(0, torch.arange(8), 0, 4, logits=False)])
    before = [k.clone() for k in cache.keys]
    assert runner.warm_up(cache, 4) == 2 * 4  # classes 1, 2, 4, 6, with and without logits
    assert sorted(cache.decode_states) == [(b, 4, lg) for b in (1, 2, 4, 6) for lg in (False, True)]
    scratch = cache.scratch_page * cache.page_size
    for old, new in zip(before, cache.keys, strict=True):
        assert torch.equal(old[:scratch], new[:scratch])  # sequence 0's pages (and all others) untouched
        assert new[scratch:].any()
    assert runner.warm_up(cache, 32) == 0  # more tokens per row than the kernel takes: nothing to do


# --- on a GPU ---------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_paged_kernel_equals_the_reference_on_gpu(dtype: torch.dtype) -> None:
    dice = (32, 4, 16, 8, 128, 16, 80, 0, "int32")  # the DICE-1.7B decode: 32 rows of ~1,000 tokens
    for case in [*KERNEL_CASES, dice, (1, 4, 16, 8, 128, 16, 80, 0, "int32")]:
        q, kp, vp, table, lengths = paged_inputs(case, "cuda", dtype)
        d, ps, splits = case[4], case[5], case[7]
        got = attention.attend_paged(q, kp, vp, table, lengths, d**-0.5, ps, splits=splits or None).float()
        ref = attention.paged_reference(q.float(), kp.float(), vp.float(), table, lengths, d**-0.5, ps)
        tol = 2e-2 if dtype == torch.bfloat16 else 1e-4
        assert (got - ref).abs().max().item() <= tol * max(1.0, ref.abs().max().item()), case


@pytest.mark.gpu
def test_graphs_on_equal_graphs_off_and_batch_one_on_gpu(tiny_sdar_dir) -> None:
    from cudice.model.batching import ContinuousBatcher
    from cudice.model.config import SamplerConfig
    from cudice.model.loader import load_checkpoint
    from cudice.model.runner import HFRunner
    from cudice.model.sampler import BlockDiffusionSampler

    lm = load_checkpoint(str(tiny_sdar_dir), device="cuda", dtype="float32")
    ids = lm.ids
    sampler = BlockDiffusionSampler(HFRunner(lm.model), ids.mask, ids.pad, ids.stop, lm.tokenizer.decode)
    prompts = [[5, 9, 11, 3, 8, 1, 2], [7, 2], [4] * 13, [6] * 30, [3] * 21]
    cfg = SamplerConfig(strategy="low_confidence_dynamic", threshold=0.3, max_new_tokens=40)
    want = [sampler.generate([p], cfg, 4).rows[0].tokens for p in prompts]
    assert lm.model.training is False
    report = decode_against_forward(lm.model, "triton")
    _check(report)
    for graphs, compile in ((False, False), (True, False), (True, True)):
        engine = ContinuousBatcher(
            lm.model, sampler, 4, num_pages=256, page_size=16, max_batch=8, use_graphs=graphs, compile=compile
        )
        handles = [engine.submit(p, cfg) for p in prompts]
        engine.run_until_idle()
        got = [h.result(0).row.tokens for h in handles]
        assert got == want, (graphs, compile, engine.decode_path)
        assert engine.fast_steps > 0 and engine.eager_steps == 0, engine.decode_path
        assert engine.runner.attention == "triton" and not engine.runner.errors, engine.decode_path
        assert engine.runner.use_graphs == graphs and (engine.runner.captures > 0) == graphs
        engine.close()
