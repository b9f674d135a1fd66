"""The block-diffusion objective and the BiC-RL replay, on a tiny real Qwen3."""

from __future__ import annotations

import pytest
import torch
from cudice.model.train.objective import (
    add_noise,
    block_diffusion_mask,
    clipped_policy_loss,
    forward_doubled,
    group_advantages,
    replay_rows,
    sft_loss,
    token_logprobs,
)
from train_helpers import MASK_ID, PAD_ID, tiny_model


def test_mask_matches_the_three_rules() -> None:
    L, B = 8, 4
    allowed = block_diffusion_mask(L, B)[0, 0] == 0  # (2L, 2L)
    blk = [i // B for i in range(L)]
    for q in range(2 * L):
        for k in range(2 * L):
            qn, kn = q < L, k < L
            bq, bk = blk[q % L], blk[k % L]
            if qn and kn:
                want = bq == bk
            elif qn and not kn:
                want = bk < bq
            elif not qn and kn:
                want = False
            else:
                want = bk <= bq
            assert bool(allowed[q, k]) == want, (q, k)


def test_noise_never_touches_the_prompt_and_masks_at_least_one() -> None:
    ids = torch.arange(2 * 16).reshape(2, 16) % 90
    loss_mask = torch.zeros(2, 16, dtype=torch.bool)
    loss_mask[:, 10:] = True
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        n = add_noise(ids, loss_mask, MASK_ID, g, min_rate=1e-6)
        assert not n.is_masked[:, :10].any()
        assert n.is_masked.any(dim=1).all()
        assert torch.equal(n.noisy[~n.is_masked], ids[~n.is_masked])
        assert (n.noisy[n.is_masked] == MASK_ID).all()


def test_clean_half_is_causal_by_block_and_blind_to_the_noisy_half() -> None:
    """Changing noisy tokens must not move the clean half's logits; the noisy block sees its peers."""
    model = tiny_model().eval()
    clean = torch.randint(0, 90, (1, 8))
    noisy_a, noisy_b = clean.clone(), clean.clone()
    noisy_b[0, 5] = MASK_ID
    mask = block_diffusion_mask(8, 4)
    pos = torch.cat([torch.arange(8), torch.arange(8)])[None]
    out_a = model(torch.cat([noisy_a, clean], 1), attention_mask=mask, position_ids=pos).logits
    out_b = model(torch.cat([noisy_b, clean], 1), attention_mask=mask, position_ids=pos).logits
    assert torch.allclose(out_a[:, 8:], out_b[:, 8:])  # clean half unaffected
    assert torch.allclose(out_a[:, :4], out_b[:, :4])  # noisy block 0 does not see block 1
    assert not torch.allclose(out_a[:, 4:8], out_b[:, 4:8])  # block 1 is bidirectional


def test_noisy_half_matches_a_plain_block_forward() -> None:
    """Noisy block b over clean blocks < b equals running [clean < b ; noisy b] alone."""
    model = tiny_model().eval()
    clean = torch.randint(0, 90, (1, 8))
    noisy = clean.clone()
    noisy[0, 4:7] = MASK_ID
    logits = forward_doubled(model, noisy, clean, block_size=4)
    direct = model(
        torch.cat([clean[:, :4], noisy[:, 4:]], 1)[:, :8], attention_mask=_block_causal(8, 4)
    ).logits
    assert torch.allclose(logits[:, 4:], direct[:, 4:], atol=1e-5)


def test_starting_the_noisy_half_later_keeps_every_kept_logit_and_the_sft_loss() -> None:
    torch.manual_seed(0)
    model = tiny_model().eval()
    clean = torch.randint(0, 90, (2, 16))
    noisy = clean.clone()
    noisy[:, 2:] = torch.where(torch.rand(2, 14) < 0.5, MASK_ID, clean[:, 2:])  # masks before start too
    with torch.no_grad():
        full = forward_doubled(model, noisy, clean, 4)
        late = forward_doubled(model, noisy, clean, 4, start=8)
    assert late.shape == (2, 8, full.shape[-1])
    keep = torch.cat([torch.arange(8, 16), torch.arange(16, 32)])  # the full mask's kept rows/columns
    assert torch.equal(
        block_diffusion_mask(16, 4, start=8), block_diffusion_mask(16, 4)[:, :, keep][:, :, :, keep]
    )
    assert torch.allclose(late, full[:, 8:], atol=1e-5)
    with pytest.raises(ValueError, match="multiple of the block size"):
        forward_doubled(model, noisy, clean, 4, start=6)
    with pytest.raises(ValueError, match="below 16"):
        forward_doubled(model, noisy, clean, 4, start=16)
    # the loss starts at the batch's first answer block (row 0's answer at 6: block 4) by itself
    loss_mask = torch.zeros(2, 16, dtype=torch.bool)
    loss_mask[0, 6:], loss_mask[1, 9:] = True, True
    noised = add_noise(clean, loss_mask, MASK_ID, torch.Generator().manual_seed(6))
    assert noised.is_masked[0, 6:8].all()  # terms in the first answer block
    weight = torch.rand(2, 16) + 0.5
    kw = {"block_size": 4, "mask_token_id": MASK_ID, "noised": noised, "token_weight": weight}
    with torch.no_grad():
        whole, whole_stats = sft_loss(model, clean, loss_mask, answer_start=0, **kw)
        derived, stats = sft_loss(model, clean, loss_mask, **kw)
        given, _ = sft_loss(model, clean, loss_mask, answer_start=6, **kw)
        too_late, _ = sft_loss(model, clean, loss_mask, answer_start=8, **kw)  # a wrong start drops terms
    assert whole > 0 and too_late < whole - 1e-3
    assert torch.allclose(derived, whole, rtol=1e-5) and torch.allclose(given, whole, rtol=1e-5)
    assert torch.allclose(stats["masked_ce"], whole_stats["masked_ce"], rtol=1e-5)


def test_the_sft_loss_through_compiled_layers_equals_the_eager_loss_and_gradients() -> None:
    """`fit --compile-layers` compiles the decoder layers (`compile_replay_layers`); "aot_eager"
    traces the same graphs, autograd included, without code generation."""
    import copy

    from cudice.model.train.objective import compile_replay_layers

    torch.manual_seed(0)
    eager = tiny_model()
    compiled = copy.deepcopy(eager)
    assert compile_replay_layers(compiled, backend="aot_eager") > 0
    for length in (16, 24):  # a second batch length: the dynamic graph serves it
        ids = torch.randint(0, 90, (2, length))
        loss_mask = torch.zeros(2, length, dtype=torch.bool)
        loss_mask[0, 5:], loss_mask[1, 9:] = True, True
        noised = add_noise(ids, loss_mask, MASK_ID, torch.Generator().manual_seed(length))
        kw = {"block_size": 4, "mask_token_id": MASK_ID, "noised": noised}
        losses = []
        for model in (eager, compiled):
            model.zero_grad()
            loss, _ = sft_loss(model, ids, loss_mask, **kw)
            loss.backward()
            losses.append(loss.detach())
        assert torch.allclose(losses[0], losses[1], rtol=1e-4)
        for (name, a), b in zip(eager.named_parameters(), compiled.parameters(), strict=True):
            assert torch.allclose(a.grad, b.grad, rtol=1e-3, atol=1e-5), name


def _block_causal(length: int, block: int) -> torch.Tensor:
    blk = torch.arange(length) // block
    allowed = blk[None, :] <= blk[:, None]
    m = torch.zeros(length, length)
    m.masked_fill_(~allowed, torch.finfo(torch.float32).min)
    return m[None, None]


def test_a_token_weight_scales_only_its_own_term_of_the_sft_loss() -> None:
    torch.manual_seed(0)
    model = tiny_model().eval()
    ids = torch.randint(0, 90, (2, 16))
    loss_mask = torch.zeros(2, 16, dtype=torch.bool)
    loss_mask[:, 6:] = True
    noised = add_noise(ids, loss_mask, MASK_ID, torch.Generator().manual_seed(1))
    row, col = noised.is_masked.nonzero().tolist()[0]
    kw = {"block_size": 4, "mask_token_id": MASK_ID, "noised": noised}
    with torch.no_grad():
        plain, _ = sft_loss(model, ids, loss_mask, **kw)
        ones, _ = sft_loss(model, ids, loss_mask, token_weight=torch.ones(2, 16), **kw)
        weight = torch.ones(2, 16)
        weight[row, col] = 5.0
        heavy, _ = sft_loss(model, ids, loss_mask, token_weight=weight, **kw)
        weight[row, col], weight[1 - row, 0] = 1.0, 9.0  # a prompt position: never a term
        prompt_weighted, _ = sft_loss(model, ids, loss_mask, token_weight=weight, **kw)
        alone = torch.zeros(2, 16)
        alone[row, col] = 1.0
        term, _ = sft_loss(model, ids, loss_mask, token_weight=alone, **kw)
    assert torch.allclose(plain, ones)
    assert torch.allclose(prompt_weighted, plain)
    # weight 5 on one term adds four more copies of that term (the term alone: every other weight 0)
    assert term > 0 and torch.allclose(heavy - plain, 4 * term, rtol=1e-4)


def test_sft_steps_lower_the_loss_and_train_every_parameter() -> None:
    model = tiny_model()
    ids = torch.randint(0, 90, (2, 16))
    loss_mask = torch.zeros(2, 16, dtype=torch.bool)
    loss_mask[:, 6:] = True
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for step in range(30):
        loss, _ = sft_loss(
            model,
            ids,
            loss_mask,
            block_size=4,
            mask_token_id=MASK_ID,
            generator=torch.Generator().manual_seed(step),
        )
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert sum(losses[-5:]) / 5 < 0.5 * sum(losses[:5]) / 5
    unchanged = [n for n, p in model.named_parameters() if torch.equal(p, before[n])]
    assert unchanged == []


def test_replay_rows_follow_the_reveal_order_per_block() -> None:
    prompt = [1, 2, 3, 4, 5, 6]  # blocks of 4: the prompt tail (5, 6) shares block 1
    response = [10, 11, 12, 13, 14]  # positions 6..10
    step_map = [0, 0, 1, 2, 1]  # block 1 has positions 6,7 (steps 0,0); block 2: 8,9,10 (1,2,1)
    rows = replay_rows(prompt, response, step_map, block_size=4, mask_token_id=MASK_ID, pad_token_id=PAD_ID)
    assert rows.clean.shape == (2, 12)
    assert rows.clean[0].tolist() == [1, 2, 3, 4, 5, 6, 10, 11, 12, 13, 14, PAD_ID]
    # Round 0: everything of the response masked; targets = the earliest reveal of each block.
    assert rows.noisy[0].tolist() == [1, 2, 3, 4, 5, 6] + [MASK_ID] * 5 + [PAD_ID]
    assert rows.targets[0].nonzero().flatten().tolist() == [6, 7, 8, 10]
    # Round 1: block 2 keeps only the step-2 token masked.
    assert rows.noisy[1].tolist() == [1, 2, 3, 4, 5, 6, 10, 11, 12, MASK_ID, 14, PAD_ID]
    assert rows.targets[1].nonzero().flatten().tolist() == [9]
    # Every response token is a target exactly once; prompt and pad never.
    assert rows.targets.sum(0).tolist() == [0] * 6 + [1] * 5 + [0]


def test_replay_rejects_a_step_map_of_the_wrong_length() -> None:
    with pytest.raises(ValueError, match="step_map has 2 entries for 3 response tokens"):
        replay_rows([1], [2, 3, 4], [0, 1], block_size=4, mask_token_id=MASK_ID, pad_token_id=PAD_ID)


def test_policy_loss_is_ppo_clip_with_k3() -> None:
    targets = torch.tensor([[True, True, False]])
    old = torch.log(torch.tensor([[0.5, 0.5, 0.5]]))
    same = clipped_policy_loss(old.clone(), old, torch.tensor([1.0]), targets, 2, 0.2, 0.01)[0]
    assert same.item() == pytest.approx(-1.0)  # ratio 1, advantage 1, two targets / length 2
    up = torch.log(torch.tensor([[0.9, 0.9, 0.9]]))  # ratio 1.8 -> clipped at 1.2 for A>0
    loss, stats = clipped_policy_loss(up, old, torch.tensor([1.0]), targets, 2, 0.2, 0.0)
    assert loss.item() == pytest.approx(-1.2)
    assert stats["clip_fraction"] == 1.0
    neg, _ = clipped_policy_loss(up, old, torch.tensor([-1.0]), targets, 2, 0.2, 0.0)
    assert neg.item() == pytest.approx(1.8)  # min picks the unclipped, more pessimistic term


def test_rl_logprobs_train_toward_positive_advantage() -> None:
    model = tiny_model()
    rows = replay_rows(
        [1, 2, 3],
        [20, 21, 22, 23, 24],
        [0, 1, 0, 1, 2],
        block_size=4,
        mask_token_id=MASK_ID,
        pad_token_id=PAD_ID,
    )
    with torch.no_grad():
        old = token_logprobs(model, rows, 4)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(5):
        new = token_logprobs(model, rows, 4)
        loss, _ = clipped_policy_loss(new, old, torch.ones(rows.clean.shape[0]), rows.targets, 5, 0.2, 0.01)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        after = token_logprobs(model, rows, 4)
    assert (after[rows.targets].sum() > old[rows.targets].sum()).item()


def test_group_advantages_zscore_and_drop_flat_groups() -> None:
    adv, keep = group_advantages([1, 0, 1, 0, 1, 1, 1, 1], group_size=4)
    assert adv[:4] == pytest.approx([1, -1, 1, -1])
    assert keep == [True] * 4 + [False] * 4
    with pytest.raises(ValueError, match="do not split into groups of 3"):
        group_advantages([1, 0], 3)
