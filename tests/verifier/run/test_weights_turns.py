"""run/weights.py: the second turn (a one-element free parameter negated, `second_turn`) and
`settle_draws` over several input sets and both turns."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from cudice.verifier.run import weights as W  # noqa: E402


class Scaled(nn.Module):
    """A one-element scale, a PReLU slope, a LayerNorm (16 elements each: both signs in one draw)."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1))
        self.act = nn.PReLU()
        self.ln = nn.LayerNorm(16)

    def forward(self, x: Any) -> Any:
        return self.act(self.ln(torch.relu(x) * self.scale))


class ScaledFolded(Scaled):
    """The candidate: the scale read into a float in its constructor (an honest fold)."""

    def __init__(self) -> None:
        super().__init__()
        self.folded = float(self.scale.detach())


def _drawn(seed: int) -> tuple[Any, list[Any]]:
    torch.manual_seed(seed)
    with W.registration_order() as order:
        ref = Scaled()
    return ref, W.draw_reference_constants(ref, seed, order)


def test_the_second_turn_negates_each_one_element_free_parameter_and_nothing_else() -> None:
    for seed in range(16):
        ref, drawn = _drawn(seed)
        turn = W.second_turn(drawn)
        assert [d.name for d in turn if d.key.flipped] == ["scale", "act.weight"]
        first = {name: t.detach().clone() for name, t in ref.named_parameters()}
        W.give_drawn(ref, seed, turn)
        for name, t in ref.named_parameters():
            want = -first[name] if name in ("scale", "act.weight") else first[name]
            assert torch.equal(t.detach(), want), (seed, name)
        # the candidate's runner, given the second turn's keys, draws the same values, a fold in its
        # constructor included
        keys = W.drawn_from_json(W.drawn_to_json(turn))
        assert keys == turn
        torch.manual_seed(seed)
        with W.registration_order() as order, W.early_constants(seed, keys, order) as early:
            cand = ScaledFolded()
        W.match_reference_constants(cand, seed, keys, order, early)
        for name, t in ref.named_parameters():
            assert torch.equal(t, cand.get_parameter(name)), (seed, name)
        assert cand.folded == float(ref.scale.detach())
    # a kept key and a key of two elements or more have no second turn
    kept = W.Key("param", 1.0, (1,), "float32", 0, True)
    wide = W.Key("param", 1.0, (2,), "float32", 0)
    assert not kept.flippable and not wide.flippable
    assert W.second_turn([W.Drawn("k", kept), W.Drawn("w", wide)]) == [W.Drawn("k", kept), W.Drawn("w", wide)]


def test_a_kernel_that_drops_a_one_element_parameters_sign_fails_one_of_the_two_turns() -> None:
    x = torch.randn(8, 16)
    for seed in range(16):
        ref, drawn = _drawn(seed)
        fits: list[bool] = []
        for keys in (drawn, W.second_turn(drawn)):
            W.give_drawn(ref, seed, keys)
            with torch.no_grad():
                want = ref(x)
                # the stand-in kernel: the slope's sign dropped, the scale assumed positive
                z = ref.ln(torch.relu(x * ref.scale))
                got = torch.where(z >= 0, z, ref.act.weight.abs() * z)
            fits.append(torch.allclose(got, want, atol=1e-5, rtol=1e-5))
        assert fits.count(True) <= 1, seed  # never both: the second turn has the other signs


def test_flipped_keys_travel_as_an_eighth_field_and_malformed_ones_are_dropped() -> None:
    raw = ["s", "param", 1.0, [1], "float32", 0, False]
    assert W.drawn_from_json([[*raw, True]]) == [
        W.Drawn("s", W.Key("param", 1.0, (1,), "float32", 0, flipped=True))
    ]
    bad = [
        [*raw, 1],  # a flag is the bool true
        [*raw, False],
        [*raw, "yes"],
        ["s", "param", 1.0, [2], "float32", 0, False, True],  # two elements: no second turn
        ["s", "param", 1.0, [1], "float32", 0, True, True],  # kept: no second turn
        ["s", "stat", 1.0, [1], "float32", 0, False, True],
        [*raw, True, True],
    ]
    assert W.drawn_from_json(bad) == []
    assert W._draw(3, W.Key("param", 0.0, (1,), "float32", 0, flipped=True)) == -W._draw(
        3, W.Key("param", 0.0, (1,), "float32", 0)
    )


class SqrtTemperature(nn.Module):
    """A one-element temperature under a square root (NaN for a negative draw) and a one-element
    divisor (finite for either sign)."""

    def __init__(self) -> None:
        super().__init__()
        self.t = nn.Parameter(torch.ones(1))
        self.d = nn.Parameter(torch.ones(1))

    def forward(self, x: Any) -> Any:
        return x * torch.sqrt(self.t) / self.d


def test_a_one_element_parameter_whose_other_sign_makes_the_reference_nan_keeps_its_sign() -> None:
    x = torch.randn(4, 8)
    for seed in range(12):  # the first turn's sign of `t` is either: the second turn has the other
        torch.manual_seed(seed)
        with W.registration_order() as order:
            ref = SqrtTemperature()
        settled = W.settle_draws(ref, seed, W.draw_reference_constants(ref, seed, order), lambda: [x])
        by_name = {d.name: d.key for d in settled}
        assert by_name["t"].kept and not by_name["t"].flippable, seed
        assert not by_name["d"].kept and by_name["d"].flippable, seed
        W.give_drawn(ref, seed, W.second_turn(settled))
        assert bool(torch.isfinite(ref(x)).all()), seed


class GatedSqrt(nn.Module):
    """`sqrt(1 + g * x)` with a learnable gate `g` (16 elements, ones): finite for small inputs at any
    gate, NaN for inputs over 1 where a gate element is drawn under -1."""

    def __init__(self) -> None:
        super().__init__()
        self.g = nn.Parameter(torch.ones(16))
        self.calls = 0

    def forward(self, x: Any) -> Any:
        self.calls += 1
        return torch.sqrt(1 + self.g * x)


def test_settling_judges_several_input_sets_one_at_a_time_within_its_forwards() -> None:
    small = torch.rand(4, 16) * 0.1  # finite at every gate
    large = 1.5 + torch.rand(4, 16)  # NaN where a gate element is under -1 / x
    for seed in range(8):
        torch.manual_seed(seed)
        with W.registration_order() as order:
            ref = GatedSqrt()
        drawn = W.draw_reference_constants(ref, seed, order)
        if not bool((ref.g < -1 / 1.5).any()):
            continue  # (this draw's gate is finite on both sets)
        sets = iter([small, large, small])
        asked: list[int] = []

        def inputs(sets: Any = sets, asked: list[int] = asked) -> list[Any]:
            asked.append(1)
            return [next(sets)]

        settled = W.settle_draws(ref, seed, drawn, inputs)
        assert settled[0].key.kept and len(asked) == W.SETTLE_INPUT_SETS, seed
        assert ref.calls <= W.MAX_PROBES
        assert bool(torch.isfinite(ref(large)).all())
        # with one set (the small one), as before, the NaN on other inputs was not seen
        assert not W.settle_draws(ref, seed, drawn, lambda: [small], num_sets=1)[0].key.kept
        break
    else:
        pytest.fail("no seed drew a gate element under -2/3")
