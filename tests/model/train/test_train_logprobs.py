"""`token_logprobs` reads the LM head at the target positions only, and equals the full
(R, L, V) log-softmax there — values and gradients — on a tiny random model in fp32."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from cudice.model.train.objective import (
    FLEX_TILE,
    ReplayRows,
    block_sparse_replay,
    compile_replay_layers,
    forward_doubled,
    pack_replay,
    packed_block_mask,
    packed_mask,
    packed_token_logprobs,
    replay_rows,
    token_logprobs,
    use_block_sparse_replay,
)
from torch.nn.attention.flex_attention import flex_attention
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


def _rows_with(prompt: int, response: int, seed: int) -> ReplayRows:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 90, (response,), generator=g).tolist()
    steps = torch.randint(0, 4, (response,), generator=g).tolist()  # up to 4 rounds in a block
    return replay_rows(
        list(range(1, prompt + 1)), ids, steps, block_size=4, mask_token_id=MASK_ID, pad_token_id=PAD_ID
    )


@pytest.mark.parametrize(("prompt", "response", "seed"), [(5, 11, 3), (8, 17, 5), (3, 2, 7), (6, 1, 8)])
def test_packed_replay_equals_the_rows_with_their_gradient(prompt: int, response: int, seed: int) -> None:
    """The packed sequence (the clean copy once, a segment per noisy block and round holding a
    target) gives each target the log-probability and the gradient of the doubled rows: prompts
    that end inside a block, padded last blocks, one to four rounds in a block."""
    model = tiny_model(seed=seed).float()
    rows = _rows_with(prompt, response, seed)
    packed = pack_replay(rows, 4)
    num_rows, length = rows.clean.shape
    assert packed.input_ids.shape[1] < num_rows * 2 * length or num_rows == 1
    advantage = torch.linspace(-1.0, 1.0, num_rows)[:, None]

    def grads(fn) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        model.zero_grad(set_to_none=True)
        logp = fn()
        ((logp * rows.targets) * advantage).sum().backward()
        return logp.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    new, new_grads = grads(lambda: packed_token_logprobs(model, packed))
    old, old_grads = grads(lambda: token_logprobs(model, rows, 4))
    assert new.shape == old.shape == (num_rows, length)
    torch.testing.assert_close(new[rows.targets], old[rows.targets], rtol=0, atol=2e-6)
    assert (new[~rows.targets] == 0).all() and int((new != 0).sum()) == response
    assert new_grads.keys() == old_grads.keys()
    for name, grad in new_grads.items():
        torch.testing.assert_close(grad, old_grads[name], rtol=1e-4, atol=2e-6, msg=name)


def test_the_packed_sequence_holds_only_the_blocks_with_targets() -> None:
    """One reveal per step (random weights): every response block replays in 4 rounds, and each
    round's row holds one target per block; packed, each (block, round) is one 4-token segment."""
    rows = replay_rows(
        [1, 2, 3, 4],
        list(range(10, 18)),
        list(range(8)),
        block_size=4,
        mask_token_id=MASK_ID,
        pad_token_id=PAD_ID,
    )
    packed = pack_replay(rows, 4)
    assert rows.clean.shape == (4, 12)  # 4 rounds x (1 prompt block + 2 response blocks)
    assert packed.input_ids.shape == (1, 12 + 2 * 4 * 4)  # the clean copy + 8 segments (vs 4 x 24)
    assert packed.keep.sum() == 8 and sorted(packed.cols.tolist()) == list(range(4, 12))
    mask = packed_mask(packed, torch.float32)[0, 0] == 0
    first = 12  # the first segment: block 1, round 0, tokens 12..15
    assert mask[first, :4].all() and not mask[first, 4:12].any()  # the prompt block, no later clean
    assert mask[first, first : first + 4].all() and not mask[first, first + 4 :].any()  # itself only
    assert not mask[:12, 12:].any()  # the clean copy sees no segment


@pytest.mark.parametrize(("prompt", "response", "seed"), [(5, 11, 3), (8, 17, 5), (6, 1, 8)])
def test_the_block_sparse_replay_equals_the_dense_one_with_its_gradient(
    prompt: int, response: int, seed: int
) -> None:
    """A model switched by `use_block_sparse_replay` passes the packed sequence a `BlockMask`
    (padded to a multiple of flex attention's 128-token tile; on a CPU made dense again, flex
    attention having no backward there): the log-probabilities and gradients of the dense mask's
    path, and SFT's dense masks still take SDPA on the switched model. The flex kernel itself
    (eager, forward) with that BlockMask equals SDPA with `packed_mask`, padded."""
    dense = tiny_model(seed=seed).float()
    sparse = tiny_model(seed=seed).float()
    use_block_sparse_replay(sparse)
    assert block_sparse_replay(sparse) and not block_sparse_replay(dense)
    rows = _rows_with(prompt, response, seed)
    packed = pack_replay(rows, 4)
    mask, padded = packed_block_mask(packed)
    assert padded % FLEX_TILE == 0 and padded >= packed.input_ids.shape[1]
    advantage = torch.linspace(-1.0, 1.0, rows.clean.shape[0])[:, None]

    def grads(model: torch.nn.Module) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        model.zero_grad(set_to_none=True)
        logp = packed_token_logprobs(model, packed)
        ((logp * rows.targets) * advantage).sum().backward()
        return logp.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    new, new_grads = grads(sparse)
    old, old_grads = grads(dense)
    torch.testing.assert_close(new, old, rtol=0, atol=2e-6)
    assert int((new != 0).sum()) == response
    assert new_grads.keys() == old_grads.keys()
    for name, grad in new_grads.items():
        torch.testing.assert_close(grad, old_grads[name], rtol=1e-4, atol=2e-6, msg=name)
    with torch.no_grad():  # a dense [x_t ; x_0] mask on the switched model: SDPA, the same logits
        noisy, clean = rows.noisy[:1], rows.clean[:1]
        torch.testing.assert_close(
            forward_doubled(sparse, noisy, clean, 4), forward_doubled(dense, noisy, clean, 4), rtol=0, atol=0
        )
    q, k, v = (torch.randn(1, 2, padded, 8, generator=torch.Generator().manual_seed(seed)) for _ in range(3))
    dense_mask = torch.zeros(padded, padded, dtype=torch.bool)
    total = packed.input_ids.shape[1]
    dense_mask[:total, :total] = packed_mask(packed, torch.float32)[0, 0] == 0
    dense_mask[total:, total:] = True  # the pads see each other
    torch.testing.assert_close(
        flex_attention(q, k, v, block_mask=mask)[:, :, :total],
        F.scaled_dot_product_attention(q, k, v, attn_mask=dense_mask)[:, :, :total],
        rtol=0,
        atol=1e-5,
    )


def _replay_grads(
    model: torch.nn.Module, packed: Any, rows: ReplayRows
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    logp = packed_token_logprobs(model, packed)
    advantage = torch.linspace(-1.0, 1.0, rows.clean.shape[0], device=logp.device)[:, None]
    ((logp * rows.targets) * advantage).sum().backward()
    return logp.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.slow
def test_compiled_replay_layers_give_the_eager_values_and_gradients() -> None:
    """`compile_replay_layers` compiles every decoder layer once (a second call compiles none;
    the state dict keeps its names) and the replay's log-probabilities and gradients stay the
    eager ones over sequences of several lengths (dynamic shapes). Here through torch.compile's
    graph capture and autograd without code generation (`aot_eager`); the GPU test below runs the
    default backend with the block-sparse replay."""
    eager, compiled = tiny_model(seed=4).float(), tiny_model(seed=4).float()
    names = list(compiled.state_dict())
    assert compile_replay_layers(compiled, backend="aot_eager") == 2
    assert compile_replay_layers(compiled, backend="aot_eager") == 0
    assert list(compiled.state_dict()) == names
    for prompt, response, seed in ((5, 11, 3), (9, 23, 6)):
        rows = _rows_with(prompt, response, seed)
        packed = pack_replay(rows, 4)
        new, new_grads = _replay_grads(compiled, packed, rows)
        old, old_grads = _replay_grads(eager, packed, rows)
        torch.testing.assert_close(new, old, rtol=0, atol=2e-6)
        assert new_grads.keys() == old_grads.keys()
        for name, grad in new_grads.items():
            torch.testing.assert_close(grad, old_grads[name], rtol=1e-4, atol=2e-6, msg=name)
    with pytest.raises(TypeError, match="no decoder layers"):
        compile_replay_layers(torch.nn.Linear(2, 2))


@pytest.mark.gpu
def test_compiled_block_sparse_replay_on_a_gpu_equals_the_eager_dense_one() -> None:
    """On a GPU under bf16 autocast, as the RL update runs it: the compiled layers (inductor) with
    the block-sparse replay give the eager dense replay's log-probabilities and gradients, within
    bf16's rounding."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    eager, compiled = tiny_model(seed=5).cuda(), tiny_model(seed=5).cuda()
    use_block_sparse_replay(compiled)
    compile_replay_layers(compiled)
    for prompt, response, seed in ((5, 11, 3), (40, 300, 6)):
        rows = _rows_with(prompt, response, seed)
        rows = ReplayRows(rows.clean.cuda(), rows.noisy.cuda(), rows.targets.cuda())
        packed = pack_replay(rows, 4)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            new, new_grads = _replay_grads(compiled, packed, rows)
            old, old_grads = _replay_grads(eager, packed, rows)
        torch.testing.assert_close(new, old, rtol=0, atol=5e-2)
        for name, grad in new_grads.items():
            scale = float(old_grads[name].abs().max()) + 1e-6
            assert float((grad - old_grads[name]).abs().max()) <= 0.05 * scale, name
