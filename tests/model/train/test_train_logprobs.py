"""`token_logprobs` reads the LM head at the target positions only, and equals the full
(R, L, V) log-softmax there — values and gradients — on a tiny random model in fp32."""

from __future__ import annotations

import pytest
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
    # the model's own (unused) logits at one position, the targets', then the full path's
    assert seen == [(num_rows, 1, 100), (11, 100), (num_rows, length, 100)]


def test_a_wrapped_model_runs_through_its_wrapper_and_a_bare_module_is_named() -> None:
    """DDP and FSDP synchronise gradients in their own forward, so the wrapper's forward runs once
    (the head is applied to the backbone's output outside it: transformers releases disagree on a
    2-D `logits_to_keep`), with the values of the bare model; a model without backbone and head is
    named, not guessed at."""

    class Wrapper(torch.nn.Module):  # the shape of DistributedDataParallel: `.module`, forward passes on
        def __init__(self, module: torch.nn.Module) -> None:
            super().__init__()
            self.module, self.calls = module, 0

        def forward(self, **kwargs):
            self.calls += 1
            return self.module(**kwargs)

    model = tiny_model(seed=4).float()
    rows = _rows()
    wrapped = Wrapper(model)
    with torch.no_grad():
        torch.testing.assert_close(
            token_logprobs(wrapped, rows, 4), token_logprobs(model, rows, 4), rtol=0, atol=0
        )
    assert wrapped.calls == 1
    with pytest.raises(TypeError, match=r"get_decoder.*Linear"):
        token_logprobs(torch.nn.Linear(2, 2), rows, 4)
