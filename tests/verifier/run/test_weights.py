"""run/weights.py: the reference's constant-initialised weights are drawn, and a candidate's
matching weights get the same values: by name, else in registration order space by space."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from cudice.verifier.run import weights as W  # noqa: E402


def pair(ref_cls: Any, cand_cls: Any, seed: int = 1234) -> tuple[Any, Any, int]:
    """(reference, candidate, how many candidate weights matched), built as the judge and the
    runner build them."""
    torch.manual_seed(seed)
    with W.registration_order() as order:
        ref = ref_cls()
    drawn = W.drawn_from_json(W.drawn_to_json(W.draw_reference_constants(ref, seed, order)))
    torch.manual_seed(seed)
    with W.registration_order() as order2:
        cand = cand_cls()
    return ref, cand, W.match_reference_constants(cand, seed, drawn, order2)


class Ref(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 16)
        self.bn = nn.BatchNorm1d(16)
        self.ln = nn.LayerNorm(16)
        self.gain = nn.Parameter(torch.ones(16))
        self.mha = nn.MultiheadAttention(16, 2)
        self.register_buffer("mask", torch.ones(16))  # the reference's own constant: stays


class Renamed(nn.Module):
    """The same layers, the LayerNorm written as its own parameters, other names, an extra
    constant buffer registered first."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("scratch", torch.zeros(16))
        self.fc = nn.Linear(8, 16)
        self.bn = nn.BatchNorm1d(16)
        self.w = nn.Parameter(torch.ones(16))
        self.b = nn.Parameter(torch.zeros(16))
        self.g = nn.Parameter(torch.ones(16))
        self.mha = nn.MultiheadAttention(16, 2)
        self.register_buffer("mask", torch.ones(16))
        self.extra = nn.Parameter(torch.full((7,), 3.0))  # nothing of the reference's to pair: kept


def test_a_candidates_renamed_weights_get_the_references_drawn_values() -> None:
    ref, cand, matched = pair(Ref, Renamed)
    assert matched == 9  # bn: weight, bias, running mean and var; ln: 2; gain; mha: 2 biases
    assert torch.equal(ref.fc.weight, cand.fc.weight)  # the global RNG's weights as before
    for a, b in [
        (ref.bn.weight, cand.bn.weight),
        (ref.bn.running_mean, cand.bn.running_mean),
        (ref.bn.running_var, cand.bn.running_var),
        (ref.ln.weight, cand.w),
        (ref.ln.bias, cand.b),
        (ref.gain, cand.g),
        (ref.mha.in_proj_bias, cand.mha.in_proj_bias),
        (ref.mha.out_proj.bias, cand.mha.out_proj.bias),
    ]:
        assert torch.equal(a, b)
        assert a.unique().numel() > 1  # drawn, not the constant
    assert bool((ref.bn.running_var > 0).all())  # a variance stays positive
    assert torch.equal(ref.mask, torch.ones(16)) and torch.equal(cand.mask, torch.ones(16))
    assert torch.equal(cand.scratch, torch.zeros(16)) and torch.equal(cand.extra, torch.full((7,), 3.0))
    # a BatchNorm with drawn statistics is no longer within the tolerance of the identity
    ref.eval()
    x = torch.randn(32, 16)
    assert (ref.bn(x) - x).norm() > 0.1 * x.norm()


class TwoBN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bn1 = nn.BatchNorm1d(16)
        self.ln = nn.LayerNorm(16)
        self.mha = nn.MultiheadAttention(16, 2)
        self.bn2 = nn.BatchNorm1d(16)


class TwoBNNoStats(nn.Module):
    """Keeps the names, drops the running statistics (training mode never reads them), creates
    the layers in another order, and moves itself (which replaces buffer tensors)."""

    def __init__(self) -> None:
        super().__init__()
        self.bn2 = nn.BatchNorm1d(16, track_running_stats=False)
        self.bn1 = nn.BatchNorm1d(16, track_running_stats=False)
        self.ln = nn.LayerNorm(16)
        self.mha = nn.MultiheadAttention(16, 2)
        self.double().float()


class TwoBNOwn(nn.Module):
    """Hand-written: statistics registered before the weights, other names, the same order."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mean1", torch.zeros(16))
        self.register_buffer("var1", torch.ones(16))
        self.g1 = nn.Parameter(torch.ones(16))
        self.b1 = nn.Parameter(torch.zeros(16))
        self.lw = nn.Parameter(torch.ones(16))
        self.lb = nn.Parameter(torch.zeros(16))
        self.mha = nn.MultiheadAttention(16, 2)  # kept under its name: paired by name
        self.register_buffer("mean2", torch.zeros(16))
        self.register_buffer("var2", torch.ones(16))
        self.g2 = nn.Parameter(torch.ones(16))
        self.b2 = nn.Parameter(torch.zeros(16))


def test_names_first_then_order_space_by_space() -> None:
    ref, cand, _ = pair(TwoBN, TwoBNNoStats)
    for name in ("bn1.weight", "bn1.bias", "bn2.weight", "bn2.bias", "ln.weight", "mha.out_proj.bias"):
        assert torch.equal(ref.get_parameter(name), cand.get_parameter(name)), name
    ref, own, _ = pair(TwoBN, TwoBNOwn)
    for a, b in [
        (ref.bn1.weight, own.g1),
        (ref.bn1.bias, own.b1),
        (ref.bn2.weight, own.g2),
        (ref.bn2.bias, own.b2),
        (ref.bn1.running_mean, own.mean1),
        (ref.bn1.running_var, own.var1),
        (ref.bn2.running_var, own.var2),
    ]:
        assert torch.equal(a, b)


class BNBatchStats(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bn = nn.BatchNorm1d(8)


class OwnAffineWithOnes(nn.Module):
    """Batch statistics with its own gamma and beta, and a constant ones buffer of its own."""

    def __init__(self) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(8))
        self.beta = nn.Parameter(torch.zeros(8))
        self.register_buffer("ones", torch.ones(8))


class Lazy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.LazyLinear(8)
        self.ln = nn.LayerNorm(8)


def test_a_constant_buffer_of_the_candidates_own_is_not_a_statistic_and_lazy_modules_load() -> None:
    ref, cand, _ = pair(BNBatchStats, OwnAffineWithOnes)
    assert torch.equal(cand.ones, torch.ones(8))
    assert torch.equal(ref.bn.weight, cand.gamma) and torch.equal(ref.bn.bias, cand.beta)
    ref, cand, _ = pair(Lazy, Lazy)
    assert torch.equal(ref.ln.weight, cand.ln.weight) and ref.ln.weight.unique().numel() > 1


def test_the_values_follow_the_seed_and_a_malformed_list_is_dropped() -> None:
    a, _, _ = pair(Ref, Ref, seed=1)
    b, _, _ = pair(Ref, Ref, seed=2)
    assert not torch.equal(a.ln.weight, b.ln.weight)
    raw = [["x", "param", 1.0, [16], "float32"], "x", None, ["y", "other", 0.0, [4], "float32", 0]]
    assert W.drawn_from_json([*raw, ["ln.bias", "param", 0.0, [4], "float32", 0]]) == [
        W.Drawn("ln.bias", W.Key("param", 0.0, (4,), "float32", 0))
    ]
    assert W.drawn_from_json({"not": "a list"}) == []
