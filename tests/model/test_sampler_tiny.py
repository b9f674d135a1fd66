"""The cached, batched sampler on a tiny real Qwen3: equal to an uncached reference, batch == single."""

from __future__ import annotations

import pytest
from cudice.model.config import SamplerConfig
from model_reference import reference_generate

TEXT = "import torch\nclass Model(nn.Module):\n    def forward(self, a, b):\n        return a + b\n"
LENGTHS = (9, 14, 1, 7, 8)  # every remainder mod the block length 4, and a prompt shorter than a block


@pytest.fixture(scope="module")
def encoded(tiny_engine):
    ids = tiny_engine.encode(TEXT)
    assert len(ids) >= max(LENGTHS)
    return [ids[:n] for n in LENGTHS]


@pytest.mark.parametrize("strategy", ["low_confidence_static", "low_confidence_dynamic", "sequential"])
def test_cached_sampler_equals_uncached_reference(tiny_engine, encoded, strategy: str) -> None:
    cfg = SamplerConfig(strategy=strategy, denoising_steps=4, threshold=0.3, max_new_tokens=20)
    lm = tiny_engine.loaded
    for prompt in encoded:
        out = tiny_engine.sampler.generate([prompt], cfg, block_length=4)
        ref_tokens, ref_steps, ref_forwards = reference_generate(
            lm.model, prompt, cfg, 4, lm.ids.mask, lm.ids.stop
        )
        row = out.rows[0]
        assert list(row.tokens) == ref_tokens
        assert list(row.step_map) == ref_steps
        commits = -(-(len(prompt) % 4 + len(ref_tokens)) // 4)  # blocks decoded
        assert out.num_forwards == ref_forwards + commits + (1 if len(prompt) >= 4 else 0)


def test_dynamic_threshold_changes_the_schedule_on_the_real_model(tiny_engine, encoded) -> None:
    low = tiny_engine.sampler.generate(encoded[:1], SamplerConfig(threshold=0.0, max_new_tokens=16), 4)
    high = tiny_engine.sampler.generate(encoded[:1], SamplerConfig(threshold=1.0, max_new_tokens=16), 4)
    assert set(low.rows[0].step_map) != set(high.rows[0].step_map)
    assert low.num_forwards < high.num_forwards  # threshold 0 reveals a whole block per step


@pytest.mark.parametrize("strategy", ["low_confidence_static", "low_confidence_dynamic"])
def test_batch_equals_single(tiny_engine, encoded, strategy: str) -> None:
    cfg = SamplerConfig(strategy=strategy, threshold=0.3, max_new_tokens=24)
    singles = [tiny_engine.sampler.generate([p], cfg, 4).rows[0] for p in encoded]
    batch = tiny_engine.sampler.generate(encoded, cfg, 4)
    assert [r.tokens for r in batch.rows] == [r.tokens for r in singles]
    assert [r.step_map for r in batch.rows] == [r.step_map for r in singles]


def test_sampling_with_a_seed_is_reproducible_and_seeds_differ(tiny_engine, encoded) -> None:
    cfg = SamplerConfig(temperature=1.0, top_k=50, top_p=0.95, seed=1, max_new_tokens=16)
    a = tiny_engine.sampler.generate(encoded[:1], cfg, 4).rows[0].tokens
    b = tiny_engine.sampler.generate(encoded[:1], cfg, 4).rows[0].tokens
    c = tiny_engine.sampler.generate(encoded[:1], cfg.replace(seed=2), 4).rows[0].tokens
    assert a == b and a != c
