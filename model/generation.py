"""What a generation reports: `Progress` while it runs and `Generation` when it ends.

One definition for every side: the engine (`model/engine.py`) builds them, the server's model
worker sends their fields over the worker protocol (`cudice.server.workers.model_child`) and the
server rebuilds them from the events (`cudice.server.workers.model`), and the scripted engine of
the end-to-end tests returns them. This module imports nothing heavy (no torch), so the language
server may import it at any time.

Not covered: how the numbers are measured (the engine's job) and per-row records of a batch
(`cudice.model.sampler.BatchResult`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Progress:
    """After each committed block: counts so far and the seconds since the generation started."""

    num_tokens: int  # generated tokens so far (prompt and forced prefix not counted)
    num_forwards: int  # prefill + denoise + commit forwards so far
    seconds: float
    text_so_far: str = ""  # the model's answer so far (for infill: what follows the forced prefix)

    @property
    def tokens_per_second(self) -> float:
        return self.num_tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def tokens_per_forward(self) -> float:
        return self.num_tokens / self.num_forwards if self.num_forwards else 0.0


@dataclass(frozen=True, slots=True)
class Generation:
    """A finished (or cancelled) generation."""

    text: str  # e2e: the extracted code; infill: prefix + middle + suffix
    middle: str | None  # infill only: the new CUDA source
    num_tokens: int  # generated tokens (prompt and forced prefix not counted)
    num_forwards: int  # prefill + denoise + commit forwards
    tokens_per_forward: float
    seconds: float
    cancelled: bool
    step_map: tuple[int, ...] = ()  # per generated token: the denoising step that revealed it
    finish_reason: str = "length"  # "eos" | "stop_string" | "length" | "cancelled"
    raw_text: str = ""  # the model's answer as decoded, before extraction / splicing
