"""The fast path (static KV cache, fused layer math, CUDA graphs) equals the slow path (HF + DynamicCache).

The compiled runner runs Inductor's CPU backend here (a C++ compiler is needed; ~30 s to compile
on a loaded 2-core box), so the torch.compile path is proven equal on every machine.
"""

from __future__ import annotations

import pytest
import torch
from cudice.model import layers
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


def test_a_cache_over_the_memory_budget_is_not_kept(tiny_engine) -> None:
    lm = tiny_engine.loaded
    cfg = SamplerConfig(strategy="low_confidence_dynamic", threshold=0.3, max_new_tokens=12)
    runner = StaticRunner(lm.model, use_graphs=False, keep_cache_bytes=0)
    fast = samplers(lm, runner).generate(prompts(lm), cfg, 4)
    assert runner._pool == {}  # freed once the sampler drops it
    assert_same_rows(samplers(lm, HFRunner(lm.model)).generate(prompts(lm), cfg, 4), fast)
    kept = StaticRunner(lm.model, use_graphs=False)
    samplers(lm, kept).generate(prompts(lm), cfg, 4)
    assert len(kept._pool) == 1


def test_rows_that_leave_before_any_commit_keep_decoding(tiny_engine) -> None:
    """Prompts shorter than a block have no prefill: rows may leave while the cache is still empty."""
    lm = tiny_engine.loaded
    runner = StaticRunner(lm.model, use_graphs=False)
    cache = runner.new_cache(3, 8)
    runner.select_rows(cache, torch.tensor([0, 2]))
    ids = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 12]])
    mask = torch.zeros(2, 1, 4, 4)
    pos = torch.arange(4).expand(2, -1)
    fast = runner.forward(ids, mask, pos, cache)
    hf = HFRunner(lm.model)
    slow = hf.forward(ids, mask, pos, hf.new_cache(2, 8))
    assert torch.allclose(fast, slow, atol=1e-5)


def test_last_gives_the_logits_of_the_last_tokens_only(tiny_engine) -> None:
    from cudice.model.runner import block_causal_mask, block_query_mask

    lm = tiny_engine.loaded
    ids = torch.tensor([[5, 9, 11, 3, 8, 1, 2, 4], [7, 2, 6, 6, 1, 9, 3, 3]])
    pos = torch.arange(8)[None].expand(2, -1)
    valid = torch.ones(2, 8, dtype=torch.bool)
    dtype = next(lm.model.parameters()).dtype
    for runner in (HFRunner(lm.model), StaticRunner(lm.model, use_graphs=False)):
        outs = []
        for last in (0, 3):
            cache = runner.new_cache(2, 32)
            runner.forward(
                ids[:, :4], block_causal_mask(valid[:, :4], 4, dtype), pos[:, :4], cache, logits=False
            )
            mask = block_query_mask(valid, 4, dtype)
            outs.append(runner.forward(ids[:, 4:], mask, pos[:, 4:], cache, logits=True, last=last).clone())
        assert outs[0].shape[:2] == (2, 4) and outs[1].shape[:2] == (2, 3), type(runner)
        torch.testing.assert_close(outs[1], outs[0][:, 1:])


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


def test_packed_projections_are_views_that_see_weight_updates(tiny_sdar_dir) -> None:
    """A frozen model's q/k/v (gate/up) become views of one tensor per layer: same tokens as the
    unpacked runner and HF, an in-place update of a module's weight is seen, and new storage
    (`model.to(...)`) is packed again."""
    from cudice.model.loader import load_checkpoint

    lm = load_checkpoint(str(tiny_sdar_dir), device="cpu")
    cfg = SamplerConfig(strategy="low_confidence_dynamic", threshold=0.3, max_new_tokens=16)
    unpacked = StaticRunner(lm.model, use_graphs=False)  # parameters require grad: left as they are
    assert not unpacked.pack and len(unpacked._layers[0].attn[1]) == 3
    lm.model.requires_grad_(False)
    packed = StaticRunner(lm.model, use_graphs=False)
    attn = lm.model.model.layers[0].self_attn
    (qkv,) = packed._layers[0].attn[1]
    assert packed.pack and attn.k_proj.weight.data_ptr() == qkv[attn.q_proj.weight.shape[0]].data_ptr()
    slow = samplers(lm, HFRunner(lm.model)).generate(prompts(lm), cfg, 4)
    assert_same_rows(slow, samplers(lm, packed).generate(prompts(lm), cfg, 4))
    assert_same_rows(slow, samplers(lm, unpacked).generate(prompts(lm), cfg, 4))
    with torch.no_grad():  # what an optimiser step or load_state_dict does: in place
        for layer in lm.model.model.layers:
            layer.self_attn.v_proj.weight.mul_(-3.0)
            layer.mlp.up_proj.weight.mul_(2.0)
    changed = samplers(lm, HFRunner(lm.model)).generate(prompts(lm), cfg, 4)
    assert [r.tokens for r in changed.rows] != [r.tokens for r in slow.rows]
    assert_same_rows(changed, samplers(lm, packed).generate(prompts(lm), cfg, 4))
    lm.model.to(torch.float64).to(torch.float32)  # new storage for every parameter
    assert attn.k_proj.weight.data_ptr() != qkv[attn.q_proj.weight.shape[0]].data_ptr()
    assert_same_rows(changed, samplers(lm, packed).generate(prompts(lm), cfg, 4))
    (qkv,) = packed._layers[0].attn[1]
    assert attn.k_proj.weight.data_ptr() == qkv[attn.q_proj.weight.shape[0]].data_ptr()
    # a second runner over the same model shares the packed storage: neither sees its weights move
    # (they would re-pack and re-capture on every forward, each undoing the other's packing)
    other = StaticRunner(lm.model, use_graphs=False)
    assert other._layers[0].attn[1][0].data_ptr() == qkv.data_ptr()
    assert not packed._weights_moved() and not other._weights_moved()
    assert_same_rows(changed, samplers(lm, other).generate(prompts(lm), cfg, 4))
    assert_same_rows(changed, samplers(lm, packed).generate(prompts(lm), cfg, 4))
    assert other._layers[0].attn[1][0].data_ptr() == packed._layers[0].attn[1][0].data_ptr() == qkv.data_ptr()


@pytest.fixture(scope="module")
def compiled_runner(tiny_engine):
    return StaticRunner(tiny_engine.loaded.model, use_graphs=False, compile=True)


@pytest.mark.parametrize("fuse", [False, True])
def test_compiled_runner_equals_hf_runner(tiny_engine, compiled_runner, fuse: bool) -> None:
    lm = tiny_engine.loaded
    cfg = SamplerConfig(strategy="low_confidence_dynamic", threshold=0.3, max_new_tokens=24, fuse_commit=fuse)
    slow = samplers(lm, HFRunner(lm.model)).generate(prompts(lm), cfg, 4)
    fast = samplers(lm, compiled_runner).generate(prompts(lm), cfg, 4)
    assert compiled_runner.compiled and compiled_runner.compile_error is None
    assert_same_rows(slow, fast)


def test_compiled_runner_reuses_its_code_for_new_shapes(tiny_engine, compiled_runner) -> None:
    """The token axis is dynamic: other batch sizes and block sizes run without compiling again."""
    from torch._dynamo.utils import counters

    lm = tiny_engine.loaded
    cfg = SamplerConfig(strategy="low_confidence_dynamic", threshold=0.3, max_new_tokens=12)
    samplers(lm, compiled_runner).generate(prompts(lm)[:3], cfg, 4)  # T >= 2 shapes compiled by now
    graphs_before = counters["stats"]["unique_graphs"]
    assert graphs_before > 0
    for batch, block in ((2, 4), (4, 8), (3, 2)):
        fast = samplers(lm, compiled_runner).generate(prompts(lm)[:batch], cfg, block)
        slow = samplers(lm, HFRunner(lm.model)).generate(prompts(lm)[:batch], cfg, block)
        assert_same_rows(slow, fast)
    assert counters["stats"]["unique_graphs"] == graphs_before


def test_compiled_ar_equals_hf_generate(tiny_engine, compiled_runner) -> None:
    lm = tiny_engine.loaded
    p = prompts(lm)[:4]
    hf = ar_generate(lm.model, p, 12, lm.ids.pad, [], ignore_eos=True)
    assert static_ar_generate(compiled_runner, p, 12, lm.ids.pad).tokens == hf.tokens


def test_prefill_computes_no_padding_tokens(tiny_engine) -> None:
    """Rows of different lengths are prefilled in groups of equal padding, each without its padding."""
    lm = tiny_engine.loaded
    runner = StaticRunner(lm.model, use_graphs=False)
    runner.prefill_pass_tokens = 0  # passes cost nothing: one group per padding, no padding computed
    seen: list[tuple[int, int]] = []
    run = runner._run

    def spy(ids, pos, attend, logits, last=0):
        seen.append(tuple(ids.shape))
        return run(ids, pos, attend, logits, last)

    runner._run = spy
    cfg = SamplerConfig(strategy="low_confidence_dynamic", threshold=0.3, max_new_tokens=8)
    result = samplers(lm, runner).generate(prompts(lm), cfg, 4)
    whole = [n // 4 * 4 for n in LENGTHS]  # the prefill holds whole prompt blocks
    prefill = seen[0 : len({w for w in whole if w})]
    assert sorted(b * n for b, n in prefill) == sorted(
        w * whole.count(w) for w in set(whole) if w
    )  # one forward per length, real tokens only
    assert sum(b * n for b, n in prefill) == sum(whole) < len(LENGTHS) * max(whole)
    slow = samplers(lm, HFRunner(lm.model)).generate(prompts(lm), cfg, 4)
    assert_same_rows(slow, result)


def test_prefill_groups_trade_padding_for_passes() -> None:
    from cudice.model.fastpath import prefill_groups

    pads = [0, 5, 5, 6, 40, 41]  # left padding per row, 48 columns
    assert prefill_groups(pads, 48, 0) == [(0, [0]), (5, [1, 2]), (6, [3]), (40, [4]), (41, [5])]
    assert prefill_groups(pads, 48, 10_000) == [(0, [0, 1, 2, 3, 4, 5])]  # passes dear: one padded pass
    # a middle price: the near paddings share a pass (6 padded tokens), the far rows one of their own
    assert prefill_groups(pads, 48, 30) == [(0, [0, 1, 2, 3]), (40, [4, 5])]
    assert prefill_groups([3, 3, 3], 8, 1536) == [(3, [0, 1, 2])]


def test_a_padded_prefill_pass_gives_the_same_tokens(tiny_engine) -> None:
    lm = tiny_engine.loaded
    runner = StaticRunner(lm.model, use_graphs=False)
    runner.prefill_pass_tokens = 10**6  # one pass over every row, padding included
    cfg = SamplerConfig(strategy="low_confidence_dynamic", threshold=0.3, max_new_tokens=12)
    fast = samplers(lm, runner).generate(prompts(lm), cfg, 4)
    slow = samplers(lm, HFRunner(lm.model)).generate(prompts(lm), cfg, 4)
    assert_same_rows(slow, fast)


def test_a_failing_compiler_falls_back_to_the_same_tokens(tiny_engine, monkeypatch, capsys) -> None:
    lm = tiny_engine.loaded

    def broken(*args, **kwargs):
        raise RuntimeError("inductor exploded")

    monkeypatch.setattr(layers, "compiled", lambda mode: (broken, broken, broken))
    runner = StaticRunner(lm.model, use_graphs=False, compile=True)
    cfg = SamplerConfig(strategy="low_confidence_dynamic", threshold=0.3, max_new_tokens=12)
    fast = samplers(lm, runner).generate(prompts(lm), cfg, 4)
    slow = samplers(lm, HFRunner(lm.model)).generate(prompts(lm), cfg, 4)
    assert_same_rows(slow, fast)
    assert not runner.compiled and "inductor exploded" in (runner.compile_error or "")
    assert "torch.compile failed" in capsys.readouterr().err


@pytest.mark.gpu
def test_compiled_cuda_graphs_equal_eager_on_gpu(tiny_sdar_dir) -> None:
    from cudice.model.loader import load_checkpoint

    lm = load_checkpoint(str(tiny_sdar_dir), device="cuda", dtype="float32")
    cfg = SamplerConfig(strategy="low_confidence_dynamic", threshold=0.3, max_new_tokens=40)
    eager = samplers(lm, StaticRunner(lm.model, use_graphs=False)).generate(prompts(lm), cfg, 4)
    runner = StaticRunner(lm.model, use_graphs=True, compile=True)
    for fuse in (False, True):
        fast = samplers(lm, runner).generate(prompts(lm), cfg.replace(fuse_commit=fuse), 4)
        assert runner.compiled, runner.compile_error
        assert [r.tokens for r in fast.rows] == [r.tokens for r in eager.rows]
    assert (
        static_ar_generate(runner, prompts(lm), 16, lm.ids.pad).tokens
        == ar_generate(lm.model, prompts(lm), 16, lm.ids.pad, [], ignore_eos=True).tokens
    )


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
    assert graphs_runner._pool and any(
        "graph" in s.extra for c in graphs_runner._pool.values() for s in c.graphs.values()
    )
    single = [samplers(lm, graphs_runner).generate([p], cfg, 4).rows[0].tokens for p in prompts(lm)]
    assert single == [r.tokens for r in slow.rows]
    fused = samplers(lm, graphs_runner).generate(prompts(lm), cfg.replace(fuse_commit=True), 4)
    assert [r.tokens for r in fused.rows] == [r.tokens for r in slow.rows]
    assert fused.num_forwards < slow.num_forwards
    ar_hf = ar_generate(lm.model, prompts(lm), 16, lm.ids.pad, [], ignore_eos=True)
    ar_fast = static_ar_generate(graphs_runner, prompts(lm), 16, lm.ids.pad)
    assert ar_hf.tokens == ar_fast.tokens


def test_engine_takes_the_fast_path_where_a_gpu_is_or_when_asked(tiny_engine) -> None:
    from cudice.model.engine import Engine

    lm = tiny_engine.loaded
    assert isinstance(Engine(lm).runner, HFRunner)  # CPU, default: the reference path
    forced = Engine(lm, fast=True).runner
    assert (
        isinstance(forced, StaticRunner) and not forced.compiled
    )  # compiling on a CPU costs more than it saves
    assert isinstance(Engine(lm, fast=False).runner, HFRunner)


def test_engine_warm_up_compiles_the_request_shapes_ahead(tiny_engine, compiled_runner) -> None:
    from cudice.model.engine import Engine

    Engine(tiny_engine.loaded, runner=compiled_runner).warm_up()
    assert {(1, 4), (1, 8)} <= set(compiled_runner.warmup_seconds)  # denoise and fused forwards of one row
    eager = StaticRunner(tiny_engine.loaded.model, use_graphs=False)
    Engine(tiny_engine.loaded, runner=eager).warm_up()
    assert eager.warmup_seconds == {}  # nothing to compile: no forward
