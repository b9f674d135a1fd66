"""BiC-RL: bi-phase curated RL — kernel infilling first, then end-to-end generation.

One RL step (DICE's configs; TraceRL's objective, arXiv 2509.06949):
  1. take the next `tasks_per_step` tasks of the easy→hard ordered list (data scheduling); with
     several processes each rank takes every world-size-th of them;
  2. roll out `samples_per_task` answers per task with the block-diffusion sampler, keeping
     each answer's blocks and step map exactly as decoded (`cudice.model.train.rollout`);
  3. reward each answer by executing it: `cudice.model.train.reward.reward_from_result` reads
     the same `VerifyResult` the editor and the benchmark read (compiles ∧ correct, and —
     cudice, not DICE's release — a bonus when the verified speedup clears `required_speedup`);
     a None reward (the verifier failed, not the kernel) is logged and left out of the update;
  4.–6. the PPO update (`cudice.model.train.ppo`): group advantages, replay, `ppo_epochs` ×
     `num_minibatches` clipped updates with the k3 KL to the pre-update policy.
Stage 2 (end-to-end) continues from the stage-1 weights, with a fresh optimizer (the stage-1
optimizer's state is released when its stage ends).

Resume: each stage writes its resume state (model, optimizer, RNG, the stage's step) to
`<stage dir>/train_state` every `save_every_steps` steps and at its end (`cudice.model.train.state`);
`run_bic_rl(..., resume=True)` continues the latest stage that has one, so the steps after the
save repeat those of an uninterrupted run (rollout seeds and minibatch orders derive from the
step). A fresh run into the same `out_dir` removes the previous run's resume states first.

Rollout and reward are injected callables (`RolloutFn`, `RewardFn`; they and `Rollout` live in
`cudice.model.train.types`), so the loop is tested with scripted rollouts and rewards;
`cudice.model.train.cli` wires the real sampler and verifier.
The config a `RolloutFn` receives carries this step's sampling seed (`seed + step·world + rank`).
Not covered: rollouts served by another process while the policy trains (they alternate here), FSDP or
DeepSpeed (refused: see `_check_backend`; DDP with LoRA fits 8B).
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from cudice.model.train.config import RLConfig
from cudice.model.train.data import RLTask, schedule
from cudice.model.train.monitor import Monitor
from cudice.model.train.ppo import ppo_update
from cudice.model.train.prepare import make_accelerator, prepare_model, save_trained
from cudice.model.train.rollout import RolloutWeights
from cudice.model.train.state import POSITION, load_train_state, save_train_state, state_dir
from cudice.model.train.types import RewardFn, RolloutFn

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StepStats:
    stage: str
    step: int
    mean_reward: float  # over every rank's scored rollouts
    num_kept_groups: int
    num_rows: int
    loss: float
    kl: float
    clip_fraction: float
    num_updates: int = 0  # optimizer steps taken on this rollout batch
    grad_norm: float = 0.0  # mean pre-clip norm over those steps
    rollout_tokens: int = 0  # replayed tokens, this rank
    tokens_per_s: float = 0.0  # rollout tokens / rollout seconds, this rank
    seconds: float = 0.0  # the whole step
    num_unscored: int = 0  # rollouts whose reward was None (the verifier failed), every rank
    replay_tokens: int = 0  # tokens of one replay pass over the kept rollouts (packed), this rank
    doubled_tokens: int = 0  # the same as doubled rows (R x 2L per rollout) would be, this rank


def _check_backend(accelerator: Any) -> None:
    """RL ranks run different numbers of forwards (their rollouts differ); FSDP's forwards are
    collectives (all-gathers) and would deadlock on that."""
    from accelerate.utils import DistributedType

    if accelerator.distributed_type in (DistributedType.FSDP, DistributedType.DEEPSPEED):
        raise ValueError(
            f"BiC-RL runs under DDP or on one device, not {accelerator.distributed_type.value}: its "
            "ranks run different numbers of forwards. For 8B use DDP with --lora-rank (fp32 base "
            "weights, 32 GB per GPU) and keep FSDP for SFT (docs/training.md)"
        )


def run_stage(
    model: torch.nn.Module,
    tasks: Sequence[RLTask],
    config: RLConfig,
    *,
    rollout_fn: RolloutFn,
    reward_fn: RewardFn,
    block_size: int,
    mask_token_id: int,
    pad_token_id: int,
    on_step: Callable[[StepStats], None] | None = None,
    accelerator: Any = None,
    cpu: bool = False,
    count_prompt_tokens: Callable[[RLTask], int] | None = None,
    monitor: Monitor | None = None,
    source_dir: str | Path | None = None,
    out_dir: str | Path | None = None,
    step_offset: int = 0,
    resume: bool = False,
    rollout_weights: RolloutWeights | None = None,
) -> list[StepStats]:
    """Run `config.num_steps` RL steps of one stage over `tasks` (already ordered easy→hard).

    `accelerator` (with `model` already prepared by it) is passed by `run_bic_rl`; without one,
    the stage makes and prepares its own. `count_prompt_tokens` enables the `max_prompt_tokens`
    filter. `out_dir` + `config.save_every_steps` write periodic checkpoints (needs `source_dir`);
    with `out_dir`, the resume state is saved with them and at the end; `resume` continues from
    it. `step_offset` numbers this stage's steps after an earlier stage's in the monitor.
    `rollout_weights` (the copy `rollout_fn` samples from) takes the master's values at the start
    and after every update. Returns the stats of the steps this call ran.
    """
    if accelerator is None:
        accelerator = make_accelerator(config.setup, seed=config.seed, cpu=cpu)
        model = accelerator.prepare(prepare_model(model, config.setup))
    _check_backend(accelerator)
    rank, world = accelerator.process_index, accelerator.num_processes
    if count_prompt_tokens is not None:  # DICE drops prompts over 2000 (infill) / 1500 (e2e) tokens
        kept_tasks = [t for t in tasks if count_prompt_tokens(t) <= config.max_prompt_tokens]
        if len(kept_tasks) < len(tasks):
            log.warning(
                "rl %s: dropped %d of %d tasks whose prompt exceeds max_prompt_tokens=%d",
                config.stage,
                len(tasks) - len(kept_tasks),
                len(tasks),
                config.max_prompt_tokens,
            )
        tasks = kept_tasks
    if not tasks:
        raise ValueError(
            f"stage {config.stage!r} has no tasks (after dropping prompts over "
            f"max_prompt_tokens={config.max_prompt_tokens}); raise max_prompt_tokens or add tasks"
        )
    torch.manual_seed(config.seed + rank)
    optimizer = accelerator.prepare(
        torch.optim.AdamW(
            [p for p in model.parameters() if p.requires_grad], lr=config.learning_rate, weight_decay=0.0
        )
    )
    first = _resume_step(accelerator, out_dir, config) if resume else 0  # restores the RNG too
    monitor = monitor or Monitor(config.num_steps, enabled=False)
    if rollout_weights is not None:  # after a resume: the loaded master
        rollout_weights.refresh(accelerator.unwrap_model(model))
    history = []
    for step in range(first, config.num_steps):
        start = time.perf_counter()
        batch = schedule(tasks, step, config.tasks_per_step)[
            rank::world
        ]  # 1. curriculum order, this rank's share
        step_config = dataclasses.replace(config, seed=config.seed + step * world + rank)
        model.eval()
        with torch.no_grad():
            rollouts = rollout_fn(batch, config.samples_per_task, step_config)  # 2. sample
        model.train()
        rollout_seconds = time.perf_counter() - start
        expected = len(batch) * config.samples_per_task
        if len(rollouts) != expected:
            raise RuntimeError(f"rollout_fn returned {len(rollouts)} rollouts, expected {expected}")
        rewards = list(reward_fn(rollouts, config))  # 3. execute and reward (None: not scored)
        if len(rewards) != len(rollouts):
            raise RuntimeError(f"reward_fn returned {len(rewards)} rewards for {len(rollouts)} rollouts")
        scored = [r for r in rewards if r is not None]
        figures = ppo_update(
            model,
            optimizer,
            accelerator,
            rollouts,
            rewards,
            config,
            block_size=block_size,
            mask_token_id=mask_token_id,
            pad_token_id=pad_token_id,
            step=step,
        )  # 4.-6.
        if rollout_weights is not None:  # the next rollouts sample the updated policy
            rollout_weights.refresh(accelerator.unwrap_model(model))
        reward_sum = torch.tensor(
            [float(sum(scored)), float(len(scored)), float(len(rewards) - len(scored))],
            device=accelerator.device,
        )
        total_reward, total_count, total_unscored = (
            accelerator.reduce(reward_sum, "sum") if world > 1 else reward_sum
        ).tolist()
        if total_unscored:
            log.warning(
                "rl %s step %d: %d rollouts not scored (verifier failures), left out of the update",
                config.stage,
                step,
                int(total_unscored),
            )
        tokens = sum(len(r.response_ids) for r in rollouts)
        stats = StepStats(
            config.stage,
            step,
            total_reward / max(total_count, 1.0),
            int(figures["num_kept_groups"]),
            int(figures["num_rows"]),
            figures["loss"],
            figures["kl"],
            figures["clip_fraction"],
            int(figures["num_updates"]),
            figures["grad_norm"],
            tokens,
            tokens / rollout_seconds if rollout_seconds > 0 else 0.0,
            time.perf_counter() - start,
            int(total_unscored),
            int(figures.get("replay_tokens", 0)),
            int(figures.get("doubled_tokens", 0)),
        )
        history.append(stats)
        log.info(
            "rl %s step %d reward %.3f groups %d loss %.4f clip %.3f kl %.2e",
            config.stage,
            step,
            stats.mean_reward,
            stats.num_kept_groups,
            stats.loss,
            stats.clip_fraction,
            stats.kl,
        )
        # The record's "step" is the run's (1-based, over both stages), as in SFT's records and
        # TensorBoard; the stage's own 0-based index travels as "stage_step".
        record = dataclasses.asdict(stats)
        record["stage_step"] = record.pop("step")
        monitor.log(step_offset + step + 1, record)
        if on_step and accelerator.is_main_process:
            on_step(stats)
        if out_dir is not None and config.save_every_steps and (step + 1) % config.save_every_steps == 0:
            save_trained(
                accelerator,
                model,
                _require_source(source_dir),
                out_dir,
                step=step + 1,
                metrics={"mean_reward": stats.mean_reward, "stage": config.stage},
            )
            if step + 1 < config.num_steps:
                save_train_state(accelerator, out_dir, {"stage": config.stage, "step": step + 1})
    if out_dir is not None and first < config.num_steps:
        save_train_state(accelerator, out_dir, {"stage": config.stage, "step": config.num_steps})
    # the stage's optimizer is done: drop the accelerator's reference so its state can be freed
    # (the next stage, and any later save_state/load_state, see only the next stage's optimizer)
    accelerator._optimizers.remove(optimizer)
    return history


def _resume_step(accelerator: Any, out_dir: str | Path | None, config: RLConfig) -> int:
    """Load the resume state saved in `out_dir` (model, this stage's optimizer, RNG); its step."""
    if out_dir is None:
        raise ValueError("resume needs out_dir (the stage directory holding train_state/)")
    position = load_train_state(accelerator, out_dir)
    if position.get("stage") != config.stage:
        raise ValueError(
            f"--resume: {state_dir(out_dir)} belongs to stage {position.get('stage')!r}, not "
            f"{config.stage!r}; point --out at the RL run's directory"
        )
    return int(position["step"])


def _require_source(source_dir: str | Path | None) -> str | Path:
    if source_dir is None:
        raise ValueError("saving a checkpoint needs source_dir (the checkpoint training started from)")
    return source_dir


def run_bic_rl(
    model: torch.nn.Module,
    infill_tasks: Sequence[RLTask],
    e2e_tasks: Sequence[RLTask],
    infill_config: RLConfig,
    e2e_config: RLConfig,
    *,
    rollout_fn: RolloutFn,
    reward_fn: RewardFn,
    block_size: int,
    mask_token_id: int,
    pad_token_id: int,
    source_dir: str | Path | None = None,
    out_dir: str | Path | None = None,
    on_step: Callable[[StepStats], None] | None = None,
    cpu: bool = False,
    count_prompt_tokens: Callable[[RLTask], int] | None = None,
    monitor: Monitor | None = None,
    resume: bool = False,
    rollout_weights: RolloutWeights | None = None,
) -> dict[str, list[StepStats]]:
    """Stage 1 (infilling) then stage 2 (end-to-end) from the stage-1 weights; saves after each.

    Both stages share one accelerator and one prepared model (the stage-1 config's precision,
    checkpointing and LoRA setup); each stage gets a fresh optimizer, as DICE's second run does.
    `resume` continues the run saved in `out_dir` (module docstring); the stats returned are
    those of the steps this call ran.
    """
    if infill_config.stage != "infill" or e2e_config.stage != "e2e":
        raise ValueError("run_bic_rl needs an RLConfig with stage='infill' then one with stage='e2e'")
    if infill_config.setup != e2e_config.setup:
        raise ValueError("both BiC-RL stages must share one ModelSetup (precision, checkpointing, LoRA)")
    accelerator = make_accelerator(infill_config.setup, seed=infill_config.seed, cpu=cpu)
    model = accelerator.prepare(prepare_model(model, infill_config.setup))
    common: dict[str, Any] = {
        "rollout_fn": rollout_fn,
        "reward_fn": reward_fn,
        "block_size": block_size,
        "mask_token_id": mask_token_id,
        "pad_token_id": pad_token_id,
        "on_step": on_step,
        "accelerator": accelerator,
        "count_prompt_tokens": count_prompt_tokens,
        "monitor": monitor,
        "source_dir": source_dir,
        "rollout_weights": rollout_weights,
    }
    resume_at = _resume_stage(accelerator, out_dir, resume)
    out: dict[str, list[StepStats]] = {"infill": [], "e2e": []}
    offset = 0
    for name, tasks, cfg in (("infill", infill_tasks, infill_config), ("e2e", e2e_tasks, e2e_config)):
        stage_dir = _stage_dir(out_dir, name)
        if resume_at == "e2e" and name == "infill":  # done: its weights come with the stage-2 state
            offset += cfg.num_steps
            continue
        out[name] = run_stage(
            model, tasks, cfg, out_dir=stage_dir, step_offset=offset, resume=name == resume_at, **common
        )
        offset += cfg.num_steps
        if stage_dir is not None and out[name]:
            last = out[name][-1]
            save_trained(
                accelerator,
                model,
                _require_source(source_dir),
                stage_dir,
                step=last.step + 1,
                metrics={"mean_reward": last.mean_reward, "stage": name},
            )
    return out


def _stage_dir(out_dir: str | Path | None, stage: str) -> Path | None:
    return Path(out_dir) / f"stage-{stage}" if out_dir is not None else None


def _resume_stage(accelerator: Any, out_dir: str | Path | None, resume: bool) -> str:
    """The stage a resumed run continues ("infill" or "e2e"), or "" for a fresh run, whose
    out_dir then loses an earlier run's resume states (so they cannot be resumed into this one)."""
    if out_dir is None:
        if resume:
            raise ValueError("resume needs out_dir (the directory of the RL run to continue)")
        return ""
    infill, e2e = Path(out_dir) / "stage-infill", Path(out_dir) / "stage-e2e"
    if resume:  # stage 1 without a state: load_train_state says how to fix it
        return "e2e" if (state_dir(e2e) / POSITION).is_file() else "infill"
    if accelerator.is_main_process:
        for stage in (infill, e2e):
            shutil.rmtree(state_dir(stage), ignore_errors=True)
    accelerator.wait_for_everyone()
    return ""
