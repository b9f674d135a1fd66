"""run/reference_ties.py for cummax/cummin and max pooling with indices: an honest kernel that keeps
another of tied values passes (their indices are tie sets), a wrong index fails; the values these ops
return are floating and compared as floats, where ties change nothing."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from cudice.verifier.run.reference_ties import second_opinion
from cudice.verifier.run.tolerance import compare_outputs
from test_reference_ties import Pick  # a module whose forward is the function it holds


def _compare(model: nn.Module, xs: list[Any], cand: Any) -> Any:
    ref = model(*[x.clone() for x in xs])
    return compare_outputs(
        ref, cand, 1e-2, 1e-2, ties=lambda: second_opinion(model, xs, ref, contextlib.nullcontext)
    )


def _levels(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    """Values on 9 levels with a ReLU's zeros: exact ties everywhere (no nudge breaks them)."""
    x = torch.randint(-4, 5, shape, generator=torch.Generator().manual_seed(seed)).float()
    return torch.relu(x) * 0.75


def _first_cum(x: torch.Tensor, dim: int, better: Any) -> torch.Tensor:
    """The honest stand-in's cummax (`torch.gt`) or cummin (`torch.lt`) indices: the first index of
    the running extreme on ties, where PyTorch's CPU kernel keeps the last."""
    x = x.movedim(dim, -1)
    idx = torch.zeros(x.shape, dtype=torch.long)
    best = x[..., 0].clone()
    at = torch.zeros(x.shape[:-1], dtype=torch.long)
    for i in range(x.shape[-1]):
        take = better(x[..., i], best)
        best = torch.where(take, x[..., i], best)
        at = torch.where(take, torch.full_like(at, i), at)
        idx[..., i] = at
    return idx.movedim(-1, dim)


@pytest.mark.parametrize(("op", "better"), [(torch.cummax, torch.gt), (torch.cummin, torch.lt)])
def test_a_scan_keeping_the_first_of_tied_extremes_passes_and_a_wrong_index_fails(
    op: Any, better: Any
) -> None:
    x = _levels((8, 64), 1)
    model = Pick(lambda x: op(x, dim=1).indices)
    ref = model(x)
    honest = _first_cum(x, 1, better)
    assert not torch.equal(honest, ref)  # the stand-in breaks the ties the other way
    assert torch.equal(x.gather(1, honest), x.gather(1, ref))
    cmp = _compare(model, [x], honest)
    assert cmp.ok and "other indices of values equal" in cmp.tie_note, cmp.why
    # the values beside them are floating: equal however the ties went
    both = Pick(lambda x: tuple(op(x, dim=1)))
    cmp = _compare(both, [x], (op(x, dim=1).values, honest))
    assert cmp.ok, cmp.why
    # a wrong index: at the first place whose prefix holds another value than its extreme, that value
    extreme = x.gather(1, ref)
    i = int((x[0] != extreme[0]).nonzero()[0, 0])
    wrong = honest.clone()
    wrong[0, i] = int((x[0, : i + 1] != extreme[0, i]).nonzero()[0, 0])
    cmp = _compare(model, [x], wrong)
    assert not cmp.ok and cmp.rule == "integer" and "select other values" in cmp.why
    # an index past its place that selects an equal value: the extreme's later repeat, ahead of time
    row = x[0]
    later = next(
        (i, j)
        for i in range(row.numel())
        for j in range(i + 1, row.numel())
        if row[j] == extreme[0, i] and int(honest[0, i]) != j
    )
    ahead = honest.clone()
    ahead[0, later[0]] = later[1]
    assert x[0, ahead[0, later[0]]] == extreme[0, later[0]]  # the value it selects is right
    cmp = _compare(model, [x], ahead)
    assert not cmp.ok and cmp.rule == "integer" and "past their place" in cmp.why


def _last_in_window_2d(x: torch.Tensor, k: int) -> torch.Tensor:
    """The honest stand-in's max_pool2d(k, stride k) indices: the last place of the window's maximum
    on ties (PyTorch keeps the first), as flat places in the plane."""
    h, w = x.shape[-2:]
    win = x.unfold(2, k, k).unfold(3, k, k)  # (N, C, H/k, W/k, k, k)
    flat = win.reshape(*win.shape[:4], k * k).flip(-1)
    pos = (k * k - 1) - flat.argmax(-1)  # (N, C, H/k, W/k): place in the window
    rows = torch.arange(h // k).view(-1, 1) * k + pos // k
    cols = torch.arange(w // k).view(1, -1) * k + pos % k
    return rows * w + cols


def test_a_max_pool_keeping_the_last_of_tied_maxima_passes_and_a_wrong_index_fails() -> None:
    x = _levels((2, 3, 8, 8), 2)
    for model in (
        Pick(lambda x: F.max_pool2d(x, 2, return_indices=True)),
        Pick(lambda x: nn.MaxPool2d(2, return_indices=True)(x)),
        Pick(lambda x: F.max_pool2d_with_indices(x, 2)),
    ):
        values, ref = model(x)
        honest = _last_in_window_2d(x, 2)
        assert not torch.equal(honest, ref)
        cmp = _compare(model, [x], (values, honest))
        assert cmp.ok and "other indices of values equal" in cmp.tie_note, cmp.why
        wrong = honest.clone()
        plane = x.reshape(2, 3, 64)
        # the first output place whose window holds two values: its index moved to the other one
        spots = (plane.gather(2, ref.reshape(2, 3, -1)) != plane.amin(-1, keepdim=True)).nonzero()
        b, ch, o = (int(v) for v in spots[0])
        lower = int(
            (plane[b, ch] < plane[b, ch].gather(0, ref.reshape(2, 3, -1)[b, ch, o : o + 1])).nonzero()[0, 0]
        )
        wrong.reshape(2, 3, -1)[b, ch, o] = lower
        cmp = _compare(model, [x], (values, wrong))
        assert not cmp.ok and cmp.rule == "integer" and "select other values" in cmp.why
        out_of_plane = honest.clone()
        out_of_plane[0, 0, 0, 0] = 64
        assert not _compare(model, [x], (values, out_of_plane)).ok


@pytest.mark.parametrize(
    ("fn", "shape", "spatial"),
    [
        (lambda x: F.max_pool1d(x, 4, return_indices=True), (2, 3, 32), 1),
        (lambda x: F.max_pool1d(x, 4, return_indices=True), (3, 32), 1),  # unbatched
        (lambda x: F.adaptive_max_pool1d(x, 5, return_indices=True), (2, 3, 32), 1),
        (lambda x: F.max_pool2d(x, 3, 1, 1, return_indices=True), (3, 8, 8), 2),  # unbatched, overlapping
        (lambda x: F.adaptive_max_pool2d(x, 3, return_indices=True), (2, 3, 8, 8), 2),
        (lambda x: F.max_pool3d(x, 2, return_indices=True), (1, 2, 4, 4, 4), 3),
        (lambda x: F.adaptive_max_pool3d(x, 3, return_indices=True), (1, 2, 5, 5, 5), 3),
    ],
)
def test_every_pool_with_indices_has_a_tie_set_over_its_planes(
    fn: Any, shape: tuple[int, ...], spatial: int
) -> None:
    x = _levels(shape, 3)
    model = Pick(fn)
    values, ref = model(x)
    evidence = second_opinion(model, [x], (values, ref), contextlib.nullcontext)
    assert set(evidence.sets) == {1}  # the indices; the values are floating
    planes = x.reshape(*shape[:-spatial], -1)  # (*lead, places)
    lead, places = planes.shape[:-1], planes.shape[-1]
    picked = planes.gather(-1, ref.reshape(*lead, -1))  # (*lead, outputs)
    # the windows, read from the pool itself: place j is in output o's window where the pool of an
    # input holding 1 at j (and -1 elsewhere) gives 1 at o
    member = torch.stack(
        [
            fn(torch.where(torch.arange(places) == j, 1.0, -1.0).expand(*lead, places).reshape(shape))[0] == 1
            for j in range(places)
        ]
    ).reshape(places, *lead, -1)[(slice(None), *(0,) * len(lead))]  # (places, outputs)
    same = planes.unsqueeze(-2) == picked.unsqueeze(-1)  # (*lead, outputs, places)
    # the last place of its window holding each picked value (PyTorch keeps the first): honest
    last = ((same & member.T).int() * torch.arange(1, places + 1)).argmax(-1).reshape(ref.shape)
    assert not torch.equal(last, ref)
    cmp = _compare(model, [x], (values, last))
    assert cmp.ok, cmp.why
    # a place outside the window that holds the same value: rejected
    outside = same & ~member.T
    if outside.any():
        spot = outside.nonzero()[0].tolist()
        wrong = last.reshape(*lead, -1).clone()
        wrong[tuple(spot[:-1])] = spot[-1]
        cmp = _compare(model, [x], (values, wrong.reshape(ref.shape)))
        assert not cmp.ok and "outside their window" in cmp.why
    wrong = last.clone().reshape(-1)
    wrong[0] = int((planes.reshape(-1, planes.shape[-1])[0] != picked.reshape(-1)[0]).nonzero()[0, 0])
    assert not _compare(model, [x], (values, wrong.reshape(ref.shape))).ok
