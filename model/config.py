"""Sampler configuration: how one block-diffusion generation is decoded.

`SamplerConfig` is per-call decoding policy (block length, steps, strategy, filters, limits).
It is built from the server's settings with `SamplerConfig.from_settings`. This module imports
no torch (the language server imports it).

Not covered here: which checkpoint, device or dtype (that is `load_engine`'s job), and the
prompt (see `cudice.model.prompts`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

# The reveal strategies' names, the one list of them: the registry `cudice.model.strategies.STRATEGIES`
# (torch) holds one function per name, in this order (an assertion there and tests/model/test_strategies.py
# check it); the settings schema (`cudice.sampler.strategy`), `cudice generate --strategy` and this
# module's validation read the names here, without importing torch. The first is the default.
STRATEGY_NAMES = ("low_confidence_dynamic", "low_confidence_static", "sequential")


@dataclass(frozen=True, slots=True)
class SamplerConfig:
    """Decoding policy for the block-diffusion sampler (docs/model.md).

    block_length: tokens per block; None means the checkpoint's `block_size` (DICE: 4).
    denoising_steps: most denoise forwards per block (a block's masks are revealed in at most
        this many steps; DICE evaluation: 4).
    strategy: which masked slots to reveal at each step (`STRATEGY_NAMES`).
    threshold: confidence above which `low_confidence_dynamic` reveals a slot (DICE RL: 0.9).
    temperature: 0 is greedy; otherwise logits are divided by it before top-k/top-p.
    top_k: keep the k most likely tokens; 0 disables.
    top_p: nucleus filter; 1 disables.
    max_new_tokens: most generated tokens (the prompt tail sharing the first block not counted).
    stop_strings: decoding stops after the block where one appears; the text is cut before it.
    seed: seeds the sampler's random generator (only used when temperature > 0).
    fuse_commit: commit a finished block inside the next block's first denoise forward instead of
        a forward of its own (identical tokens; fewer forwards). Off by default (opt-in;
        docs/benchmarks.md has its timings).
    """

    block_length: int | None = None
    denoising_steps: int = 4
    strategy: str = STRATEGY_NAMES[0]
    threshold: float = 0.9
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    max_new_tokens: int = 2048
    stop_strings: tuple[str, ...] = ()
    seed: int | None = None
    fuse_commit: bool = False

    def __post_init__(self) -> None:
        def bad(field: str, value: Any, rule: str, fix: str) -> ValueError:
            return ValueError(f"SamplerConfig.{field}={value!r} is invalid: {rule}; {fix}")

        def is_int(value: Any) -> bool:
            return isinstance(value, int) and not isinstance(value, bool)

        def is_num(value: Any) -> bool:
            return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)

        if self.block_length is not None and (
            not is_int(self.block_length) or not 1 <= self.block_length <= 256
        ):
            raise bad(
                "block_length",
                self.block_length,
                "it must be an integer in 1..256 or None",
                "use None to take the checkpoint's block_size (DICE checkpoints: 4)",
            )
        if not is_int(self.denoising_steps) or not 1 <= self.denoising_steps <= 256:
            raise bad(
                "denoising_steps",
                self.denoising_steps,
                "it must be an integer in 1..256",
                "use the block length (one token per step) or fewer",
            )
        if self.strategy not in STRATEGY_NAMES:
            raise bad(
                "strategy",
                self.strategy,
                f"it must be one of {', '.join(STRATEGY_NAMES)}",
                "pick one of those names",
            )
        if not is_num(self.threshold) or not 0.0 <= self.threshold <= 1.0:
            raise bad(
                "threshold", self.threshold, "it must be a number in [0, 1]", "DICE's RL rollouts use 0.9"
            )
        if not is_num(self.temperature) or self.temperature < 0:
            raise bad(
                "temperature", self.temperature, "it must be a number >= 0", "use 0 for greedy decoding"
            )
        if not is_int(self.top_k) or self.top_k < 0:
            raise bad("top_k", self.top_k, "it must be an integer >= 0", "use 0 to disable the top-k filter")
        if not is_num(self.top_p) or not 0.0 < self.top_p <= 1.0:
            raise bad(
                "top_p", self.top_p, "it must be a number in (0, 1]", "use 1.0 to disable the top-p filter"
            )
        if not is_int(self.max_new_tokens) or self.max_new_tokens < 1:
            raise bad(
                "max_new_tokens",
                self.max_new_tokens,
                "it must be an integer >= 1",
                "DICE generates up to 4096 tokens",
            )
        stop_strings: Any = self.stop_strings  # checked at run time: callers may pass a str or a list
        if isinstance(stop_strings, str) or not isinstance(stop_strings, tuple):
            raise bad(
                "stop_strings",
                self.stop_strings,
                "it must be a tuple of strings",
                "write stop_strings=('```',) rather than a bare string or list",
            )
        for s in self.stop_strings:
            if not isinstance(s, str) or not s:
                raise bad(
                    "stop_strings",
                    self.stop_strings,
                    "every stop string must be a non-empty string",
                    "remove the empty or non-string entries",
                )
        if not isinstance(self.fuse_commit, bool):
            raise bad("fuse_commit", self.fuse_commit, "it must be True or False", "pass a boolean")
        if self.seed is not None and not is_int(self.seed):
            raise bad("seed", self.seed, "it must be an integer or None", "use None for a fresh random seed")

    def replace(self, **changes: Any) -> SamplerConfig:
        """A copy with `changes` applied (validated again)."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_settings(cls, settings: Any, **overrides: Any) -> SamplerConfig:
        """Build from `cudice.server.settings.Settings` (its `sampler_*` fields), plus overrides."""
        values: dict[str, Any] = {
            "block_length": settings.sampler_block_length,
            "denoising_steps": settings.sampler_denoising_steps,
            "strategy": settings.sampler_strategy,
            "threshold": float(settings.sampler_threshold),
            "temperature": float(settings.sampler_temperature),
            "top_k": settings.sampler_top_k,
            "top_p": float(settings.sampler_top_p),
            "max_new_tokens": settings.sampler_max_new_tokens,
        }
        values.update(overrides)
        return cls(**values)
