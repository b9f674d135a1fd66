"""Reveal strategies: which masked slots of a block become final at one denoising step.

Every strategy has one signature:

    strategy(confidence (B, L) float, is_masked (B, L) bool, quota (B,) long, threshold: float)
        -> reveal (B, L) bool, a subset of is_masked

`confidence` is the probability of the token sampled at each slot (SDAR's definition, not the
max probability); `quota` is this step's share of the block's masks (see `quota_schedule`).
Ties are broken towards the left-most slot, so results are deterministic.

Not covered: entropy-bounded reveal (SDAR's `entropy_bounded`, broken in its reference loop) and
re-masking of revealed tokens (SDAR never re-masks).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from cudice.model.config import STRATEGY_NAMES

Strategy = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, float], torch.Tensor]


def quota_schedule(num_masked: torch.Tensor, steps: int) -> torch.Tensor:
    """Per-step reveal quota: `num_masked // steps` each, the remainder spread over the first steps.

    num_masked (B,) long -> (B, steps) long; each row sums to num_masked (SDAR generate.py).
    """
    base = num_masked // steps  # (B,)
    rem = num_masked % steps  # (B,)
    step = torch.arange(steps, device=num_masked.device)  # (S,)
    return base[:, None] + (step[None, :] < rem[:, None]).long()  # (B, S)


def _top_by_score(score: torch.Tensor, is_masked: torch.Tensor, quota: torch.Tensor) -> torch.Tensor:
    """The `quota[b]` masked slots of row b with the highest score (stable: left-most wins ties)."""
    score = score.masked_fill(~is_masked, float("-inf"))  # (B, L)
    order = torch.sort(score, dim=1, descending=True, stable=True).indices
    rank = torch.empty_like(order)
    rank.scatter_(1, order, torch.arange(score.shape[1], device=score.device).expand_as(order))
    return (rank < quota[:, None]) & is_masked  # (B, L)


def low_confidence_static(
    confidence: torch.Tensor, is_masked: torch.Tensor, quota: torch.Tensor, threshold: float
) -> torch.Tensor:
    """Exactly the quota's worth of the most confident masked slots."""
    return _top_by_score(confidence, is_masked, quota)


def low_confidence_dynamic(
    confidence: torch.Tensor, is_masked: torch.Tensor, quota: torch.Tensor, threshold: float
) -> torch.Tensor:
    """Every masked slot above `threshold`; if fewer than the quota pass, the quota's most confident."""
    above = is_masked & (confidence > threshold)  # (B, L)
    enough = above.sum(dim=1) >= quota  # (B,)
    return torch.where(enough[:, None], above, _top_by_score(confidence, is_masked, quota))


def sequential(
    confidence: torch.Tensor, is_masked: torch.Tensor, quota: torch.Tensor, threshold: float
) -> torch.Tensor:
    """The quota's worth of left-most masked slots (autoregressive order inside the block)."""
    position = torch.arange(is_masked.shape[1], device=is_masked.device, dtype=torch.float32)
    return _top_by_score(-position.expand(is_masked.shape), is_masked, quota)


# The registry: each strategy under its function's name, in the order of `STRATEGY_NAMES`
# (model/config.py, the torch-free list the settings schema and the CLI offer).
STRATEGIES: dict[str, Strategy] = {
    f.__name__: f for f in (low_confidence_dynamic, low_confidence_static, sequential)
}
assert tuple(STRATEGIES) == STRATEGY_NAMES, (
    f"the registry's strategies {tuple(STRATEGIES)} differ from cudice.model.config.STRATEGY_NAMES "
    f"{STRATEGY_NAMES}: add the new name there (or the new function here)"
)
