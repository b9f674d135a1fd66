"""The paged KV cache: page accounting, reservation, write/gather through page tables, and ragged
forwards over it equal to the HF model's own forward (tiny checkpoint, float32)."""

from __future__ import annotations

import pytest
import torch
from cudice.model.paged import PagedKVCache, PoolExhausted
from cudice.model.paged_forward import PagedRunner, Segment
from cudice.model.runner import block_causal_mask


def _cache(num_pages: int = 12, page_size: int = 16) -> PagedKVCache:
    return PagedKVCache(num_layers=2, num_kv_heads=2, head_dim=4, num_pages=num_pages, page_size=page_size)


def test_pages_in_use_are_the_sum_of_real_lengths_and_return_on_free() -> None:
    cache = _cache()
    lengths = {0: 3, 1: 17, 2: 40}
    for seq, n in lengths.items():
        cache.add(seq, 48)
        cache.ensure(seq, n)
    assert cache.pages_in_use == 1 + 2 + 3  # ceil(n / 16) each, not 3 rows x the longest
    assert cache.bytes_in_use == 6 * cache.page_bytes
    assert cache.page_bytes == 2 * 2 * 16 * 2 * 4 * 4  # K+V, layers, page, heads, dim, float32
    assert cache.sequences() == lengths
    cache.ensure(1, 20)  # growing inside a page allocates nothing
    assert cache.pages_in_use == 6
    cache.free(1)
    assert cache.pages_in_use == 4 and 1 not in cache
    cache.free(1)  # a second free is a no-op
    cache.free(0)
    cache.free(2)
    assert cache.pages_in_use == 0 and cache.free_pages == cache.unreserved_pages == cache.num_pages


def test_reservation_bounds_admission_and_growth() -> None:
    cache = _cache(num_pages=4)
    assert cache.can_add(48) and not cache.can_add(80)
    cache.add(0, 48)  # reserves 3 pages, allocates none
    assert cache.pages_in_use == 0 and cache.unreserved_pages == 1
    with pytest.raises(PoolExhausted, match=r"needs 2 pages .* only 1 of 4 are unreserved"):
        cache.add(1, 17)
    with pytest.raises(PoolExhausted, match="past the 48 reserved"):
        cache.ensure(0, 49)
    with pytest.raises(ValueError, match="already in the paged cache"):
        cache.add(0, 1)
    cache.free(0)
    cache.add(1, 64)  # the whole pool is free again
    cache.ensure(1, 64)
    assert cache.pages_in_use == 4


def test_write_and_gather_through_interleaved_pages() -> None:
    torch.manual_seed(0)
    cache = _cache(page_size=4)
    lengths = [6, 11]
    for seq in (0, 1):
        cache.add(seq, 12)
    for n in range(1, 12):  # grow both a slot at a time: their pages interleave in the pool
        for seq, total in enumerate(lengths):
            if n <= total:
                cache.ensure(seq, n)
    assert cache.pages_of(0) == (0, 2) and cache.pages_of(1) == (1, 3, 4)
    table = cache.page_table([0, 1])
    assert table.tolist() == [[0, 2, -1], [1, 3, 4]] and table.dtype == torch.int32
    data = {seq: (torch.randn(n, 2, 4), torch.randn(n, 2, 4)) for seq, n in enumerate(lengths)}
    for seq, (k, v) in data.items():
        cache.write(1, cache.slots(seq, 0, lengths[seq]), k, v)
    index, valid = cache.key_slots([0, 1], lengths)
    assert valid.sum(dim=1).tolist() == lengths
    keys, values = cache.gather(1, index)  # (b, Hkv, K, D)
    for seq, (k, v) in data.items():
        n = lengths[seq]
        assert torch.equal(keys[seq, :, :n], k.transpose(0, 1))
        assert torch.equal(values[seq, :, :n], v.transpose(0, 1))
    assert not cache.keys[0].any()  # other layers untouched


@pytest.fixture(scope="module")
def runner(tiny_engine) -> PagedRunner:
    return PagedRunner(tiny_engine.loaded.model)


def _hf_logits(model, ids: list[int], block: int) -> torch.Tensor:
    x = torch.tensor([ids])
    mask = block_causal_mask(torch.ones(1, len(ids), dtype=torch.bool), block, torch.float32)
    with torch.no_grad():
        return model(input_ids=x, attention_mask=mask, position_ids=torch.arange(len(ids))[None]).logits[0]


def test_ragged_prefill_equals_the_hf_forward_alone(tiny_engine, runner: PagedRunner) -> None:
    model = tiny_engine.loaded.model
    ids = tiny_engine.encode("class ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n")
    prompts = [ids[:12], ids[:5], ids[:20]]
    cache = runner.new_cache(num_pages=16, page_size=4)
    for seq, p in enumerate(prompts):
        cache.add(seq, len(p))
    segments = [Segment(seq, torch.tensor(p), 0, 4, logits=True) for seq, p in enumerate(prompts)]
    out = runner.forward(cache, segments)
    for p, logits in zip(prompts, out, strict=True):
        assert logits is not None
        torch.testing.assert_close(logits, _hf_logits(model, p, 4), atol=1e-4, rtol=1e-4)
    assert cache.pages_in_use == 3 + 2 + 5


def test_a_block_against_the_pages_equals_the_hf_forward(tiny_engine, runner: PagedRunner) -> None:
    """Prefill two sequences, then one forward of a block each at different lengths (one without
    logits): the block's logits equal the uncached forward over prompt + block (block-causal)."""
    model = tiny_engine.loaded.model
    ids = tiny_engine.encode(
        "import torch\nimport torch.nn as nn\nclass Model(nn.Module):\n    def forward(self, a, b):\n"
        "        return a + b\n\ndef get_inputs():\n    return [torch.randn(16, 16384)]\n"
    )
    assert len(ids) >= 28
    prompts, blocks = [ids[:8], ids[:16]], [ids[20:24], ids[24:28]]
    cache = runner.new_cache(num_pages=16, page_size=4)
    for seq, p in enumerate(prompts):
        cache.add(seq, len(p) + 4)
    runner.forward(cache, [Segment(s, torch.tensor(p), 0, 4, logits=False) for s, p in enumerate(prompts)])
    out = runner.forward(
        cache,
        [
            Segment(0, torch.tensor(blocks[0]), 8, 4, logits=True),
            Segment(1, torch.tensor(blocks[1]), 16, 4, logits=False),
        ],
    )
    assert out[1] is None and out[0] is not None
    expected = _hf_logits(model, prompts[0] + blocks[0], 4)[-4:]
    torch.testing.assert_close(out[0], expected, atol=1e-4, rtol=1e-4)
