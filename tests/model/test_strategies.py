"""Each reveal strategy alone, on hand-made confidences."""

from __future__ import annotations

import torch
from cudice.model.config import STRATEGY_NAMES
from cudice.model.strategies import STRATEGIES, quota_schedule


def t(rows: list[list[float]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float32)


def test_registry_matches_config_names() -> None:
    assert tuple(STRATEGIES) == STRATEGY_NAMES


def test_quota_schedule_spreads_remainder_over_first_steps() -> None:
    q = quota_schedule(torch.tensor([4, 5, 2, 0]), 4)
    assert q.tolist() == [[1, 1, 1, 1], [2, 1, 1, 1], [1, 1, 0, 0], [0, 0, 0, 0]]
    assert quota_schedule(torch.tensor([7]), 3).sum().item() == 7


def test_static_takes_quota_most_confident_masked_slots() -> None:
    conf = t([[0.1, 0.9, 0.8, 0.99], [0.5, 0.5, 0.5, 0.5]])
    masked = torch.tensor([[True, True, True, False], [True, True, True, True]])
    out = STRATEGIES["low_confidence_static"](conf, masked, torch.tensor([2, 3]), 0.9)
    assert out.tolist() == [[False, True, True, False], [True, True, True, False]]  # ties: left-most


def test_dynamic_uses_threshold_when_enough_pass_else_quota() -> None:
    conf = t([[0.95, 0.2, 0.91, 0.3], [0.5, 0.6, 0.7, 0.8], [0.9, 0.9, 0.2, 0.2]])
    masked = torch.ones(3, 4, dtype=torch.bool)
    out = STRATEGIES["low_confidence_dynamic"](conf, masked, torch.tensor([1, 2, 1]), 0.9)
    assert out.tolist() == [
        [True, False, True, False],  # two above 0.9 >= quota 1: both
        [False, False, True, True],  # none above: the 2 most confident
        [True, False, False, False],  # 0.9 is not above 0.9: quota 1, left-most of the tie
    ]


def test_dynamic_never_reveals_unmasked_slots() -> None:
    conf = t([[0.99, 0.99, 0.1, 0.1]])
    masked = torch.tensor([[False, True, True, True]])
    out = STRATEGIES["low_confidence_dynamic"](conf, masked, torch.tensor([1]), 0.5)
    assert out.tolist() == [[False, True, False, False]]


def test_sequential_is_left_to_right_among_masked() -> None:
    conf = t([[0.1, 0.9, 0.8, 0.99]])
    masked = torch.tensor([[False, True, True, True]])
    out = STRATEGIES["sequential"](conf, masked, torch.tensor([2]), 0.9)
    assert out.tolist() == [[False, True, True, False]]
