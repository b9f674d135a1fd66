"""The fast path (static KV cache, CUDA graphs) equals the slow path (HF + DynamicCache)."""

from __future__ import annotations

import pytest
import torch
from cudice.model.ar import ar_generate, static_ar_generate
from cudice.model.config import SamplerConfig
from cudice.model.fastpath import StaticRunner
from cudice.model.runner import HFRunner
from cudice.model.sampler import BlockDiffusionSampler

TEXT = "import torch\nclass Model(nn.Module):\n    def forward(self, a, b):\n        return a + b\n"
LENGTHS = (9, 14, 1, 7, 8)


def samplers(lm, runner):
    return BlockDiffusionSampler(runner, lm.ids.mask, lm.ids.pad, lm.ids.stop, lm.tokenizer.decode)


def prompts(lm) -> list[list[int]]:
    ids = lm.tokenizer(TEXT, add_special_tokens=False)["input_ids"]
    return [ids[:n] for n in LENGTHS]


def assert_same_rows(a, b) -> None:
    assert [r.tokens for r in a.rows] == [r.tokens for r in b.rows]
    assert [r.step_map for r in a.rows] == [r.step_map for r in b.rows]
    assert a.num_forwards == b.num_forwards


@pytest.mark.parametrize("strategy", ["low_confidence_static", "low_confidence_dynamic"])
def test_static_runner_equals_hf_runner_batched(tiny_engine, strategy: str) -> None:
    lm = tiny_engine.loaded
    cfg = SamplerConfig(strategy=strategy, threshold=0.3, max_new_tokens=24)
    slow = samplers(lm, HFRunner(lm.model)).generate(prompts(lm), cfg, 4)
    fast_runner = StaticRunner(lm.model, use_graphs=False)
    fast = samplers(lm, fast_runner).generate(prompts(lm), cfg, 4)
    assert_same_rows(slow, fast)
    # the cache (and its buffers) is reused by the next call of the same size
    again = samplers(lm, fast_runner).generate(prompts(lm), cfg, 4)
    assert_same_rows(slow, again)


@pytest.mark.parametrize("threshold", [0.0, 0.3])
def test_fused_commit_gives_the_same_tokens_with_fewer_forwards(tiny_engine, threshold: float) -> None:
    lm = tiny_engine.loaded
    cfg = SamplerConfig(strategy="low_confidence_dynamic", threshold=threshold, max_new_tokens=24)
    for runner in (HFRunner(lm.model), StaticRunner(lm.model, use_graphs=False)):
        plain = samplers(lm, runner).generate(prompts(lm), cfg, 4)
        fused = samplers(lm, runner).generate(prompts(lm), cfg.replace(fuse_commit=True), 4)
        assert [r.tokens for r in plain.rows] == [r.tokens for r in fused.rows]
        assert [r.step_map for r in plain.rows] == [r.step_map for r in fused.rows]
        assert fused.num_forwards < plain.num_forwards


def test_static_ar_equals_hf_generate(tiny_engine) -> None:
    lm = tiny_engine.loaded
    p = prompts(lm)[:4]
    hf = ar_generate(lm.model, p, 12, lm.ids.pad, [], ignore_eos=True)
    fast = static_ar_generate(StaticRunner(lm.model, use_graphs=False), p, 12, lm.ids.pad)
    assert hf.tokens == fast.tokens


def test_static_cache_too_small_is_an_error(tiny_engine) -> None:
    lm = tiny_engine.loaded
    runner = StaticRunner(lm.model, use_graphs=False)
    cache = runner.new_cache(1, 8)
    ids = torch.zeros(1, 300, dtype=torch.long)
    mask = torch.zeros(1, 1, 300, 300)
    with pytest.raises(ValueError, match="too small"):
        runner.forward(ids, mask, torch.arange(300)[None], cache)


@pytest.mark.gpu
def test_cuda_graphs_equal_eager_and_hf_on_gpu(tiny_sdar_dir) -> None:
    from cudice.model.loader import load_checkpoint

    lm = load_checkpoint(str(tiny_sdar_dir), device="cuda", dtype="float32")
    cfg = SamplerConfig(strategy="low_confidence_dynamic", threshold=0.3, max_new_tokens=40)
    slow = samplers(lm, HFRunner(lm.model)).generate(prompts(lm), cfg, 4)
    eager = samplers(lm, StaticRunner(lm.model, use_graphs=False)).generate(prompts(lm), cfg, 4)
    graphs_runner = StaticRunner(lm.model, use_graphs=True)
    graphs = samplers(lm, graphs_runner).generate(prompts(lm), cfg, 4)
    assert_same_rows(eager, graphs)
    assert_same_rows(slow, graphs)
    assert graphs_runner._pool and any("graph" in s.extra for c in graphs_runner._pool.values()
                                        for s in c.graphs.values())
    single = [samplers(lm, graphs_runner).generate([p], cfg, 4).rows[0].tokens for p in prompts(lm)]
    assert single == [r.tokens for r in slow.rows]
    fused = samplers(lm, graphs_runner).generate(prompts(lm), cfg.replace(fuse_commit=True), 4)
    assert [r.tokens for r in fused.rows] == [r.tokens for r in slow.rows]
    assert fused.num_forwards < slow.num_forwards
    ar_hf = ar_generate(lm.model, prompts(lm), 16, lm.ids.pad, [], ignore_eos=True)
    ar_fast = static_ar_generate(graphs_runner, prompts(lm), 16, lm.ids.pad)
    assert ar_hf.tokens == ar_fast.tokens
