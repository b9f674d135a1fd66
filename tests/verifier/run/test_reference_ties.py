"""Discrete outputs at the reference's ties: another index of the same value where a selecting op
decided, a value the reference gives under a nudge elsewhere; nothing for random references."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
import torch
import torch.nn as nn
from cudice.verifier.run.reference_ties import NUDGE_REL, nudged_outputs, second_opinion
from cudice.verifier.run.tolerance import NUDGE_MAX_SHARE, NoExact, compare_outputs


class Pick(nn.Module):
    def __init__(self, fn: Any) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *xs: torch.Tensor) -> Any:
        return self.fn(*xs)


class Counting(nn.Module):
    """An argmax with state: each call adds one to a buffer (the judge's trials must not see it move)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("calls", torch.zeros((), dtype=torch.long))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return torch.argmax(x, dim=0)


def _last_on_ties(x: torch.Tensor) -> torch.Tensor:
    return (x.shape[0] - 1) - torch.argmax(x.flip(0), dim=0)


def _tied(columns: int, ties: int, seed: int = 0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """16 x `columns` randn values with `ties` columns whose maximum is tied between rows 3 and 9."""
    x = torch.randn(16, columns, generator=torch.Generator().manual_seed(seed))
    x[3, :ties] = x[9, :ties] = x[:, :ties].abs().max(0).values + 1.0
    return x.to(dtype)


def _compare(model: nn.Module, xs: list[Any], cand: Any) -> Any:
    ref = model(*[x.clone() for x in xs])
    return compare_outputs(
        ref, cand, 1e-2, 1e-2, ties=lambda: second_opinion(model, xs, ref, contextlib.nullcontext)
    )


ARGMAX0 = Pick(lambda x: torch.argmax(x, dim=0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_an_argmax_keeping_the_last_of_tied_maxima_passes_only_where_a_nudge_breaks_the_tie(
    dtype: torch.dtype,
) -> None:
    """PyTorch documents the first of equal maxima as argmax's answer. Two fp32 values tied by
    chance are a near-tie: moved by 2^-16 either may win, so the later index passes (the nudges).
    Equal 16-bit values get no nudge (their step is above 2^-16): the first index is the answer."""
    x = _tied(4096, 20, dtype=dtype)
    cand = _last_on_ties(x)
    assert int((cand != torch.argmax(x, dim=0)).sum()) >= 20
    plain = compare_outputs(torch.argmax(x, dim=0), cand, 1e-2, 1e-2)  # no second opinion: equality
    assert not plain.ok and plain.rule == "integer"
    ref = torch.argmax(x, dim=0)
    assert second_opinion(ARGMAX0, [x], ref, contextlib.nullcontext).sets == {}  # no tie set: first index
    cmp = _compare(ARGMAX0, [x], cand)
    if dtype == torch.float32:
        assert cmp.ok, cmp.why
        assert "near-ties" in cmp.tie_note
    else:
        assert not cmp.ok and cmp.rule == "integer"


def test_ties_the_forward_makes_count_too_sort_of_a_relu() -> None:
    """Zeros after a ReLU are tied whatever the inputs; `torch.sort` promises no order among them."""
    x = torch.randn(64, 256, generator=torch.Generator().manual_seed(1))
    model = Pick(lambda x: torch.sort(torch.relu(x), dim=1))
    values, idx = torch.sort(torch.relu(x), dim=1)
    other = idx.clone()
    other[:, :8] = other[:, :8].flip(1)  # the first zeros of each row in another order
    assert not torch.equal(other, idx)
    cmp = _compare(model, [x], (values, other))
    assert cmp.ok, cmp.why
    repeated = idx.clone()
    repeated[:, 1] = repeated[:, 0]  # still selects zeros, but not a permutation
    cmp = _compare(model, [x], (values, repeated))
    assert not cmp.ok and "repeat an index" in cmp.why


def test_indices_changed_in_place_after_the_op_are_no_tie_set() -> None:
    """`idx = argmax(x); idx += 1` keeps the argmax's place but not its meaning: no tie set (the
    nudge judges it), so an index that selects the tied value of the shifted one is no excuse."""

    def shifted(x: torch.Tensor) -> torch.Tensor:
        idx = torch.argmax(x, dim=0)
        idx += 1
        return idx

    model = Pick(shifted)
    x = _tied(4096, 20)
    ref = model(x)
    ties = second_opinion(model, [x], ref, contextlib.nullcontext)
    assert ties.sets == {}
    cand = _last_on_ties(x) + 1
    cmp = _compare(model, [x], cand)  # the nudge still finds the ties (inputs tied exactly)
    assert cmp.ok and "near-ties" in cmp.tie_note, cmp.why


def test_an_argmax_over_a_mask_keeps_pytorchs_first_hit() -> None:
    """`argmax((x > 1).int())` is the first element above 1: its ties are the answer, not rounding."""
    x = torch.randn(64, 256, generator=torch.Generator().manual_seed(5)) * 3
    first_hit = Pick(lambda x: torch.argmax((x > 1).int(), dim=1))
    as_float = Pick(lambda x: torch.argmax((x > 1).float(), dim=1))
    last_hit = _last_on_ties((x > 1).int().t()).clone()
    for model in (first_hit, as_float):
        ref = model(x)
        assert second_opinion(model, [x], ref, contextlib.nullcontext).sets == {}
        assert not _compare(model, [x], last_hit).ok


def test_a_stable_sort_has_one_right_order() -> None:
    keys = torch.randint(0, 8, (4096,), generator=torch.Generator().manual_seed(6)).float()
    model = Pick(lambda k: torch.sort(k, stable=True).indices)
    ref = model(keys)
    assert second_opinion(model, [keys], ref, contextlib.nullcontext).sets == {}
    unstable = ref.clone()
    unstable[:8] = unstable[:8].flip(0)  # the first group in another order
    assert not _compare(model, [keys], unstable).ok


def test_argmax_without_dim_keepdim_and_median_ties() -> None:
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(7))
    x[2, 3] = x[5, 7] = x.max() + 1
    model = Pick(lambda x: torch.argmax(x, keepdim=True))
    cand = torch.tensor([[5 * 16 + 7]])
    assert int(model(x)) == 2 * 16 + 3
    cmp = _compare(model, [x], cand)
    assert cmp.ok, cmp.why
    y = torch.randn(4, 9, generator=torch.Generator().manual_seed(8))
    y[:, 1] = y[:, 2] = y.median(dim=1).values  # the median tied between columns 1 and 2 (or more)
    med = Pick(lambda y: torch.median(y, dim=1).indices)
    ref = med(y)
    other = torch.where(ref == 1, 2, 1)
    cmp = _compare(med, [y], other)
    assert cmp.ok, cmp.why


def test_a_wrong_index_where_the_reference_does_not_tie_fails_and_says_where() -> None:
    x = _tied(4096, 20)
    cand = _last_on_ties(x)
    cand[100] = (cand[100] + 1) % 16  # column 100 has no tie
    cmp = _compare(ARGMAX0, [x], cand)
    assert not cmp.ok and cmp.rule == "integer"
    assert "not ties of the reference's" in cmp.why and "flat index 100" in cmp.why
    by_sort = Pick(lambda x: torch.sort(x, dim=0).indices)  # a tie set: the same, said otherwise
    order = torch.sort(x, dim=0).indices
    order[-1, 100], order[-2, 100] = order[-2, 100].clone(), order[-1, 100].clone()
    cmp = _compare(by_sort, [x], order)
    assert not cmp.ok and "select other values" in cmp.why


def test_an_index_out_of_range_fails() -> None:
    x = _tied(64, 4)
    model = Pick(lambda x: torch.topk(x, 2, dim=0).indices)
    cand = torch.topk(x, 2, dim=0).indices
    cand[0, 0] = 16
    cmp = _compare(model, [x], cand)
    assert not cmp.ok and "out of range" in cmp.why


def test_a_mask_gets_the_nudge_only_at_its_near_ties() -> None:
    """`a @ b > c` is no selecting op: an element may flip where the reference's answer moves
    under the nudge (the product within 2^-16 of the threshold), nowhere else."""
    gen = torch.Generator().manual_seed(2)
    a, b = torch.randn(64, 256, generator=gen), torch.randn(256, 64, generator=gen)
    prod = a @ b
    c = prod + 1.0  # every element far from its threshold
    c[0, 0] = torch.nextafter(prod[0, 0], torch.tensor(float("inf")))  # but one, a step above: a near-tie
    model = Pick(lambda a, b, c: (a @ b) > c)
    ref = model(a, b, c)
    flipped = ref.clone()
    flipped[0, 0] = ~flipped[0, 0]
    cmp = _compare(model, [a, b, c], flipped)
    assert cmp.ok, cmp.why
    assert "near-ties" in cmp.tie_note
    flipped[5, 5] = ~flipped[5, 5]  # far from its threshold
    cmp = _compare(model, [a, b, c], flipped)
    assert not cmp.ok and "not ties of the reference's" in cmp.why


def test_near_ties_beyond_the_share_fail() -> None:
    n = 4096
    x = torch.ones(n)
    t = torch.ones(n)
    model = Pick(lambda x, t: x >= t)  # every element sits on its threshold
    ref = model(x, t)
    flipped = ~ref
    flipped[int(NUDGE_MAX_SHARE * n) + 5 :] = ref[int(NUDGE_MAX_SHARE * n) + 5 :]
    cmp = _compare(model, [x, t], flipped)
    assert not cmp.ok and "more than 1%" in cmp.why


def test_an_argmax_of_a_tf32_matmul_fails() -> None:
    """Decided in TF32 (10 mantissa bits), an argmax over a matmul's rows flips at far more rows
    than a nudge of 2^-16 moves: the excuse covers honest fp32 orders, not lower precision. The
    columns of b are alike (a shared column plus 1e-3 noise), so the rows' maxima are close."""
    gen = torch.Generator().manual_seed(3)
    a = torch.randn(1024, 512, generator=gen)
    b = torch.randn(512, 1, generator=gen) + 1e-3 * torch.randn(512, 16, generator=gen)

    def tf32(t: torch.Tensor) -> torch.Tensor:
        return (t.view(torch.int32) & ~((1 << 13) - 1)).view(torch.float32)

    model = Pick(lambda a, b: torch.argmax(a @ b, dim=1) + 0)  # `+ 0`: not the argmax's own indices
    assert torch.equal(
        torch.argmax((a.double() @ b.double()).float(), dim=1), model(a, b)
    )  # fp32 is exact enough
    cand = torch.argmax(tf32(a) @ tf32(b), dim=1)
    assert int((cand != model(a, b)).sum()) > 50
    cmp = _compare(model, [a, b], cand)
    assert not cmp.ok and "not ties of the reference's" in cmp.why


def test_a_random_reference_gets_no_excuse_and_a_kernel_skipping_its_dropout_fails() -> None:
    model = Pick(lambda x: torch.argmax(torch.nn.functional.dropout(x, p=0.5, training=True), dim=1))
    x = torch.randn(512, 64, generator=torch.Generator().manual_seed(4))
    ref = model(x.clone())
    cand = torch.argmax(x, dim=1)  # skipped the dropout
    assert not torch.equal(cand, ref)
    cmp = compare_outputs(
        ref, cand, 1e-2, 1e-2, ties=lambda: second_opinion(model, [x], ref, contextlib.nullcontext)
    )
    assert not cmp.ok and "draws random numbers" in cmp.why


def test_a_reference_whose_rerun_differs_gets_no_excuse() -> None:
    calls = [0]

    def shifting(x: torch.Tensor) -> torch.Tensor:
        calls[0] += 1
        return torch.argmax(x, dim=0) + calls[0]  # each call another answer

    model = Pick(shifting)
    x = _tied(64, 4)
    ref = model(x)
    cmp = compare_outputs(
        ref, ref + 1, 1e-2, 1e-2, ties=lambda: second_opinion(model, [x], ref, contextlib.nullcontext)
    )
    assert not cmp.ok and "other discrete outputs when run again" in cmp.why


def test_the_reruns_leave_the_reference_and_the_inputs_as_they_were() -> None:
    model = Counting()
    x = _tied(256, 4)
    kept = x.clone()
    ref = torch.argmax(x, dim=0)
    ties = second_opinion(model, [x], ref, contextlib.nullcontext)
    runs = nudged_outputs(model, [x], contextlib.nullcontext)
    assert int(model.calls) == 0 and torch.equal(x, kept)
    assert ties.sets == {} and len(runs) == 6  # argmax: no tie set (PyTorch's first index)
    # the nudges break each tie one way in some runs and the other way in others
    assert {int(v) for run in runs for v in run[0][:4]} == {3, 9}  # type: ignore[index]
    moved = [float(abs(run_x - x).max() / x.abs().max()) for run_x in [x * (1 + NUDGE_REL)]]
    assert moved[0] <= NUDGE_REL * 1.01


def test_no_floating_input_no_nudge() -> None:
    idx = torch.arange(6).view(2, 3)
    model = Pick(lambda i: i.sum(0) % 2)
    with pytest.raises(NoExact, match="no floating input"):
        nudged_outputs(model, [idx], contextlib.nullcontext)
    cmp = _compare(model, [idx], torch.zeros(3, dtype=torch.long) + 7)
    assert not cmp.ok and "integer outputs must be equal" in cmp.why


# --- floating outputs at the reference's jumps (tolerance._excused_at_jumps) ---


def _fake_quant(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    return torch.clamp(torch.round(x / s), -128, 127) * s


def _on_half_steps(n: int, s: float, count: int) -> torch.Tensor:
    """randn values, `count` of them replaced by values within a few fp32 ulps of `(k + 1/2) * s`
    where `round(x / s)` and `round(x * (1 / s))` differ (a kernel multiplying by the reciprocal
    lands one step off there)."""
    x = torch.randn(n, generator=torch.Generator().manual_seed(3))
    st = torch.tensor(s)
    half = ((torch.arange(-60, 60, dtype=torch.float64) + 0.5) * s).float()
    near = half
    for _ in range(6):  # a few ulps either side
        near = torch.cat([near, torch.nextafter(near, near + 1), torch.nextafter(near, near - 1)]).unique()
    flips = near[torch.round(near / st) != torch.round(near * (1.0 / st))]
    assert flips.numel() > 0
    idx = torch.randperm(n, generator=torch.Generator().manual_seed(4))[:count]
    x[idx] = flips[torch.arange(count) % flips.numel()]
    return x


def test_an_honest_fake_quant_one_step_off_at_half_steps_passes_with_a_note() -> None:
    s = torch.tensor(0.037)
    x = _on_half_steps(1 << 16, 0.037, 64)
    model = Pick(_fake_quant)
    ref = model(x, s)
    honest = torch.clamp(torch.round(x * (1.0 / s)), -128, 127) * s  # x * (1 / s), as PyTorch's fake-quant
    flips = int((honest != ref).sum())
    assert flips > 0  # the placed half steps round otherwise: the case this excusal is for
    plain = compare_outputs(ref, honest, 1e-2, 1e-2)
    assert not plain.ok and plain.rule == "element"
    cmp = _compare(model, [x, s], honest)
    assert cmp.ok, cmp.why
    assert "steps the reference itself takes" in cmp.tie_note


def test_a_kernel_off_by_a_step_away_from_the_reference_s_jumps_fails() -> None:
    s = torch.tensor(0.037)
    x = torch.randn(1 << 16, generator=torch.Generator().manual_seed(5))
    model = Pick(_fake_quant)
    ref = model(x, s)
    wrong = ref.clone()
    wrong[::1000] += s  # a step off where x / s is nowhere near a half: no nudge moves it
    cmp = _compare(model, [x, s], wrong)
    assert not cmp.ok and cmp.rule == "element"
    assert "no jump of the reference's" in cmp.why


def test_a_lower_precision_fake_quant_fails_despite_the_jumps() -> None:
    """In fp16 `x / s` is off by up to 2^-11 relative: far more elements than 2^-16 reaches."""
    s = torch.tensor(0.037)
    x = torch.randn(1 << 16, generator=torch.Generator().manual_seed(6)) * 3
    model = Pick(_fake_quant)
    ref = model(x, s)
    half = (torch.clamp(torch.round(x.half() / s.half()), -128, 127) * s.half()).float()
    assert int((half != ref).sum()) > 0
    cmp = _compare(model, [x, s], half)
    assert not cmp.ok


def test_jumps_beyond_the_share_cap_fail() -> None:
    """Every difference at a jump of the reference's, but a tenth of the output: not excused."""
    s = torch.tensor(0.037)
    x = _on_half_steps(4096, 0.037, 4096 // 10)
    model = Pick(_fake_quant)
    ref = model(x, s)
    cand = torch.clamp(torch.round(x * (1.0 / s)), -128, 127) * s
    assert int((cand != ref).sum()) > NUDGE_MAX_SHARE * 4096
    cmp = _compare(model, [x, s], cand)
    assert not cmp.ok and f"more than {NUDGE_MAX_SHARE:.0%} of the output" in cmp.why
