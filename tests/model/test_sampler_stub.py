"""The block-diffusion loop pinned exactly with a stub model (scripted logits, recorded cache ops)."""

from __future__ import annotations

import pytest
import torch
from cudice.model.config import SamplerConfig
from cudice.model.runner import block_causal_mask, block_query_mask
from cudice.model.sampler import BlockDiffusionSampler
from model_stub import StubRunner, char_decode, text_target

MASK, PAD, EOS = 1, 0, 4
VOCAB = 128


def sampler(runner: StubRunner) -> BlockDiffusionSampler:
    return BlockDiffusionSampler(runner, mask_id=MASK, pad_id=PAD, stop_ids=[EOS], decode=char_decode)


def prompt(n: int) -> list[int]:
    return [ord("p")] * n


def block_confidence(values: list[float], block_length: int = 4):
    return lambda p: values[p % block_length]


def test_commit_and_crop_sequence_with_prompt_tail_in_first_block() -> None:
    runner = StubRunner(VOCAB, text_target(6, "0123456789abcdef"))
    cfg = SamplerConfig(strategy="sequential", denoising_steps=4, max_new_tokens=10)
    out = sampler(runner).generate([prompt(6)], cfg, block_length=4)

    # prefill the one whole prompt block; block 1 holds the 2-token prompt tail + 2 masks
    # (quota 1,1,0,0 -> two denoise steps); blocks 2 and 3 need 4 steps each.
    # The commit forward keeps its K/V and needs no logits. The cache is sized for the prompt's
    # whole blocks + enough blocks for tail + max_new_tokens + one spare block: 4 + 4 * 4.
    expected = [("new_cache", 1, 20), ("forward-no-logits", 4, 0)]
    expected += [("forward", 4, 4), ("crop", 4)] * 2 + [("forward-no-logits", 4, 4)]
    expected += [("forward", 4, 8), ("crop", 8)] * 4 + [("forward-no-logits", 4, 8)]
    expected += [("forward", 4, 12), ("crop", 12)] * 4 + [("forward-no-logits", 4, 12)]
    assert runner.events == expected
    row = out.rows[0]
    assert row.text == "0123456789"
    assert row.step_map == tuple(range(10))
    assert row.finish_reason == "length"
    assert out.num_forwards == 14


def test_static_reveals_most_confident_first() -> None:
    runner = StubRunner(VOCAB, text_target(4, "WXYZ"), block_confidence([0.5, 0.9, 0.7, 0.6]))
    cfg = SamplerConfig(strategy="low_confidence_static", denoising_steps=4, max_new_tokens=4)
    row = sampler(runner).generate([prompt(4)], cfg, block_length=4).rows[0]
    assert row.text == "WXYZ"
    assert row.step_map == (3, 0, 1, 2)


def test_static_with_two_steps_reveals_two_per_step() -> None:
    runner = StubRunner(VOCAB, text_target(4, "WXYZ"), block_confidence([0.5, 0.9, 0.7, 0.6]))
    cfg = SamplerConfig(strategy="low_confidence_static", denoising_steps=2, max_new_tokens=4)
    out = sampler(runner).generate([prompt(4)], cfg, block_length=4)
    assert out.rows[0].step_map == (1, 0, 0, 1)
    assert out.num_forwards == 1 + 2 + 1


def test_dynamic_reveals_everything_above_threshold_then_falls_back_to_quota() -> None:
    runner = StubRunner(VOCAB, text_target(4, "WXYZ"), block_confidence([0.95, 0.5, 0.85, 0.99]))
    cfg = SamplerConfig(strategy="low_confidence_dynamic", threshold=0.8, max_new_tokens=4)
    out = sampler(runner).generate([prompt(4)], cfg, block_length=4)
    assert out.rows[0].step_map == (0, 1, 0, 0)
    assert out.num_forwards == 1 + 2 + 1


def test_dynamic_below_threshold_goes_one_per_step() -> None:
    runner = StubRunner(VOCAB, text_target(4, "WXYZ"), block_confidence([0.85, 0.85, 0.95, 0.85]))
    cfg = SamplerConfig(strategy="low_confidence_dynamic", threshold=0.9, max_new_tokens=4)
    out = sampler(runner).generate([prompt(4)], cfg, block_length=4)
    # only slot 2 clears 0.9; the rest go one per step (quota 1), left-most first among equals
    assert out.rows[0].step_map == (1, 2, 0, 3)


def test_dynamic_with_confident_model_needs_one_step_per_block() -> None:
    runner = StubRunner(VOCAB, text_target(4, "abcdefghijklmnop"), lambda p: 0.99)
    cfg = SamplerConfig(strategy="low_confidence_dynamic", threshold=0.9, max_new_tokens=16)
    out = sampler(runner).generate([prompt(4)], cfg, block_length=4)
    assert out.rows[0].text == "abcdefghijklmnop"
    assert out.rows[0].step_map == (0,) * 4 + (1,) * 4 + (2,) * 4 + (3,) * 4
    assert out.num_forwards == 1 + 4 * 2  # prefill + (denoise + commit) per block
    assert out.num_tokens / out.num_forwards == pytest.approx(16 / 9)


def test_eos_trims_the_block_and_ends_generation() -> None:
    runner = StubRunner(VOCAB, text_target(4, "abcdAB\x04CDEFG"))
    cfg = SamplerConfig(strategy="sequential", max_new_tokens=100)
    out = sampler(runner).generate([prompt(4)], cfg, block_length=4)
    row = out.rows[0]
    assert row.text == "abcdAB" and row.finish_reason == "eos"
    assert len(row.step_map) == 6
    # two blocks decoded (4 steps + commit each), nothing after the block holding EOS
    assert out.num_forwards == 1 + 5 + 5
    assert runner.events[-1] == ("forward-no-logits", 4, 8)


def test_stop_string_cuts_text_and_keeps_tokens_up_to_it() -> None:
    runner = StubRunner(VOCAB, text_target(4, 'int x;\n"""\nrest of file'))
    cfg = SamplerConfig(strategy="sequential", max_new_tokens=100, stop_strings=('"""',))
    row = sampler(runner).generate([prompt(4)], cfg, block_length=4).rows[0]
    assert row.text == "int x;\n"
    assert row.finish_reason == "stop_string"
    assert char_decode(row.tokens) == 'int x;\n"""'


def test_max_new_tokens_trims_mid_block() -> None:
    runner = StubRunner(VOCAB, text_target(4, "abcdefgh"))
    row = sampler(runner).generate([prompt(4)], SamplerConfig(max_new_tokens=3), block_length=4).rows[0]
    assert row.text == "abc" and row.finish_reason == "length" and len(row.step_map) == 3


def test_cancellation_stops_before_the_next_forward() -> None:
    runner = StubRunner(VOCAB, text_target(4, "abcdefgh"))
    forwards = lambda: sum(1 for e in runner.events if e[0].startswith("forward"))  # noqa: E731
    cfg = SamplerConfig(strategy="sequential", max_new_tokens=100)
    out = sampler(runner).generate([prompt(4)], cfg, block_length=4, should_stop=lambda: forwards() >= 3)
    assert out.num_forwards == 3  # prefill + 2 denoise steps, then stopped
    assert out.rows[0].finish_reason == "cancelled"
    assert out.rows[0].tokens == ()  # the unfinished block is not committed


def test_streaming_callback_after_each_committed_block() -> None:
    runner = StubRunner(VOCAB, text_target(4, "abcdefghij\x04"))
    seen: list[tuple[str, int]] = []
    cfg = SamplerConfig(strategy="sequential", max_new_tokens=100)
    sampler(runner).generate(
        [prompt(4)], cfg, block_length=4, on_block=lambda rows, n: seen.append((char_decode(rows[0]), n))
    )
    assert seen == [("abcd", 6), ("abcdefgh", 11), ("abcdefghij", 16)]


def position_target(p: int) -> int:
    return EOS if p == 13 else ord("a") + p % 26


def test_batch_rows_equal_single_runs_and_finished_rows_leave_the_batch() -> None:
    prompts = [prompt(9), prompt(2), prompt(5)]
    conf = block_confidence([0.6, 0.95, 0.7, 0.92])
    cfg = SamplerConfig(strategy="low_confidence_dynamic", threshold=0.9, max_new_tokens=30)
    singles = [
        sampler(StubRunner(VOCAB, position_target, conf)).generate([p], cfg, 4).rows[0] for p in prompts
    ]
    runner = StubRunner(VOCAB, position_target, conf)
    batch = sampler(runner).generate(prompts, cfg, 4)
    assert batch.rows == tuple(singles)
    assert [r.finish_reason for r in batch.rows] == ["eos"] * 3
    # left padding 0, 8, 4: position 13 (EOS) sits in physical block 12 for row 0, 20 for row 1 and
    # 16 for row 2, so row 0 leaves after the second block and row 2 after the third
    assert [e for e in runner.events if e[0] == "select"] == [("select", (1, 2)), ("select", (0,))]
    assert runner.events[1] == ("forward-no-logits", 8, 0)  # prefill: rows padded to 8 columns


def test_prefill_mask_is_block_causal_and_hides_padding() -> None:
    valid = torch.tensor([[True] * 8, [False] * 4 + [True] * 4])
    m = block_causal_mask(valid, 4, torch.float32)  # (2, 1, 8, 8)
    allowed = m == 0
    assert allowed[0, 0, 1, 3] and not allowed[0, 0, 1, 4] and allowed[0, 0, 5, 0]
    assert not allowed[1, 0, 5, 0] and allowed[1, 0, 5, 7]
    assert allowed[1, 0, 2].tolist() == [False, False, True, False, False, False, False, False]
    q = block_query_mask(torch.cat([valid, torch.ones(2, 4, dtype=torch.bool)], 1), 4, torch.float32)
    assert q.shape == (2, 1, 4, 12)
    assert (q[1, 0, :, :4] < 0).all() and (q[1, 0, :, 4:] == 0).all()


def test_fused_commit_rides_along_with_the_next_blocks_first_step() -> None:
    runner = StubRunner(VOCAB, text_target(6, "0123456789"), lambda p: 0.99)
    cfg = SamplerConfig(strategy="low_confidence_dynamic", threshold=0.9, max_new_tokens=10, fuse_commit=True)
    out = sampler(runner).generate([prompt(6)], cfg, block_length=4)
    assert runner.events == [
        ("new_cache", 1, 20),
        ("forward-no-logits", 4, 0),
        ("forward", 4, 4),
        ("crop", 4),  # block 1 (prompt tail + 2 masks), one step
        ("forward", 8, 4),
        ("crop", 8),  # commit block 1 + block 2's step; keep block 1's K/V
        ("forward", 8, 8),
        ("crop", 12),  # commit block 2 + block 3's step
    ]  # block 3 is never committed: generation ended
    assert out.rows[0].text == "0123456789"
    assert out.num_forwards == 4
    unfused = sampler(StubRunner(VOCAB, text_target(6, "0123456789"), lambda p: 0.99)).generate(
        [prompt(6)], cfg.replace(fuse_commit=False), block_length=4
    )
    assert unfused.rows == out.rows and unfused.num_forwards == 7
