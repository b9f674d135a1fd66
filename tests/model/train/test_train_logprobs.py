"""`token_logprobs` reads the LM head at the target positions only, and equals the full
(R, L, V) log-softmax there — values and gradients — on a tiny random model in fp32."""

from __future__ import annotations

import torch
from cudice.model.train.objective import ReplayRows, forward_doubled, replay_rows, token_logprobs
from train_helpers import MASK_ID, PAD_ID, tiny_model


def _full_path(model: torch.nn.Module, rows: ReplayRows, block_size: int) -> torch.Tensor:
    """The former computation: fp32 logits and log-softmax at every position of every row."""
    logits = forward_doubled(model, rows.noisy, rows.clean, block_size)  # (R, L, V)
    logp = torch.log_softmax(logits.float(), dim=-1)
    return logp.gather(-1, rows.clean[..., None]).squeeze(-1)


def _rows() -> ReplayRows:
    g = torch.Generator().manual_seed(3)
    response = torch.randint(0, 90, (11,), generator=g).tolist()
    steps = torch.randint(0, 4, (11,), generator=g).tolist()
    return replay_rows(
        [1, 2, 3, 4, 5], response, steps, block_size=4, mask_token_id=MASK_ID, pad_token_id=PAD_ID
    )


def test_target_only_logprobs_equal_the_full_path_with_their_gradient() -> None:
    model = tiny_model(seed=1).float()
    rows = _rows()
    assert rows.clean.shape[0] > 2 and rows.targets.sum() == 11  # every response token once
    advantage = torch.linspace(-1.0, 1.0, rows.clean.shape[0])[:, None]

    def grads(fn) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        model.zero_grad(set_to_none=True)
        logp = fn(model, rows, 4)
        ((logp * rows.targets) * advantage).sum().backward()
        return logp.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    new, new_grads = grads(token_logprobs)
    old, old_grads = grads(_full_path)
    assert new.shape == old.shape == rows.clean.shape
    torch.testing.assert_close(new[rows.targets], old[rows.targets], rtol=0, atol=1e-6)
    assert (new[~rows.targets] == 0).all()  # nothing computed off the targets
    assert new_grads.keys() == old_grads.keys() and len(new_grads) == len(list(model.parameters()))
    for name, grad in new_grads.items():
        torch.testing.assert_close(grad, old_grads[name], rtol=0, atol=1e-6, msg=name)


def test_the_head_sees_the_targets_only() -> None:
    """The LM head's output is (targets, V) — the response's length — where the full path's was
    (R, L, V): every row's every position."""
    model = tiny_model(seed=2)
    rows = _rows()
    seen: list[tuple[int, ...]] = []
    handle = model.get_output_embeddings().register_forward_hook(
        lambda mod, args, out: seen.append(tuple(out.shape))
    )
    try:
        with torch.no_grad():
            token_logprobs(model, rows, 4)
            _full_path(model, rows, 4)
    finally:
        handle.remove()
    num_rows, length = rows.clean.shape
    assert seen == [(11, 100), (num_rows, length, 100)]


def test_the_causal_lm_s_own_logits_slicing_is_not_relied_on(monkeypatch) -> None:
    """transformers releases disagree on a 2-D `logits_to_keep` (the GPU image's indexes
    `hidden[:, keep, :]` and raises), so the backbone and the head are called directly: the same
    values with the causal LM's own forward unusable, and a model without them is named."""
    model = tiny_model(seed=4).float()
    rows = _rows()
    with torch.no_grad():
        expected = token_logprobs(model, rows, 4)

        def broken(*args, **kwargs):
            raise IndexError("too many indices for tensor of dimension 3")

        monkeypatch.setattr(model, "forward", broken)
        torch.testing.assert_close(token_logprobs(model, rows, 4), expected, rtol=0, atol=0)
        try:
            token_logprobs(torch.nn.Linear(2, 2), rows, 4)
        except TypeError as exc:
            assert "get_decoder" in str(exc) and "Linear" in str(exc)
        else:
            raise AssertionError("a module without a backbone and head was accepted")
