"""The block-diffusion training objective (SDAR / BD3-LM) and the replay rows of BiC-RL.

Both SFT and RL run the model on a doubled sequence `[x_t ; x_0]`: a noisy copy, then the
clean copy, with identical position ids (docs/training.md). Blocks are aligned to absolute position
0, as at inference, so the prompt's tail shares the first answer block. Attention:

- a noisy token of block b sees the noisy tokens of block b (bidirectional) and the clean
  tokens of blocks < b;
- a clean token of block b sees the clean tokens of blocks <= b; clean never sees noisy.

There is **no logit shift**: the logit at noisy position i predicts the token at position i.

The RL replay's packed sequence (`pack_replay`) is mostly masked out: each noisy segment sees only
the clean blocks before it and itself. On a model switched by `use_block_sparse_replay` its mask is
a flex-attention `BlockMask` (`packed_block_mask`), whose kernel skips the 128 × 128 tiles that no
query of the tile may see; every other mask (SFT's `[x_t ; x_0]`, a dense packed mask) goes through
SDPA as before.

What this module does not do: packing several samples into one row (each row is one sample,
padded to a multiple of the block size), or a block-sparse kernel for SFT's doubled rows (a dense
additive mask is built there; fine for the tiny and mid-size runs this code is tested on).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F


def block_diffusion_mask(
    length: int,
    block_size: int,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    start: int = 0,
) -> torch.Tensor:
    """Additive attention mask for `[x_t ; x_0]` of a `length`-token sequence, the noisy copy
    `x_t` from position `start` on (`forward_doubled`'s).

    Returns a (1, 1, 2L - start, 2L - start) tensor: 0 where attention is allowed, dtype-min
    where blocked.
    """
    blk = torch.arange(length, device=device) // block_size  # (L,)
    noisy = blk[start:, None]  # (L - start, 1): the noisy copy's blocks as queries
    noisy_noisy = noisy == blk[None, start:]  # same block, bidirectional
    noisy_clean = blk[None, :] < noisy  # strictly earlier clean blocks
    clean_clean = blk[None, :] <= blk[:, None]  # block-causal
    clean_noisy = torch.zeros(length, length - start, dtype=torch.bool, device=device)
    allowed = torch.cat(
        [torch.cat([noisy_noisy, noisy_clean], dim=1), torch.cat([clean_noisy, clean_clean], dim=1)], dim=0
    )  # (2L - start, 2L - start)
    mask = torch.zeros(allowed.shape, dtype=dtype, device=device)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[None, None]


def doubled_position_ids(
    length: int, batch: int, device: torch.device | str = "cpu", start: int = 0
) -> torch.Tensor:
    """Position ids (B, 2L - start): the noisy copy's start..L-1, then the clean copy's 0..L-1."""
    pos = torch.arange(length, device=device)
    return torch.cat([pos[start:], pos])[None].expand(batch, -1)


def forward_doubled(
    model: torch.nn.Module, noisy: torch.Tensor, clean: torch.Tensor, block_size: int, start: int = 0
) -> torch.Tensor:
    """Run `[noisy ; clean]` through the model; return the logits of the noisy half, (B, L, V).

    `start` (a multiple of `block_size`): the noisy half begins there, `[noisy[start:] ; clean]`,
    and the logits are those of positions start..L-1, (B, L - start, V). In the mask no position
    sees a noisy block but that block itself, so dropping the noisy blocks before `start` (for SFT:
    prompt blocks, never masked and never scored) changes no kept logit: the same computation on
    L - start fewer tokens (`sft_loss` starts at the batch's first answer block)."""
    batch, length = clean.shape
    if start % block_size or not 0 <= start < length:
        raise ValueError(f"start {start} must be a multiple of the block size {block_size} below {length}")
    mask = block_diffusion_mask(
        length, block_size, dtype=_float_dtype(model), device=clean.device, start=start
    )
    kept = length - start
    out = model(
        input_ids=torch.cat([noisy[:, start:], clean], dim=1),  # (B, 2L - start)
        attention_mask=mask.expand(batch, -1, -1, -1),
        position_ids=doubled_position_ids(length, batch, clean.device, start),
        use_cache=False,
        # the LM head runs on the noisy half only: half the head's FLOPs and logits memory
        logits_to_keep=torch.arange(kept, device=clean.device),
    )
    logits: torch.Tensor = out.logits[:, :kept]  # (B, L - start, V): no shift
    return logits


def _float_dtype(model: torch.nn.Module) -> torch.dtype:
    for p in model.parameters():
        if p.is_floating_point():
            return p.dtype
    return torch.float32


@dataclass(frozen=True, slots=True)
class NoisedBatch:
    noisy: torch.Tensor  # (B, L) input ids with masked answer tokens
    is_masked: torch.Tensor  # (B, L) bool
    noise_rate: torch.Tensor  # (B,) t per sample


def add_noise(
    input_ids: torch.Tensor,
    loss_mask: torch.Tensor,
    mask_token_id: int,
    generator: torch.Generator | None = None,
    min_rate: float = 1e-3,
) -> NoisedBatch:
    """Mask each answer token independently with one rate t ~ U(min_rate, 1) per sample.

    `loss_mask` (B, L) marks the trainable (answer + block padding) tokens; prompt tokens are
    never masked. At least one trainable token per sample is masked, as in SDAR.
    """
    batch, length = input_ids.shape
    dev = input_ids.device
    t = min_rate + (1.0 - min_rate) * torch.rand(batch, generator=generator, device=dev)  # (B,)
    draw = torch.rand(batch, length, generator=generator, device=dev)  # (B, L)
    is_masked = (draw < t[:, None]) & loss_mask
    # Force one masked token in samples where the draw masked none (tiny t, short answers).
    none = ~is_masked.any(dim=1) & loss_mask.any(dim=1)
    if none.any():
        scores = torch.where(loss_mask, draw, torch.full_like(draw, 2.0))
        first = scores.argmin(dim=1)  # the trainable slot with the smallest draw
        is_masked[none, first[none]] = True
    noisy = torch.where(is_masked, torch.full_like(input_ids, mask_token_id), input_ids)
    return NoisedBatch(noisy=noisy, is_masked=is_masked, noise_rate=t)


def seeded_noise(
    input_ids: torch.Tensor,
    loss_mask: torch.Tensor,
    lengths: list[int],
    seeds: list[int],
    mask_token_id: int,
    min_rate: float = 1e-3,
) -> NoisedBatch:
    """`add_noise` with one CPU generator per sample, seeded by `seeds[i]`, over its own `lengths[i]`.

    A sample's noise then depends only on its seed, not on which batch, rank or accumulation
    step it lands in: a 2-process run sees the noise of a 1-process run with twice the batch,
    and a resumed run the noise of an uninterrupted one. Runs on the CPU (collate time).
    """
    batch, length = input_ids.shape
    noisy = input_ids.clone()
    is_masked = torch.zeros(batch, length, dtype=torch.bool)
    rates = torch.ones(batch)
    for i, (n, seed) in enumerate(zip(lengths, seeds, strict=True)):
        one = add_noise(
            input_ids[i : i + 1, :n],
            loss_mask[i : i + 1, :n],
            mask_token_id,
            torch.Generator().manual_seed(seed),
            min_rate,
        )
        noisy[i, :n], is_masked[i, :n], rates[i] = one.noisy[0], one.is_masked[0], one.noise_rate[0]
    return NoisedBatch(noisy=noisy, is_masked=is_masked, noise_rate=rates)


def sft_loss(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    loss_mask: torch.Tensor,
    *,
    block_size: int,
    mask_token_id: int,
    generator: torch.Generator | None = None,
    min_rate: float = 1e-3,
    noised: NoisedBatch | None = None,
    token_weight: torch.Tensor | None = None,
    answer_start: int | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """SDAR's SFT loss: CE at masked positions × 1/t, summed, / number of answer tokens.

    input_ids, loss_mask: (B, L) with L a multiple of `block_size`; `noised` (on the same
    device) replaces drawing the noise here; `token_weight` (B, L), where given, multiplies each
    position's term (the demo fit's weight on the lines that compute, `fit.FitConfig.focus_weight`;
    the normalisation stays the number of answer tokens). `answer_start`: the first position of
    `loss_mask` in any row (computed from it when not given: a device sync); the noisy half starts
    at its block (`forward_doubled`'s `start`), which leaves the loss as it is. Returns (loss,
    stats); the stats are detached 0-d tensors, so reading them (a device sync) is the caller's
    choice.
    """
    if noised is None:
        noised = add_noise(input_ids, loss_mask, mask_token_id, generator, min_rate)
    length = input_ids.shape[1]
    if answer_start is None:
        rows = loss_mask.any(dim=1)
        answer_start = int(loss_mask[rows].float().argmax(dim=1).min()) if bool(rows.any()) else 0
    start = min(max(0, answer_start), length - 1) // block_size * block_size
    logits = forward_doubled(model, noised.noisy, input_ids, block_size, start)  # (B, L - start, V)
    targets = input_ids[:, start:]
    ce = F.cross_entropy(logits.float().transpose(1, 2), targets, reduction="none")  # (B, L - start)
    weighted = ce * noised.is_masked[:, start:] / noised.noise_rate[:, None]
    if token_weight is not None:
        weighted = weighted * token_weight[:, start:]
    per_sample = weighted.sum(dim=1) / loss_mask.sum(dim=1).clamp(min=1)  # (B,)
    loss = per_sample.mean()
    stats = {
        "loss": loss.detach(),
        "masked_fraction": noised.is_masked.sum() / loss_mask.sum().clamp(min=1),
        "masked_ce": (ce.detach() * noised.is_masked[:, start:]).sum() / noised.is_masked.sum().clamp(min=1),
    }
    return loss, stats


# ---------------------------------------------------------------------------------------------
# BiC-RL: replaying a rollout's reveal order (TraceRL), docs/training.md
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReplayRows:
    """Training rows of one rollout: row r holds the state just before the r-th reveal round.

    clean: (R, L) the full prompt+response; noisy: (R, L) with not-yet-revealed response tokens
    masked; targets: (R, L) bool, the tokens revealed in round r (log-probs are read there).
    """

    clean: torch.Tensor
    noisy: torch.Tensor
    targets: torch.Tensor


def replay_rows(
    prompt_ids: list[int],
    response_ids: list[int],
    step_map: list[int],
    *,
    block_size: int,
    mask_token_id: int,
    pad_token_id: int,
) -> ReplayRows:
    """Rebuild the denoising trajectory of one rollout as training rows.

    `step_map[i]` orders the reveals of response token i (any monotone step counter: only the
    order inside each block matters). Round r targets, in every block, the tokens with the r-th
    smallest distinct step value of that block; the row masks those and every later one.
    Blocks are aligned to absolute position 0, like inference and SFT. The sequence is padded
    with `pad_token_id` to a multiple of `block_size` (pad tokens are never targets).
    """
    if len(response_ids) != len(step_map):
        raise ValueError(
            f"step_map has {len(step_map)} entries for {len(response_ids)} response tokens; "
            "record one step per generated token (Generation.step_map)"
        )
    num_prompt = len(prompt_ids)
    seq = list(prompt_ids) + list(response_ids)
    length = -(-len(seq) // block_size) * block_size
    seq += [pad_token_id] * (length - len(seq))
    clean = torch.tensor(seq, dtype=torch.long)

    # rank[i] = index of token i's step among the distinct steps of its block (0, 1, ...).
    rank = torch.full((length,), -1, dtype=torch.long)
    for block_start in range(0, length, block_size):
        lo = max(block_start, num_prompt)
        hi = min(block_start + block_size, num_prompt + len(response_ids))
        if lo >= hi:
            continue
        steps = [step_map[i - num_prompt] for i in range(lo, hi)]
        order = {s: k for k, s in enumerate(sorted(set(steps)))}
        for i, s in zip(range(lo, hi), steps, strict=True):
            rank[i] = order[s]
    num_rounds = int(rank.max().item()) + 1 if (rank >= 0).any() else 0

    noisy_rows, target_rows = [], []
    for r in range(num_rounds):
        still_masked = rank >= r  # revealed at round r or later: masked before round r
        noisy_rows.append(torch.where(still_masked, torch.full_like(clean, mask_token_id), clean))
        target_rows.append(rank == r)
    if not noisy_rows:
        empty = torch.empty(0, length, dtype=torch.long)
        return ReplayRows(empty, empty.clone(), torch.empty(0, length, dtype=torch.bool))
    return ReplayRows(
        clean=clean[None].expand(num_rounds, -1).clone(),
        noisy=torch.stack(noisy_rows),
        targets=torch.stack(target_rows),
    )


def token_logprobs(model: torch.nn.Module, rows: ReplayRows, block_size: int) -> torch.Tensor:
    """Log-probability of each clean token at its noisy-copy position, (R, L) (no shift), read at
    the target positions only: 0 elsewhere (the policy loss masks by `rows.targets`).

    Only the targets' hidden states reach the LM head: the model's forward runs (through a
    DDP wrapper, which keeps its gradient synchronisation) with `logits_to_keep=1`, the
    backbone's (R, 2L, hidden) output (`get_decoder()`) is caught by a forward hook and indexed by
    the targets of the noisy half, and the head (`get_output_embeddings()`) maps those (N, hidden)
    rows, so the logits and their fp32 log-softmax are (N, V) with N the number of targets — each
    revealed token once over all rows, the response's length — instead of (R, L, V) for every row
    and position. Equal to the full computation, gradient included (tests/model/train). A 2-D
    `logits_to_keep` would say the same in one call, but transformers releases disagree on it (the
    GPU image's indexes `hidden[:, keep, :]` and fails).
    """
    batch, length = rows.clean.shape
    targets = rows.targets
    keep = torch.cat([targets, torch.zeros_like(targets)], dim=1)  # (R, 2L): the noisy half's targets
    mask = block_diffusion_mask(length, block_size, dtype=_float_dtype(model), device=rows.clean.device)
    hidden, head = _hidden_and_head(
        model,
        input_ids=torch.cat([rows.noisy, rows.clean], dim=1),  # (R, 2L)
        attention_mask=mask.expand(batch, -1, -1, -1),
        position_ids=doubled_position_ids(length, batch, rows.clean.device),
    )  # (R, 2L, hidden)
    logits: torch.Tensor = head(hidden[keep])  # (N, V)
    logp = torch.log_softmax(logits.float(), dim=-1)  # (N, V)
    picked = logp.gather(-1, rows.clean[targets][:, None]).squeeze(-1)  # (N,)
    return picked.new_zeros(batch, length).masked_scatter(targets, picked)  # (R, L)


@dataclass(frozen=True, slots=True)
class PackedReplay:
    """One rollout's replay rows as a single sequence: the clean copy once, then only the noisy
    blocks that hold a target, each block of each round one segment.

    In `[noisy ; clean]` a noisy block sees the earlier clean blocks and itself, and nothing sees a
    noisy block but itself, so a noisy block without a target in its round changes no target's
    log-probability, and every row's clean half is the same computation. Packed: T = L + S·B
    tokens (S segments of B = block_size) instead of R·2L; the same log-probabilities.

    input_ids, position_ids: (1, T); blocks, segments: (T,) each token's block and segment (-1:
    the clean copy), from which `packed_mask` builds the (T, T) mask when it is needed (kept for
    every rollout of a step, the masks themselves would not fit); keep: (T,) bool, the target
    positions; rows, cols: (N,) where each kept position's log-probability goes in the (R, L)
    layout of `token_logprobs`; labels: (N,) the clean tokens there; shape: (R, L).
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    blocks: torch.Tensor
    segments: torch.Tensor
    keep: torch.Tensor
    rows: torch.Tensor
    cols: torch.Tensor
    labels: torch.Tensor
    shape: tuple[int, int]


def pack_replay(rows: ReplayRows, block_size: int) -> PackedReplay:
    """`rows` (from `replay_rows`: every row's clean copy is the same) packed."""
    num_rows, length = rows.clean.shape
    device = rows.clean.device
    num_blocks = length // block_size
    if num_rows == 0:
        raise ValueError("no replay rows to pack: the rollout revealed nothing")
    if length % block_size:
        raise ValueError(f"replay length {length} is not a multiple of the block size {block_size}")
    clean = rows.clean[0]
    targets = rows.targets.view(num_rows, num_blocks, block_size)
    seg_row, seg_block = targets.any(-1).nonzero(as_tuple=True)  # (S,) each: a round and a block
    offsets = torch.arange(block_size, device=device)
    seg_tokens = rows.noisy.view(num_rows, num_blocks, block_size)[seg_row, seg_block]  # (S, B)
    seg_pos = (seg_block[:, None] * block_size + offsets).flatten()  # (S·B,)
    positions = torch.arange(length, device=device)
    # per token: its block, its segment (-1: the clean copy)
    blk = torch.cat([positions // block_size, seg_block.repeat_interleave(block_size)])
    seg = torch.cat(
        [
            torch.full((length,), -1, device=device),
            torch.arange(len(seg_row), device=device).repeat_interleave(block_size),
        ]
    )
    seg_targets = targets[seg_row, seg_block].flatten()  # (S·B,)
    return PackedReplay(
        input_ids=torch.cat([clean, seg_tokens.flatten()])[None],
        position_ids=torch.cat([positions, seg_pos])[None],
        blocks=blk,
        segments=seg,
        keep=torch.cat([torch.zeros(length, dtype=torch.bool, device=device), seg_targets]),
        rows=seg_row.repeat_interleave(block_size)[seg_targets],
        cols=seg_pos[seg_targets],
        labels=clean[seg_pos[seg_targets]],
        shape=(num_rows, length),
    )


def packed_mask(packed: PackedReplay, dtype: torch.dtype) -> torch.Tensor:
    """The additive (1, 1, T, T) mask of `packed`: the clean copy block-causal; a noisy segment
    sees the clean blocks before its own and itself (bidirectional); nothing sees a segment but
    itself."""
    seg, blk = packed.segments, packed.blocks
    positions = torch.arange(len(seg), device=seg.device)
    allowed = _packed_allowed(seg, blk, positions[:, None], positions[None, :])  # (T, T)
    total = len(seg)
    mask = torch.zeros(total, total, dtype=dtype, device=seg.device)
    return mask.masked_fill_(~allowed, torch.finfo(dtype).min)[None, None]


def _packed_allowed(seg: torch.Tensor, blk: torch.Tensor, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
    """Whether query positions `q` may see key positions `kv` in a packed sequence of segments
    `seg` (-1: the clean copy) and blocks `blk`: `packed_mask`'s and `packed_block_mask`'s rule."""
    q_seg, k_seg, q_blk, k_blk = seg[q], seg[kv], blk[q], blk[kv]
    q_clean, k_clean = q_seg < 0, k_seg < 0
    return (
        (q_clean & k_clean & (k_blk <= q_blk))
        | (~q_clean & k_clean & (k_blk < q_blk))
        | (~q_clean & (q_seg == k_seg))
    )


PACKED_ATTENTION = "cudice_packed"  # the attention implementation `use_block_sparse_replay` sets
FLEX_TILE = 128  # flex attention's default tile: the packed sequence is padded to a multiple of it


def use_block_sparse_replay(model: torch.nn.Module) -> None:
    """Switch `model` (a transformers causal LM, or a wrapper of one) to cudice's attention: a
    flex-attention `BlockMask` (what `packed_token_logprobs` passes on such a model) runs through
    flex attention, compiled with dynamic shapes on a GPU (a few graphs: with and without gradient,
    a one-tile sequence), its inputs in the autocast dtype; any other mask through transformers'
    SDPA function, as before. On a CPU (flex attention has no backward there) the BlockMask's rule
    is made dense and goes through SDPA too. The values are the dense path's up to the kernels'
    rounding."""
    _register_packed_attention()
    inner = _unwrap(model)
    setter = getattr(inner, "set_attn_implementation", None)
    if setter is None:
        raise TypeError(f"use_block_sparse_replay needs a transformers model; got {type(inner).__name__}")
    setter(PACKED_ATTENTION)


def compile_replay_layers(model: torch.nn.Module, backend: str = "inductor") -> int:
    """Compile each decoder layer of `model` (a transformers causal LM, or a wrapper of one) in
    place with `torch.compile(dynamic=True)`: one graph serves every layer (the layers share their
    code; their weights are the graph's inputs) and every packed length. Eager, a replay pass at
    the DICE-1.7B shape spent over half of its GPU time outside the matrix products and the
    attention — RMSNorm's fp32 round trip, RoPE, SiLU·up, autocast's casts, the residual adds
    (bench/replay_profile.py) — which the compiled layers fuse. Returns the number of layers
    compiled now (0 where they already were). The weights, their names and the state dict are
    unchanged (`nn.Module.compile`). `backend`: torch.compile's (tests use "aot_eager": the same
    graphs, autograd included, without code generation)."""
    inner = _unwrap(model)
    if getattr(inner, "_cudice_replay_compiled", False):
        return 0
    layers = [
        layer
        for name, modules in inner.named_modules()
        if isinstance(modules, torch.nn.ModuleList) and name.split(".")[-1] == "layers"
        for layer in modules
    ]
    if not layers:
        raise TypeError(
            f"compile_replay_layers found no decoder layers (a `layers` list) in {type(inner).__name__}"
        )
    for layer in layers:
        layer.compile(dynamic=True, backend=backend)
    inner._cudice_replay_compiled = True
    return len(layers)


def block_sparse_replay(model: torch.nn.Module) -> bool:
    """Whether `use_block_sparse_replay` switched `model`."""
    config = getattr(_unwrap(model), "config", None)
    return getattr(config, "_attn_implementation", None) == PACKED_ATTENTION


_FLEX: dict[str, Any] = {}


def _register_packed_attention() -> None:
    if _FLEX.get("registered"):
        return
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(PACKED_ATTENTION, _packed_attention)
    AttentionMaskInterface.register(PACKED_ATTENTION, sdpa_mask)  # 2-D or no masks: built as for SDPA
    _FLEX["sdpa"] = sdpa_attention_forward
    _FLEX["registered"] = True


def _packed_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: Any,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    from torch.nn.attention.flex_attention import BlockMask, create_mask, flex_attention

    if isinstance(attention_mask, BlockMask) and not query.is_cuda:
        # flex attention has no backward on a CPU: the BlockMask's rule as a dense mask, through SDPA
        length = query.shape[-2]
        attention_mask = create_mask(attention_mask.mask_mod, 1, 1, length, length, device=query.device)
    if not isinstance(attention_mask, BlockMask):
        result: tuple[torch.Tensor, None] = _FLEX["sdpa"](
            module, query, key, value, attention_mask, scaling=scaling, **kwargs
        )
        return result
    if kwargs.get("dropout", 0.0):
        raise ValueError("the block-sparse replay has no attention dropout; set attention_dropout to 0")
    # fp32 master weights under bf16 autocast give fp32 q, k (their norms' weights) and a bf16 v:
    # SDPA is cast by autocast, flex attention is not in every torch release
    dtype = torch.get_autocast_dtype("cuda") if torch.is_autocast_enabled("cuda") else value.dtype
    query, key, value = (t.to(dtype) for t in (query, key, value))
    if "compiled" not in _FLEX:  # dynamic: the packed sequences' lengths all differ
        _FLEX["compiled"] = torch.compile(flex_attention, dynamic=True)
    out = _FLEX["compiled"](
        query, key, value, block_mask=attention_mask, scale=scaling, enable_gqa=query.shape[1] != key.shape[1]
    )  # (B, H, T, D)
    return out.transpose(1, 2).contiguous(), None


def packed_block_mask(packed: PackedReplay) -> tuple[Any, int]:
    """The flex-attention `BlockMask` of `packed_mask`'s rule over the sequence padded to a multiple
    of `FLEX_TILE` (the pad tokens see only each other). Returns it and the padded length."""
    from torch.nn.attention.flex_attention import create_block_mask

    total = len(packed.segments)
    padded = -(-total // FLEX_TILE) * FLEX_TILE
    pad = padded - total
    seg = F.pad(packed.segments, (0, pad), value=total)  # one segment of their own (ids are < total)
    blk = F.pad(packed.blocks, (0, pad), value=0)

    def allowed(batch: Any, head: Any, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        return _packed_allowed(seg, blk, q, kv)

    mask = create_block_mask(allowed, None, None, padded, padded, device=seg.device)
    return mask, padded


def packed_token_logprobs(model: torch.nn.Module, packed: PackedReplay) -> torch.Tensor:
    """`token_logprobs` over a `PackedReplay`: the same (R, L) log-probabilities (0 off the
    targets) from one sequence of T tokens instead of R of 2L. The model's forward runs (through a
    DDP wrapper) with `logits_to_keep=1`; the head maps the backbone's output at the targets. On a
    model switched by `use_block_sparse_replay` the mask is a `BlockMask` over the sequence padded
    to a multiple of `FLEX_TILE`, else the dense (1, 1, T, T) one."""
    input_ids, position_ids, keep = packed.input_ids, packed.position_ids, packed.keep
    if block_sparse_replay(model):
        mask, padded = packed_block_mask(packed)
        pad = padded - input_ids.shape[1]
        input_ids = F.pad(input_ids, (0, pad), value=0)  # any token: nothing real sees a pad
        position_ids = F.pad(position_ids, (0, pad), value=0)
        keep = F.pad(keep, (0, pad), value=False)
    else:
        mask = packed_mask(packed, _float_dtype(model))
    hidden, head = _hidden_and_head(
        model, input_ids=input_ids, attention_mask=mask, position_ids=position_ids
    )  # (1, T, hidden)
    logits: torch.Tensor = head(hidden[0, keep])  # (N, V)
    logp = torch.log_softmax(logits.float(), dim=-1)
    picked = logp.gather(-1, packed.labels[:, None]).squeeze(-1)  # (N,)
    return picked.new_zeros(packed.shape).index_put((packed.rows, packed.cols), picked)


def _hidden_and_head(model: torch.nn.Module, **inputs: torch.Tensor) -> tuple[torch.Tensor, torch.nn.Module]:
    """The model's forward on `inputs` (through any wrapper's own forward) with `logits_to_keep=1`
    (its own logits, (B, 1, V), are not used); returns the backbone's (`get_decoder()`) last
    hidden state, caught by a forward hook, and the LM head (`get_output_embeddings()`)."""
    inner = _unwrap(model)
    decoder = inner.get_decoder() if hasattr(inner, "get_decoder") else None
    head = inner.get_output_embeddings() if hasattr(inner, "get_output_embeddings") else None
    if not isinstance(decoder, torch.nn.Module) or not isinstance(head, torch.nn.Module):
        raise TypeError(
            f"token_logprobs needs a causal LM with get_decoder() and get_output_embeddings() "
            f"(a transformers *ForCausalLM); got {type(inner).__name__}"
        )
    caught: list[torch.Tensor] = []
    hook = decoder.register_forward_hook(lambda mod, args, out: caught.append(out[0]))
    try:
        model(**inputs, use_cache=False, logits_to_keep=1)
    finally:
        hook.remove()
    if len(caught) != 1:
        raise RuntimeError(f"the backbone ran {len(caught)} times in one forward of {type(model).__name__}")
    return caught[0], head


def _unwrap(model: torch.nn.Module) -> Any:
    inner: Any = model
    while isinstance(getattr(inner, "module", None), torch.nn.Module):  # DDP and other wrappers
        inner = inner.module
    return inner


def clipped_policy_loss(
    logp_new: torch.Tensor,
    logp_old: torch.Tensor,
    advantage: torch.Tensor,
    targets: torch.Tensor,
    response_length: int,
    clip_eps: float,
    kl_beta: float,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO-clip surrogate over target tokens + β·KL(new‖old) with the k3 estimator.

    logp_*: (R, L); advantage: (R,) (the rollout's group-normalised reward, one per row);
    targets: (R, L) bool. Each row's sum is divided by the response length (TraceRL), then
    averaged over rows. The stats (`kl`, `clip_fraction`, over target tokens) are detached
    0-d tensors: reading them is a device sync, left to the caller.
    """
    ratio = torch.exp(logp_new - logp_old)  # (R, L)
    adv = advantage[:, None]
    surrogate = torch.minimum(ratio * adv, torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps) * adv)
    log_ratio_old_new = logp_old - logp_new
    k3 = torch.exp(log_ratio_old_new) - log_ratio_old_new - 1  # >= 0
    per_token = -surrogate + kl_beta * k3
    loss = (per_token * targets).sum(dim=1) / max(response_length, 1)  # (R,)
    clipped = ((ratio - 1).abs() > clip_eps) & targets
    stats = {
        "kl": (k3.detach() * targets).sum() / targets.sum().clamp(min=1),
        "clip_fraction": clipped.sum() / targets.sum().clamp(min=1),
    }
    return loss.mean(), stats


def group_advantages(rewards: Sequence[float | None], group_size: int) -> tuple[list[float], list[bool]]:
    """z-score rewards within each group of `group_size` samples of one task.

    Returns (advantages, keep): groups whose rewards have zero spread carry no signal and are
    dropped (keep=False for their samples), as in DICE's BiC-RL. A None reward (a sample the
    verifier failed to score) is left out: keep=False, and the group's mean and spread are over
    its scored samples only; a group with fewer than two scored samples is dropped.
    """
    if group_size < 1 or len(rewards) % group_size:
        raise ValueError(
            f"{len(rewards)} rewards do not split into groups of {group_size}; "
            "pass samples_per_task rewards for every task"
        )
    advantages: list[float] = []
    keep: list[bool] = []
    for g in range(0, len(rewards), group_size):
        members = list(rewards[g : g + group_size])
        scored = [float(r) for r in members if r is not None]
        group = torch.tensor(scored, dtype=torch.float64)
        std = float(group.std(unbiased=False)) if len(scored) > 1 else 0.0
        if std == 0.0:
            advantages += [0.0] * group_size
            keep += [False] * group_size
            continue
        mean = float(group.mean())
        for r in members:
            advantages.append(0.0 if r is None else (float(r) - mean) / std)
            keep.append(r is not None)
    return advantages, keep
