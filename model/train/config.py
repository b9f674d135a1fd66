"""Run-wide configuration of the training jobs: `SFTConfig` and `RLConfig` (frozen, validated).

Defaults follow the DICE release (DESIGN §7): SFT lr 1e-5, 3 epochs, cutoff 6144 tokens;
BiC-RL 64 tasks × 16 samples per step, clip 0.2, KL 0.01 (k3), lr 1e-6, stage 1 infilling
for 20 steps then stage 2 end-to-end for 100 steps. Importing this module does not import torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


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
    save_every_steps: int = 0  # 0: save once at the end

    def __post_init__(self) -> None:
        _check(self.learning_rate > 0, f"learning_rate={self.learning_rate} must be > 0 (DICE used 1e-5)")
        _check(self.num_epochs >= 1, f"num_epochs={self.num_epochs} must be >= 1")
        _check(self.batch_size >= 1, f"batch_size={self.batch_size} must be >= 1")
        _check(self.grad_accum_steps >= 1, f"grad_accum_steps={self.grad_accum_steps} must be >= 1")
        _check(self.max_length >= 8, f"max_length={self.max_length} must be >= 8 tokens")
        _check(0 <= self.warmup_ratio < 1, f"warmup_ratio={self.warmup_ratio} must be in [0, 1)")
        _check(0 < self.min_noise_rate < 1, f"min_noise_rate={self.min_noise_rate} must be in (0, 1)")
        _check(self.save_every_steps >= 0, f"save_every_steps={self.save_every_steps} must be >= 0")


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
    # Rollout sampling (DICE: dynamic, threshold 0.9, temperature 1, block 4 with 4 steps).
    temperature: float = 1.0
    threshold: float = 0.9
    max_new_tokens: int = 4096
    # Reward: compiles ∧ correct, and (cudice, unlike DICE's release) the verified speedup must
    # clear this bound when it is set. None = correctness only.
    required_speedup: float | None = 1.0
    max_prompt_tokens: int = 2000  # DICE drops longer prompts (2000 infill, 1500 end-to-end)
    seed: int = 0

    def __post_init__(self) -> None:
        _check(self.stage in ("infill", "e2e"), f"stage={self.stage!r} must be 'infill' or 'e2e'")
        _check(self.num_steps >= 1, f"num_steps={self.num_steps} must be >= 1")
        _check(self.tasks_per_step >= 1, f"tasks_per_step={self.tasks_per_step} must be >= 1")
        _check(self.samples_per_task >= 2,
               f"samples_per_task={self.samples_per_task} must be >= 2: rewards are normalised within "
               "each task's group, and a group of one has no spread")
        _check(self.learning_rate > 0, f"learning_rate={self.learning_rate} must be > 0")
        _check(0 < self.clip_eps < 1, f"clip_eps={self.clip_eps} must be in (0, 1)")
        _check(self.kl_beta >= 0, f"kl_beta={self.kl_beta} must be >= 0")
        _check(self.temperature >= 0, f"temperature={self.temperature} must be >= 0")
        _check(0 < self.threshold <= 1, f"threshold={self.threshold} must be in (0, 1]")
        _check(self.max_new_tokens >= 1, f"max_new_tokens={self.max_new_tokens} must be >= 1")
        _check(self.required_speedup is None or self.required_speedup > 0,
               f"required_speedup={self.required_speedup} must be > 0 or None (correctness only)")
