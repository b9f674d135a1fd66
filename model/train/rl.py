"""BiC-RL: bi-phase curated RL — kernel infilling first, then end-to-end generation.

One RL step (DESIGN §7, DICE's configs):
  1. take the next `tasks_per_step` tasks of the easy→hard ordered list (data scheduling);
  2. roll out `samples_per_task` answers per task with the block-diffusion sampler, keeping
     each answer's step map (which denoising step revealed each token);
  3. reward each answer by executing it: `reward_from_result` reads the same `VerifyResult`
     the editor and the benchmark read (compiles ∧ correct, and — cudice, not DICE's release —
     the verified speedup must clear `required_speedup`);
  4. z-score rewards within each task's group; drop groups with zero spread;
  5. replay each kept answer's reveal order as training rows; `logp_old` from a no-grad pass
     with the pre-update weights; PPO-clip surrogate + β·KL(k3) to that pre-update policy;
  6. one optimizer step (gradients accumulated over all rows of the step).
Stage 2 (end-to-end) continues from the stage-1 weights.

Rollout and reward are injected callables (`RolloutFn`, `RewardFn`), so the loop is tested with
scripted rollouts and rewards; `cudice.model.train.cli` wires the real sampler and verifier.
Not covered: multi-node rollout serving (the verifier pool fans out over local workers; use
Ray for several machines), value models, the `shrink` option of TraceRL.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from cudice.model.train.checkpoint import save_checkpoint
from cudice.model.train.config import RLConfig
from cudice.model.train.data import RLTask, schedule
from cudice.model.train.objective import clipped_policy_loss, group_advantages, replay_rows, token_logprobs

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Rollout:
    """One sampled answer: token ids, its step map, and the text the reward is computed on."""

    task: RLTask
    prompt_ids: list[int]
    response_ids: list[int]
    step_map: list[int]
    text: str


RolloutFn = Callable[[Sequence[RLTask], int, RLConfig], list[Rollout]]
"""(tasks, samples_per_task, config) -> len(tasks) * samples_per_task rollouts, grouped by task."""

RewardFn = Callable[[Sequence[Rollout], RLConfig], list[float]]


def reward_from_result(result: Any, required_speedup: float | None) -> float:
    """Binary execution reward from a `cudice.verifier.result.VerifyResult`.

    Correctness only when `required_speedup` is None (DICE's released reward); otherwise the
    speedup must clear the bound beyond its measured spread (`VerifyResult.is_fast`, the same
    test as the benchmark's fast_p).
    """
    if not result.is_correct:
        return 0.0
    if required_speedup is None:
        return 1.0
    return 1.0 if result.is_fast(required_speedup) else 0.0


@dataclass(frozen=True, slots=True)
class StepStats:
    stage: str
    step: int
    mean_reward: float
    num_kept_groups: int
    num_rows: int
    loss: float
    kl: float
    clip_fraction: float


def rl_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, rollouts: Sequence[Rollout],
            rewards: Sequence[float], config: RLConfig, *, block_size: int, mask_token_id: int,
            pad_token_id: int, step: int) -> StepStats:
    """Phases 4–6 of one RL step on already rewarded rollouts."""
    # 4. group-normalised advantages; flat groups carry no signal
    advantages, keep = group_advantages(list(rewards), config.samples_per_task)
    kept = [(r, a) for r, a, k in zip(rollouts, advantages, keep, strict=True) if k and r.response_ids]
    num_groups = sum(keep[g] for g in range(0, len(keep), config.samples_per_task))
    mean_reward = sum(rewards) / max(len(rewards), 1)
    if not kept:
        return StepStats(config.stage, step, mean_reward, 0, 0, 0.0, 0.0, 0.0)
    device = next(model.parameters()).device
    # 5. replay rows and the pre-update log-probs (no grad): the KL anchor and the ratio's base
    rows = [replay_rows(r.prompt_ids, r.response_ids, r.step_map, block_size=block_size,
                        mask_token_id=mask_token_id, pad_token_id=pad_token_id) for r, _ in kept]
    rows = [type(x)(x.clean.to(device), x.noisy.to(device), x.targets.to(device)) for x in rows]
    model.eval()
    with torch.no_grad():
        old = [token_logprobs(model, x, block_size) for x in rows]
    model.train()
    # 6. one optimizer step over every row of this step (gradients accumulated per rollout)
    optimizer.zero_grad(set_to_none=True)
    total_rows = sum(x.clean.shape[0] for x in rows)
    loss_sum = kl_sum = clip_sum = 0.0
    for (rollout, adv), x, logp_old in zip(kept, rows, old, strict=True):
        logp_new = token_logprobs(model, x, block_size)  # (R, L)
        advantage = torch.full((x.clean.shape[0],), adv, device=device)
        loss, stats = clipped_policy_loss(logp_new, logp_old, advantage, x.targets,
                                          len(rollout.response_ids), config.clip_eps, config.kl_beta)
        weight = x.clean.shape[0] / total_rows  # mean over all rows of the step
        (loss * weight).backward()
        loss_sum += float(loss.detach()) * weight
        kl_sum += stats["kl"] * weight
        clip_sum += stats["clip_fraction"] * weight
    torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
    optimizer.step()
    return StepStats(config.stage, step, mean_reward, num_groups, total_rows, loss_sum, kl_sum, clip_sum)


def run_stage(model: torch.nn.Module, tasks: Sequence[RLTask], config: RLConfig, *, rollout_fn: RolloutFn,
              reward_fn: RewardFn, block_size: int, mask_token_id: int, pad_token_id: int,
              on_step: Callable[[StepStats], None] | None = None) -> list[StepStats]:
    """Run `config.num_steps` RL steps of one stage over `tasks` (already ordered easy→hard)."""
    if not tasks:
        raise ValueError(f"stage {config.stage!r} has no tasks")
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate, weight_decay=0.0)
    history = []
    for step in range(config.num_steps):
        batch = schedule(tasks, step, config.tasks_per_step)  # 1. curriculum order
        model.eval()
        rollouts = rollout_fn(batch, config.samples_per_task, config)  # 2. sample
        expected = len(batch) * config.samples_per_task
        if len(rollouts) != expected:
            raise RuntimeError(f"rollout_fn returned {len(rollouts)} rollouts, expected {expected}")
        rewards = reward_fn(rollouts, config)  # 3. execute and reward
        stats = rl_step(model, optimizer, rollouts, rewards, config, block_size=block_size,
                        mask_token_id=mask_token_id, pad_token_id=pad_token_id, step=step)
        history.append(stats)
        log.info("rl %s step %d reward %.3f groups %d loss %.4f", config.stage, step,
                 stats.mean_reward, stats.num_kept_groups, stats.loss)
        if on_step:
            on_step(stats)
    return history


def run_bic_rl(model: torch.nn.Module, infill_tasks: Sequence[RLTask], e2e_tasks: Sequence[RLTask],
               infill_config: RLConfig, e2e_config: RLConfig, *, rollout_fn: RolloutFn, reward_fn: RewardFn,
               block_size: int, mask_token_id: int, pad_token_id: int, source_dir: str | Path | None = None,
               out_dir: str | Path | None = None,
               on_step: Callable[[StepStats], None] | None = None) -> dict[str, list[StepStats]]:
    """Stage 1 (infilling) then stage 2 (end-to-end) from the stage-1 weights; saves after each."""
    if infill_config.stage != "infill" or e2e_config.stage != "e2e":
        raise ValueError("run_bic_rl needs an RLConfig with stage='infill' then one with stage='e2e'")
    common = {"rollout_fn": rollout_fn, "reward_fn": reward_fn, "block_size": block_size,
              "mask_token_id": mask_token_id, "pad_token_id": pad_token_id, "on_step": on_step}
    out: dict[str, list[StepStats]] = {}
    for name, tasks, cfg in (("infill", infill_tasks, infill_config), ("e2e", e2e_tasks, e2e_config)):
        out[name] = run_stage(model, tasks, cfg, **common)  # type: ignore[arg-type]
        if out_dir is not None and source_dir is not None:
            last = out[name][-1]
            save_checkpoint(model, source_dir, Path(out_dir) / f"stage-{name}", step=last.step + 1,
                            metrics={"mean_reward": last.mean_reward, "stage": name})
    return out
