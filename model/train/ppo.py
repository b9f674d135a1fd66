"""The policy update of one BiC-RL step: TraceRL's clipped PPO over replayed rollouts.

Phases (they continue `cudice.model.train.rl`'s 1–3):
  4. z-score rewards within each task's group; drop groups with zero spread; a None reward (the
     verifier failed, not the kernel) is left out of its group;
  5. replay each kept rollout's reveal order as rows (`replay_rows`, the blocks exactly as the
     sampler saw them, EOS included), packed into one sequence per rollout (`pack_replay`: the
     clean copy once and only the noisy blocks that hold a target, the same log-probabilities
     as the rows; with `replay_attention` sparse its attention skips the tiles nobody sees,
     `use_block_sparse_replay`);
     `logp_old` — the ratio's base and the KL anchor — is, with `old_logprobs` "sampler" (the
     default), the log-probability each token was drawn with (`Rollout.logprobs`, placed at the
     row that targets it: the behaviour policy's, no forward); with "replay" (or for a rollout
     that carries none) one no-grad pass with the pre-update weights, except for the first
     minibatch's rollouts, whose first grad forward runs before any optimizer step and gives
     theirs (detached);
  6. `ppo_epochs` passes over the kept rollouts, each cut into `num_minibatches`; one optimizer
     step per minibatch (clip on the true norm). The first minibatch runs at ratio 1 (with
     "sampler": the master's probability over the bf16 copy's that sampled, ~1); every later one
     sees the updated policy, so the clip and the k3 KL term act.

Several processes (DDP): every rank updates on its own rollouts; a minibatch's loss is weighted
by rows / (rows of that minibatch on all ranks), so the all-reduced gradient is the mean over
every row of the minibatch. A rank whose share of a minibatch is empty still runs one
zero-weighted forward/backward, so that every rank joins each all-reduce (the forwards
themselves are collective-free: DDP runs with `broadcast_buffers=False`). Only the row counts
(one collective per RL step) and the final figures (one read) cross to the host.

Not covered: a value model, TraceRL's `shrink`, packing several rollouts into one sequence.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Sequence
from typing import Any

import torch
from cudice.model.train.config import RLConfig
from cudice.model.train.objective import (
    ReplayRows,
    block_sparse_replay,
    clipped_policy_loss,
    compile_replay_layers,
    group_advantages,
    pack_replay,
    packed_token_logprobs,
    replay_rows,
    use_block_sparse_replay,
)
from cudice.model.train.prepare import autocast
from cudice.model.train.types import Rollout


def _minibatches(count: int, num_minibatches: int, rng: random.Random) -> list[list[int]]:
    order = list(range(count))
    rng.shuffle(order)
    return [
        order[k * count // num_minibatches : (k + 1) * count // num_minibatches]
        for k in range(num_minibatches)
    ]


def ppo_update(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    accelerator: Any,
    rollouts: Sequence[Rollout],
    rewards: Sequence[float | None],
    config: RLConfig,
    *,
    block_size: int,
    mask_token_id: int,
    pad_token_id: int,
    step: int,
) -> dict[str, float]:
    """Phases 4–6 on this rank's rewarded rollouts. Returns figures summed/averaged over all ranks.

    A None reward (not scored: the verifier failed) is left out of its group (`group_advantages`)."""
    device, world = accelerator.device, accelerator.num_processes
    # 4. group-normalised advantages; flat groups carry no signal
    advantages, keep = group_advantages(rewards, config.samples_per_task)
    kept = [(r, a) for r, a, k in zip(rollouts, advantages, keep, strict=True) if k and r.response_ids]
    size = config.samples_per_task
    num_groups = sum(any(keep[g : g + size]) for g in range(0, len(keep), size))
    # 5. replay rows and the pre-update log-probs
    rows = [
        _to(
            replay_rows(
                r.prompt_ids,
                r.response_ids,
                r.step_map,
                block_size=block_size,
                mask_token_id=mask_token_id,
                pad_token_id=pad_token_id,
            ),
            device,
        )
        for r, _ in kept
    ]
    packed = [pack_replay(x, block_size) for x in rows]
    prepare_replay(model, config.setup, device)
    # the minibatch plan and its global row counts: one collective per RL step
    rng = random.Random(config.seed * 1_000_003 + step)
    plan = [
        mb for _ in range(config.ppo_epochs) for mb in _minibatches(len(kept), config.num_minibatches, rng)
    ]
    fresh = _fresh(plan)
    old: list[torch.Tensor | None] = [
        sampled_logprobs(r, x) if config.old_logprobs == "sampler" else None
        for (r, _), x in zip(kept, rows, strict=True)
    ]
    with torch.no_grad(), autocast(accelerator, config.setup):  # the bare module: no DDP hooks, no collective
        for k, sequence in enumerate(packed):
            if old[k] is None and k not in fresh:
                old[k] = packed_token_logprobs(accelerator.unwrap_model(model), sequence)  # (R, L)
    local = torch.tensor(
        [[sum(rows[i].clean.shape[0] for i in mb) for mb in plan] + [num_groups]], dtype=torch.float
    )
    counts = (accelerator.reduce(local.to(device), "sum") if world > 1 else local)[0].tolist()  # sync point
    total_groups, counts = int(counts[-1]), counts[:-1]
    figures = torch.zeros(4, device=device)  # loss, kl, clip fraction (row-weighted), grad norm
    num_updates = 0
    # 6. one optimizer step per minibatch
    for minibatch, global_rows in zip(plan, counts, strict=True):
        if global_rows == 0:  # the same on every rank: nobody steps
            continue
        items: list[int | None] = list(minibatch) or [None]
        for j, i in enumerate(items):
            with contextlib.nullcontext() if j == len(items) - 1 else accelerator.no_sync(model):
                if i is None:
                    loss = _idle_loss(
                        model,
                        rows[0] if rows else None,
                        block_size,
                        pad_token_id,
                        device,
                        accelerator,
                        config,
                    )
                else:
                    (rollout, adv), x = kept[i], rows[i]
                    with autocast(accelerator, config.setup):
                        logp_new = packed_token_logprobs(model, packed[i])  # (R, L)
                    base = old[i]
                    if base is None:  # the first minibatch: the pre-update weights are these
                        base = old[i] = logp_new.detach()
                    advantage = torch.full((x.clean.shape[0],), adv, device=device)
                    loss, stats = clipped_policy_loss(
                        logp_new,
                        base,
                        advantage,
                        x.targets,
                        len(rollout.response_ids),
                        config.clip_eps,
                        config.kl_beta,
                    )
                    weight = x.clean.shape[0] / global_rows
                    figures[:3] += torch.stack([loss.detach(), stats["kl"], stats["clip_fraction"]]) * weight
                    loss = loss * weight * world  # DDP averages over ranks
                accelerator.backward(loss)
        figures[3] += accelerator.clip_grad_norm_(model.parameters(), config.max_grad_norm).detach()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        num_updates += 1
    if world > 1:
        figures[:3] = accelerator.reduce(figures[:3], "sum")
    loss_sum, kl_sum, clip_sum, norm_sum = figures.tolist()  # sync point
    n = max(num_updates, 1)
    return {
        "num_kept_groups": float(total_groups),
        "num_rows": float(sum(counts) / config.ppo_epochs),
        "loss": loss_sum / n,
        "kl": kl_sum / n,
        "clip_fraction": clip_sum / n,
        "grad_norm": norm_sum / n,
        "num_updates": float(num_updates),
        # this rank's tokens per replay pass, packed, and as the doubled rows would have been
        "replay_tokens": float(sum(x.input_ids.shape[1] for x in packed)),
        "doubled_tokens": float(sum(2 * x.clean.numel() for x in rows)),
    }


def prepare_replay(model: torch.nn.Module, setup: Any, device: torch.device) -> None:
    """The model as the replay runs it (`ModelSetup`): the block-sparse attention where
    `replay_attention` asks for it ("auto": on a GPU), the decoder layers compiled on a GPU with
    `compile_replay`. Both stay for the next steps; calling again changes nothing."""
    attention = setup.replay_attention
    sparse = attention == "sparse" or (attention == "auto" and device.type == "cuda")
    if sparse and not block_sparse_replay(model):
        use_block_sparse_replay(model)
    if setup.compile_replay and device.type == "cuda":
        compile_replay_layers(model)


def sampled_logprobs(rollout: Rollout, rows: ReplayRows) -> torch.Tensor | None:
    """The rollout's recorded log-probabilities laid out as `packed_token_logprobs` returns the
    replay's: (R, L), each token's value at the row that targets it, 0 elsewhere. None when the
    rollout carries none (or not one per response id)."""
    if not rollout.logprobs or len(rollout.logprobs) != len(rollout.response_ids):
        return None
    length = rows.clean.shape[1]
    start = len(rollout.prompt_ids)
    seq = torch.zeros(length, dtype=torch.float32)
    seq[start : start + len(rollout.logprobs)] = torch.tensor(rollout.logprobs, dtype=torch.float32)
    seq = seq.to(rows.targets.device)
    return torch.where(rows.targets, seq[None, :], torch.zeros((), device=seq.device))  # (R, L)


def _fresh(plan: list[list[int]]) -> set[int]:
    """The rollouts whose `logp_old` their first grad forward gives (detached): the first
    minibatch's, which runs before any optimizer step; the no-grad pass skips them."""
    return set(plan[0]) if plan else set()


def _to(rows: ReplayRows, device: torch.device) -> ReplayRows:
    return ReplayRows(rows.clean.to(device), rows.noisy.to(device), rows.targets.to(device))


def _idle_loss(
    model: torch.nn.Module,
    rows: ReplayRows | None,
    block_size: int,
    pad_token_id: int,
    device: torch.device,
    accelerator: Any,
    config: RLConfig,
) -> torch.Tensor:
    """A zero loss through every parameter: lets a rank with no rows join the minibatch's all-reduce."""
    if rows is None:
        clean = torch.full((1, block_size), pad_token_id, dtype=torch.long, device=device)
        rows = ReplayRows(clean, clean.clone(), torch.zeros_like(clean, dtype=torch.bool))
    with autocast(accelerator, config.setup):
        return packed_token_logprobs(model, pack_replay(rows, block_size)).sum() * 0.0
