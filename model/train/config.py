"""Run-wide configuration of the training jobs: `SFTConfig` and `RLConfig` (frozen, validated).

Defaults follow the DICE release (docs/training.md): SFT lr 1e-5, 3 epochs, cutoff 6144 tokens;
BiC-RL 64 tasks × 16 samples per step, clip 0.2, KL 0.01 (k3), lr 1e-6, stage 1 infilling
for 20 steps then stage 2 end-to-end for 100 steps. `ModelSetup` is what both jobs share: the
precision mode (`cudice.model.train.precision`), gradient checkpointing and LoRA.
Importing this module does not import torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


PRECISIONS = ("fp32", "bf16-autocast", "accelerate-bf16", "accelerate-fp16")


@dataclass(frozen=True, slots=True)
class ModelSetup:
    """How the trained model is held: weights are always fp32 (the optimizer's master copy).

    precision: "fp32" (no autocast), "bf16-autocast" (torch.autocast around each forward),
    "accelerate-bf16" / "accelerate-fp16" (accelerate's mixed precision; fp16 adds a loss scaler).
    replay_attention: how the RL update's packed replay attends — "dense" (the full (T, T) mask
    through SDPA), "sparse" (a flex-attention BlockMask that skips the tiles nobody sees), "auto"
    (the default: sparse on a GPU, dense on a CPU, where flex attention has no backward). The
    sparse path equals the dense one (CPU tests; on a GPU within bf16's rounding, compiled).
    compile_replay: on a GPU, the RL update compiles the decoder layers once
    (`objective.compile_replay_layers`: fused norms, RoPE, activations and casts); off keeps them
    eager (the first step then skips the compile's warm-up).
    lora_rank 0 trains every weight; > 0 trains LoRA adapters (peft) and saves merged weights.
    lora_dropout acts in the training forwards only: RL rollouts sample in eval mode, from a copy
    holding the merged weights (`cudice.model.train.rollout.RolloutWeights`).
    """

    precision: str = "fp32"
    gradient_checkpointing: bool = False
    replay_attention: str = "auto"
    compile_replay: bool = True
    lora_rank: int = 0
    lora_alpha: float = 16.0
    lora_dropout: float = 0.0
    lora_target_modules: tuple[str, ...] = (
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    )

    def __post_init__(self) -> None:
        _check(
            self.precision in PRECISIONS,
            f"precision={self.precision!r} must be one of {', '.join(PRECISIONS)}; bf16-autocast keeps fp32 "
            "master weights and runs the matmuls in bf16",
        )
        _check(
            self.replay_attention in ("auto", "sparse", "dense"),
            f"replay_attention={self.replay_attention!r} must be auto, sparse or dense",
        )
        _check(self.lora_rank >= 0, f"lora_rank={self.lora_rank} must be >= 0 (0 = full fine-tuning)")
        _check(self.lora_alpha > 0, f"lora_alpha={self.lora_alpha} must be > 0")
        _check(0 <= self.lora_dropout < 1, f"lora_dropout={self.lora_dropout} must be in [0, 1)")
        _check(
            bool(self.lora_target_modules), "lora_target_modules must name at least one module (e.g. q_proj)"
        )


@dataclass(frozen=True, slots=True)
class SFTConfig:
    learning_rate: float = 1e-5
    num_epochs: int = 3
    batch_size: int = 1
    grad_accum_steps: int = 1
    max_length: int = 6144  # samples longer than this (prompt + answer tokens) are dropped
    warmup_ratio: float = 0.03
    max_grad_norm: float = 1.0
    min_noise_rate: float = 1e-3
    seed: int = 0
    save_every_steps: int = 0  # 0: save once at the end; else also a checkpoint + resume state every N steps
    max_steps: int = 0  # 0: run every epoch; else stop after this many optimizer steps (resume continues)
    log_every_steps: int = 1  # loss/grad-norm are read back from the device only on these steps
    setup: ModelSetup = ModelSetup()

    def __post_init__(self) -> None:
        _check(self.learning_rate > 0, f"learning_rate={self.learning_rate} must be > 0 (DICE used 1e-5)")
        _check(self.num_epochs >= 1, f"num_epochs={self.num_epochs} must be >= 1")
        _check(self.batch_size >= 1, f"batch_size={self.batch_size} must be >= 1")
        _check(self.grad_accum_steps >= 1, f"grad_accum_steps={self.grad_accum_steps} must be >= 1")
        _check(self.max_length >= 8, f"max_length={self.max_length} must be >= 8 tokens")
        _check(0 <= self.warmup_ratio < 1, f"warmup_ratio={self.warmup_ratio} must be in [0, 1)")
        _check(0 < self.min_noise_rate < 1, f"min_noise_rate={self.min_noise_rate} must be in (0, 1)")
        _check(self.save_every_steps >= 0, f"save_every_steps={self.save_every_steps} must be >= 0")
        _check(self.max_steps >= 0, f"max_steps={self.max_steps} must be >= 0 (0 = all epochs)")
        _check(self.log_every_steps >= 1, f"log_every_steps={self.log_every_steps} must be >= 1")


@dataclass(frozen=True, slots=True)
class RLConfig:
    stage: Literal["infill", "e2e"] = "infill"
    num_steps: int = 20  # DICE: 20 for infilling, 100 for end-to-end
    tasks_per_step: int = 64
    samples_per_task: int = 16
    learning_rate: float = 1e-6
    clip_eps: float = 0.2
    kl_beta: float = 0.01
    max_grad_norm: float = 1.0
    # PPO updates per rollout batch: the kept rollouts are split into `num_minibatches` and the
    # whole batch is walked `ppo_epochs` times, one optimizer step per minibatch. Every update
    # after the first sees ratio != 1, so the clip and the KL term act (TraceRL's PPO).
    ppo_epochs: int = 1
    num_minibatches: int = 4
    # PPO's `logp_old` (the ratio's base and the KL anchor): "sampler" reads the log-probability
    # each token was drawn with (`Rollout.logprobs`: the behaviour policy, the bf16 rollout copy,
    # in the very state the replay rebuilds), so no pass over the rollouts runs before the first
    # optimizer step; "replay" scores the rollouts with the master weights before the update
    # (one no-grad forward per rollout outside the first minibatch, whose own grad forward gives
    # theirs). A rollout without recorded log-probabilities falls back to "replay".
    old_logprobs: Literal["sampler", "replay"] = "sampler"
    # Rollouts run in micro-batches whose KV cache fits this budget (GiB); see rollout.py.
    rollout_memory_gib: float = 16.0
    # Rollout sampling (DICE: dynamic, threshold 0.9, temperature 1, block 4 with 4 steps).
    temperature: float = 1.0
    threshold: float = 0.9
    max_new_tokens: int = 4096
    # Reward: compiles ∧ correct, and (cudice, unlike DICE's release) the verified speedup must
    # clear this bound when it is set. None = correctness only.
    required_speedup: float | None = 1.0
    # With required_speedup set: the reward of a correct kernel that does not clear it (slow, or
    # its timing suspicious/unresolved); a fast one gets 1. Unused for correctness only.
    correct_reward: float = 0.5
    max_prompt_tokens: int = 2000  # DICE drops longer prompts (2000 infill, 1500 end-to-end)
    seed: int = 0  # torch seed at the stage start; rollout step k samples with seed + k
    save_every_steps: int = 0  # 0: save after the stage; else also a checkpoint every N steps
    setup: ModelSetup = ModelSetup()

    def __post_init__(self) -> None:
        _check(self.stage in ("infill", "e2e"), f"stage={self.stage!r} must be 'infill' or 'e2e'")
        _check(self.num_steps >= 1, f"num_steps={self.num_steps} must be >= 1")
        _check(self.tasks_per_step >= 1, f"tasks_per_step={self.tasks_per_step} must be >= 1")
        _check(
            self.samples_per_task >= 2,
            f"samples_per_task={self.samples_per_task} must be >= 2: rewards are normalised within "
            "each task's group, and a group of one has no spread",
        )
        _check(self.learning_rate > 0, f"learning_rate={self.learning_rate} must be > 0")
        _check(0 < self.clip_eps < 1, f"clip_eps={self.clip_eps} must be in (0, 1)")
        _check(self.kl_beta >= 0, f"kl_beta={self.kl_beta} must be >= 0")
        _check(self.temperature >= 0, f"temperature={self.temperature} must be >= 0")
        _check(0 < self.threshold <= 1, f"threshold={self.threshold} must be in (0, 1]")
        _check(self.max_new_tokens >= 1, f"max_new_tokens={self.max_new_tokens} must be >= 1")
        _check(self.ppo_epochs >= 1, f"ppo_epochs={self.ppo_epochs} must be >= 1")
        _check(self.num_minibatches >= 1, f"num_minibatches={self.num_minibatches} must be >= 1")
        _check(
            self.old_logprobs in ("sampler", "replay"),
            f"old_logprobs={self.old_logprobs!r} must be 'sampler' (the rollouts' own) or 'replay' "
            "(a no-grad pass of the master weights)",
        )
        _check(self.rollout_memory_gib > 0, f"rollout_memory_gib={self.rollout_memory_gib} must be > 0")
        _check(self.max_prompt_tokens >= 1, f"max_prompt_tokens={self.max_prompt_tokens} must be >= 1")
        _check(self.save_every_steps >= 0, f"save_every_steps={self.save_every_steps} must be >= 0")
        _check(0 <= self.correct_reward <= 1, f"correct_reward={self.correct_reward} must be in [0, 1]")
        _check(
            self.required_speedup is None or self.required_speedup > 0,
            f"required_speedup={self.required_speedup} must be > 0 or None (correctness only)",
        )
