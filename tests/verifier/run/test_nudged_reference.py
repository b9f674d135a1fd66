"""Discrete outputs at the reference's ties: accepted only where its own answer moves under a nudge."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
import torch
import torch.nn as nn
from cudice.verifier.run.nudged_reference import nudged_outputs
from cudice.verifier.run.tolerance import NUDGE_MAX_SHARE, NoExact, compare_outputs


class ArgMax0(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.argmax(x, dim=0)


class CountingArgMax(nn.Module):
    """An argmax with state: each call adds one to a buffer (the judge's trials must not see it move)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("calls", torch.zeros((), dtype=torch.long))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return torch.argmax(x, dim=0)


def _last_on_ties(x: torch.Tensor) -> torch.Tensor:
    return (x.shape[0] - 1) - torch.argmax(x.flip(0), dim=0)


def _tied(columns: int, ties: int, seed: int = 0) -> torch.Tensor:
    """16 x `columns` randn values with `ties` columns whose maximum is tied between rows 3 and 9."""
    x = torch.randn(16, columns, generator=torch.Generator().manual_seed(seed))
    x[3, :ties] = x[9, :ties] = x[:, :ties].abs().max(0).values + 1.0
    return x


def _compare(model: nn.Module, x: torch.Tensor, cand: torch.Tensor) -> Any:
    return compare_outputs(
        model(x), cand, 1e-2, 1e-2, nudged=lambda: nudged_outputs(model, [x], contextlib.nullcontext)
    )


def test_an_argmax_that_keeps_the_last_of_tied_maxima_passes_with_a_note() -> None:
    x = _tied(4096, 20)
    cand = _last_on_ties(x)
    assert int((cand != torch.argmax(x, dim=0)).sum()) == 20
    plain = compare_outputs(torch.argmax(x, dim=0), cand, 1e-2, 1e-2)  # no second opinion: equality
    assert not plain.ok and plain.rule == "integer"
    cmp = _compare(ArgMax0(), x, cand)
    assert cmp.ok, cmp.why
    assert "20 of 4096 elements" in cmp.tie_note


def test_a_wrong_index_where_the_reference_does_not_tie_fails_and_says_where() -> None:
    x = _tied(4096, 20)
    cand = _last_on_ties(x)
    cand[100] = (cand[100] + 1) % 16  # column 100 has no tie
    cmp = _compare(ArgMax0(), x, cand)
    assert not cmp.ok and cmp.rule == "integer"
    assert "1 of them are not ties" in cmp.why and "flat index 100" in cmp.why


def test_at_a_tie_only_a_value_the_reference_gives_is_accepted() -> None:
    x = _tied(4096, 20)
    cand = _last_on_ties(x)
    cand[0] = 12  # a tie of rows 3 and 9, answered with neither
    cmp = _compare(ArgMax0(), x, cand)
    assert not cmp.ok and "flat index 0" in cmp.why


def test_ties_beyond_the_share_fail() -> None:
    columns = 4096
    ties = int(NUDGE_MAX_SHARE * columns) + 10
    x = _tied(columns, ties)
    cmp = _compare(ArgMax0(), x, _last_on_ties(x))
    assert not cmp.ok and "more than 1%" in cmp.why


def test_a_bf16_argmax_of_fp32_values_fails_though_it_is_right_at_the_ties() -> None:
    x = _tied(4096, 20)
    cand = torch.argmax(x.bfloat16().float(), dim=0)  # decided in bf16: near-ties go its way
    cmp = _compare(ArgMax0(), x, cand)
    assert not cmp.ok and cmp.rule == "integer"


def test_the_nudged_runs_leave_the_reference_and_the_inputs_as_they_were() -> None:
    model = CountingArgMax()
    x = _tied(256, 4)
    kept = x.clone()
    runs = nudged_outputs(model, [x], contextlib.nullcontext)
    assert int(model.calls) == 0 and torch.equal(x, kept)
    assert len(runs) == 4
    # the ties are broken one way in some runs and the other way in others
    assert {int(v) for run in runs for v in run[0][:4]} == {3, 9}  # type: ignore[index]


def test_no_floating_input_no_second_opinion() -> None:
    with pytest.raises(NoExact, match="no floating input"):
        nudged_outputs(ArgMax0(), [torch.arange(6).view(2, 3)], contextlib.nullcontext)
    idx = torch.arange(6).view(2, 3)
    cmp = compare_outputs(
        ArgMax0()(idx),
        torch.zeros(3, dtype=torch.long),
        1e-2,
        1e-2,
        nudged=lambda: nudged_outputs(ArgMax0(), [idx], contextlib.nullcontext),
    )
    assert not cmp.ok and "integer outputs must be equal" in cmp.why
