"""run/weights.py: the reference's constant-initialised weights are drawn, and a candidate's
matching weights get the same values whatever it names them."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from cudice.verifier.run import weights as W  # noqa: E402


class Ref(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 16)
        self.bn = nn.BatchNorm1d(16)
        self.ln = nn.LayerNorm(16)
        self.gain = nn.Parameter(torch.ones(16))
        self.mha = nn.MultiheadAttention(16, 2)
        self.register_buffer("mask", torch.ones(16))  # the reference's own constant: stays


class Cand(nn.Module):
    """The same layers in the same order, the LayerNorm written as its own parameters."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 16)
        self.bn = nn.BatchNorm1d(16)
        self.w = nn.Parameter(torch.ones(16))
        self.b = nn.Parameter(torch.zeros(16))
        self.g = nn.Parameter(torch.ones(16))
        self.mha = nn.MultiheadAttention(16, 2)
        self.register_buffer("mask", torch.ones(16))
        self.extra = nn.Parameter(torch.full((7,), 3.0))  # no reference weight of this key: kept


def build(cls: type, seed: int) -> tuple[nn.Module, dict[int, int]]:
    torch.manual_seed(seed)
    with W.registration_order() as order:
        model = cls()
    return model, order


def test_the_candidates_matching_weights_get_the_references_drawn_values() -> None:
    seed = 1234
    ref, order = build(Ref, seed)
    keys = W.keys_from_json(W.keys_to_json(W.draw_reference_constants(ref, seed, order)))
    assert len(keys) == 9  # bn: weight, bias, running mean, running var; ln: 2; gain; mha: 2 biases
    cand, order2 = build(Cand, seed)
    assert W.match_reference_constants(cand, seed, keys, order2) == 9
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
    assert torch.equal(cand.extra, torch.full((7,), 3.0))
    # a BatchNorm with drawn statistics is no longer within the tolerance of the identity
    ref.eval()
    x = torch.randn(32, 16)
    assert (ref.bn(x) - x).norm() > 0.1 * x.norm()


def test_the_values_follow_the_seed_and_a_malformed_key_list_is_dropped() -> None:
    a, oa = build(Ref, 1)
    b, ob = build(Ref, 2)
    W.draw_reference_constants(a, 1, oa)
    W.draw_reference_constants(b, 2, ob)
    assert not torch.equal(a.ln.weight, b.ln.weight)
    assert W.keys_from_json([[1.0, [16], "float32"], "x", None, [0.0, [4], "float32", 0]]) == [
        W.Key(0.0, (4,), "float32", 0)
    ]
    assert W.keys_from_json({"not": "a list"}) == []
