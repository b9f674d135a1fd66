"""run/weights.py: the reference's constant-initialised weights are drawn, and a candidate's
matching weights get the same values: by name, else in registration order space by space."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from cudice.verifier.run import weights as W  # noqa: E402


def pair(ref_cls: Any, cand_cls: Any, seed: int = 1234, *, early: bool = True) -> tuple[Any, Any, int]:
    """(reference, candidate, how many candidate weights matched), built as the judge and the
    runner build them (`early=False`: without the fills during the candidate's constructor)."""
    torch.manual_seed(seed)
    with W.registration_order() as order:
        ref = ref_cls()
    drawn = W.drawn_from_json(W.drawn_to_json(W.draw_reference_constants(ref, seed, order)))
    torch.manual_seed(seed)
    with W.registration_order() as order2, W.early_constants(seed, drawn if early else [], order2) as fills:
        cand = cand_cls()
    return ref, cand, W.match_reference_constants(cand, seed, drawn, order2, fills)


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


class ConvBN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.bn = nn.BatchNorm2d(8)
        self.ln = nn.LayerNorm(8)
        self.gain = nn.Parameter(torch.ones(8))


class ConvBNFolded(nn.Module):
    """Honest: folds the BatchNorm into a scale and shift in its constructor, reads the LayerNorm's
    weight into a plain tensor attribute and derives a buffer from its own gain as it registers it."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.bn = nn.BatchNorm2d(8)
        scale = self.bn.weight / torch.sqrt(self.bn.running_var + self.bn.eps)
        self.register_buffer("scale", scale.detach().clone())
        self.register_buffer("shift", (self.bn.bias - self.bn.running_mean * scale).detach().clone())
        self.ln = nn.LayerNorm(8)
        self.ln_weight = self.ln.weight.detach().clone()  # a plain attribute: no slot of the model
        self.gain = nn.Parameter(torch.ones(8))
        self.register_buffer("twice_gain", 2 * self.gain.detach())


def test_an_honest_fold_in_the_constructor_reads_the_references_drawn_values() -> None:
    ref, cand, matched = pair(ConvBN, ConvBNFolded)
    assert matched == 7  # bn: weight, bias, running mean and var; ln: 2; gain
    bn = ref.bn
    scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
    assert torch.equal(cand.scale, scale) and scale.unique().numel() > 1
    assert torch.equal(cand.shift, bn.bias - bn.running_mean * scale)
    assert torch.equal(cand.ln_weight, ref.ln.weight) and torch.equal(cand.twice_gain, 2 * ref.gain)
    for name, t in ref.state_dict().items():  # the fold's sources hold what the reference holds
        assert torch.equal(t, cand.state_dict()[name]), name
    ref.eval(), cand.eval()
    x = torch.randn(2, 3, 10, 10)
    folded = cand.conv(x) * cand.scale.view(1, -1, 1, 1) + cand.shift.view(1, -1, 1, 1)
    torch.testing.assert_close(folded, ref.bn(ref.conv(x)))
    # without the fills during the constructor the fold reads the constants: the false rejection
    _, stale, _ = pair(ConvBN, ConvBNFolded, early=False)
    assert torch.equal(stale.scale, torch.full((8,), 1 / (1 + bn.eps) ** 0.5))


class SharedAndCopied(nn.Module):
    """A layer attached and then deepcopy'd (`nn.TransformerEncoder` copies the layer it is given),
    a tied weight, a PReLU (one element), a layer built before and attached after a later slot, a
    parameter created empty and set to ones afterwards, a dtype round trip."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0)
        self.enc = nn.TransformerEncoder(self.layer, 2, enable_nested_tensor=False)
        self.act = nn.PReLU()
        late = nn.LayerNorm(8)
        self.g = nn.Parameter(torch.ones(8))
        self.late = late
        self.tied = nn.LayerNorm(8)
        self.tied.weight = self.late.weight
        self.w = nn.Parameter(torch.empty(8))
        nn.init.ones_(self.w)
        self.bn = nn.BatchNorm1d(8)
        self.double().float()


class SharedAndCopiedRenamed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("var0", torch.ones(8))
        self.first = nn.LayerNorm(8)
        self.layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0)
        self.blocks = nn.TransformerEncoder(self.layer, 2, enable_nested_tensor=False)
        self.slope = nn.PReLU()
        self.norm = nn.BatchNorm1d(8)
        self.g = nn.Parameter(torch.ones(8))


@pytest.mark.parametrize(
    ("ref_cls", "cand_cls"),
    [
        (Ref, Ref),
        (Ref, Renamed),
        (TwoBN, TwoBNNoStats),
        (TwoBN, TwoBNOwn),
        (Lazy, Lazy),
        (ConvBN, ConvBN),
        (SharedAndCopied, SharedAndCopied),
        (SharedAndCopied, SharedAndCopiedRenamed),
        (SharedAndCopiedRenamed, SharedAndCopied),
    ],
)
def test_a_candidate_without_a_fold_ends_with_the_weights_it_had_before(ref_cls: Any, cand_cls: Any) -> None:
    _, before, n_before = pair(ref_cls, cand_cls, early=False)
    _, after, n_after = pair(ref_cls, cand_cls)
    assert n_before == n_after
    a, b = before.state_dict(), after.state_dict()
    assert a.keys() == b.keys()
    for name in a:
        if not isinstance(a[name], nn.parameter.UninitializedParameter):
            assert torch.equal(a[name], b[name]), name


def test_the_final_pass_never_leaves_a_key_in_two_slots() -> None:
    # the extra parameter is registered first: it takes the LayerNorm weight's key early, the final
    # pass gives that key to `ln.weight` by name and the extra parameter its constant back
    class Early(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.extra = nn.Parameter(torch.ones(16))
            self.seen = self.extra.detach().clone()
            self.ln = nn.LayerNorm(16)

    class OnlyLN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln = nn.LayerNorm(16)

    ref, cand, matched = pair(OnlyLN, Early)
    assert matched == 2
    assert torch.equal(cand.ln.weight, ref.ln.weight) and torch.equal(cand.seen, ref.ln.weight)  # stale
    assert torch.equal(cand.extra, torch.ones(16))
    cases = [(Ref, Renamed), (SharedAndCopied, SharedAndCopiedRenamed), (ConvBN, ConvBNFolded)]
    for ref_cls, cand_cls in cases:
        ref, cand, _ = pair(ref_cls, cand_cls)
        with W.registration_order() as order:
            drawn = W.draw_reference_constants(ref_cls(), 1234, order)
        assert drawn
        for d in drawn:
            t = ref.state_dict()[d.name]
            holders = [n for n, c in cand.state_dict().items() if c.shape == t.shape and torch.equal(c, t)]
            assert len(holders) <= 1 or set(holders) == {"late.weight", "tied.weight"}, (d, holders)


def test_the_hooks_are_removed_when_the_constructor_raises() -> None:
    class Fails(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bn = nn.BatchNorm1d(8)
            raise RuntimeError("the candidate's constructor failed")

    from torch.nn.modules import module as nn_module

    def hooks() -> list[int]:  # PyTorch's global registration hooks (torch/nn/modules/module.py)
        kinds = ("parameter", "buffer", "module")
        return [len(getattr(nn_module, f"_global_{kind}_registration_hooks")) for kind in kinds]

    originals = (nn.Module.register_parameter, nn.Module.register_buffer)
    before = hooks()
    drawn = W.draw_reference_constants(BNBatchStats(), 1, {})
    with pytest.raises(RuntimeError, match="constructor failed"):
        with W.registration_order() as order, W.early_constants(1, drawn, order) as fills:
            assert [n + 1 for n in before] == hooks()
            Fails()
    assert fills.keys  # the BatchNorm was filled as it was attached, before the constructor raised
    assert (nn.Module.register_parameter, nn.Module.register_buffer) == originals and hooks() == before

    class After(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bn = nn.BatchNorm1d(8)
            self.g = nn.Parameter(torch.ones(8))

    after = After()  # outside the context: nothing is filled any more
    assert torch.equal(after.bn.weight, torch.ones(8)) and torch.equal(after.g, torch.ones(8))
    assert torch.equal(after.bn.running_var, torch.ones(8))


class LayerScaleBN(nn.Module):
    """A LayerScale gamma at 1e-6, a BatchNorm, a PReLU (one element at 0.25), a zero bias."""

    def __init__(self) -> None:
        super().__init__()
        self.gamma = nn.Parameter(1e-6 * torch.ones(64))
        self.bn = nn.BatchNorm1d(64)
        self.act = nn.PReLU()
        self.big = nn.Parameter(torch.full((64,), 10.0))


def test_a_parameters_sign_varies_per_element_and_its_size_has_a_floor() -> None:
    ref, cand, _ = pair(LayerScaleBN, LayerScaleBN)
    for name, floor in (("gamma", 1.0), ("bn.weight", 1.0), ("big", 10.0)):
        t = ref.get_parameter(name).detach()
        assert torch.equal(t, cand.get_parameter(name)), name
        assert bool((t.abs() >= 0.5 * floor).all() and (t.abs() <= 1.5 * floor).all()), name
        assert bool((t > 0).any() and (t < 0).any()), name  # both signs
    slope = float(ref.act.weight.detach())
    assert 0.5 <= abs(slope) <= 1.5 and slope == float(cand.act.weight.detach())
    assert bool((ref.bn.bias.abs() <= 0.5).all() and (ref.bn.bias > 0).any() and (ref.bn.bias < 0).any())
    # the statistics keep their meaning: a variance stays positive and of its constant's order
    var, mean = ref.bn.running_var, ref.bn.running_mean
    assert bool((var >= 0.5).all() and (var <= 1.5).all())
    assert bool((mean > 0).any() and (mean < 0).any() and (mean.abs() <= 0.5).all())
    assert torch.equal(var, cand.bn.running_var) and torch.equal(mean, cand.bn.running_mean)
    # a skipped LayerScale branch is off by the branch itself, not by 1e-6 of it
    h = torch.randn(32, 64)
    assert (ref.gamma * h).norm() > 0.5 * h.norm()
    # the per-element signs break an order valid for a positive scale only: max(a * x) != a * max(x)
    x = torch.randn(8, 64, 4)
    a = ref.bn.weight.detach().view(1, -1, 1)
    assert not torch.allclose((x * a).amax(-1), x.amax(-1) * a.squeeze(-1))


def test_two_elements_always_get_both_signs_and_kept_keys_keep_the_old_draw() -> None:
    for seed in range(64):
        v = W._draw(seed, W.Key("param", 1.0, (2,), "float32", 0))
        assert float(v[0]) * float(v[1]) < 0, seed
    key = W.Key("param", 1e-6, (16,), "float32", 0)
    free, kept = W._draw(5, key), W._draw(5, key._replace(kept=True))
    assert torch.allclose(free.abs(), kept / 1e-6)  # the same uniforms: only the sign and the size change
    assert bool((kept > 0).all() and (kept < 1.5e-6).all())
    stat = W._draw(5, W.Key("stat", 1.0, (16,), "float32", 0))
    assert torch.equal(stat, W._draw(5, W.Key("stat", 1.0, (16,), "float32", 0, True)))
    assert bool((stat > 0).all())
    # the flag travels as a seventh field, a bool; a list of six (without it) is a free key
    raw = ["g", "param", 1.0, [2], "float32", 0]
    assert W.drawn_from_json([raw, [*raw, True]]) == [
        W.Drawn("g", W.Key("param", 1.0, (2,), "float32", 0)),
        W.Drawn("g", W.Key("param", 1.0, (2,), "float32", 0, True)),
    ]
    assert W.drawn_from_json([[*raw, "yes"], [*raw, True, 1]]) == []


class SqrtLog(nn.Module):
    """Parameters under sqrt and log (NaN for a negative draw), a division by a learnable
    temperature (any sign), a LayerNorm, a BatchNorm in training mode, dropout."""

    def __init__(self) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(32)
        self.t = nn.Parameter(torch.ones(1))
        self.scale = nn.Parameter(torch.ones(32))
        self.prior = nn.Parameter(torch.full((32,), 0.5))
        self.bn = nn.BatchNorm1d(32)
        self.drop = nn.Dropout(0.1)
        self.calls = 0

    def forward(self, x: Any) -> Any:
        self.calls += 1
        z = self.bn(self.drop(self.ln(x))) / self.t * torch.sqrt(self.scale)
        return z + torch.log(self.prior), x.argmax(-1)


def settle(ref_cls: Any, seed: int, width: int = 32) -> tuple[Any, list[Any], list[Any]]:
    torch.manual_seed(seed)
    with W.registration_order() as order:
        ref = ref_cls()
    drawn = W.draw_reference_constants(ref, seed, order)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(16, width, generator=gen)
    return ref, drawn, W.settle_draws(ref, seed, drawn, lambda: [x])


def test_a_parameter_whose_free_draw_makes_the_reference_nan_keeps_its_sign_and_size() -> None:
    for seed in range(6):
        ref, _, settled = settle(SqrtLog, seed)
        assert {d.name for d in settled if d.key.kept} == {"scale", "prior"}, seed  # a divisor stays free
        for d in settled:  # the model holds the settled keys' values; the probes left no trace
            t = ref.get_parameter(d.name) if d.key.space == "param" else ref.get_buffer(d.name)
            assert torch.equal(t, W._draw(seed, d.key).to(t.dtype)), d.name
        assert int(ref.bn.num_batches_tracked) == 0
        assert bool((ref.ln.weight < 0).any() and (ref.bn.weight < 0).any())
        # the candidate's runner gets the flags and draws the same values, early and in the final pass
        drawn = W.drawn_from_json(W.drawn_to_json(settled))
        assert drawn == settled
        torch.manual_seed(seed)
        with W.registration_order() as order, W.early_constants(seed, drawn, order) as early:
            cand = SqrtLog()
        W.match_reference_constants(cand, seed, drawn, order, early)
        for name, t in ref.state_dict().items():
            assert torch.equal(t, cand.state_dict()[name]), name
        assert bool(torch.isfinite(ref(torch.randn(16, 32))[0]).all())


def test_settling_runs_a_forward_per_set_and_turn_where_the_outputs_are_finite_and_keeps_the_rng() -> None:
    ref, drawn, settled = settle(LayerScaleBN2, 3, 64)
    # (its PReLU's one-element slope is judged in both turns: `second_turn`)
    assert settled == drawn and ref.calls == 2 * W.SETTLE_INPUT_SETS
    ref, _, _ = settle(SqrtLog, 3)
    assert 2 < ref.calls <= W.MAX_PROBES
    torch.manual_seed(7)
    with W.registration_order() as order:
        model = SqrtLog()
    drawn = W.draw_reference_constants(model, 7, order)
    before = torch.get_rng_state()
    W.settle_draws(model, 7, drawn, lambda: [torch.ones(4, 32)])
    assert torch.equal(before, torch.get_rng_state())
    # inputs that cannot be made, a model that is not a module: the draw as it was
    assert W.settle_draws(model, 7, drawn, lambda: 1 / 0) == drawn  # type: ignore[arg-type,return-value]
    assert W.settle_draws(object(), 7, drawn, lambda: []) == drawn


class LayerScaleBN2(LayerScaleBN):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, x: Any) -> Any:
        self.calls += 1
        return self.act(self.bn(x * self.gamma + self.big))


class IRNN(nn.Module):
    """Structured learnable weights: an identity recurrent weight (`eye_` after the layer is
    attached), a dirac convolution, a learnable lower-triangular mask of ones; and constants by
    design: a frozen causal mask parameter and a mask buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.ih = nn.Linear(8, 16)
        self.hh = nn.Linear(16, 16, bias=False)
        nn.init.eye_(self.hh.weight)
        self.conv = nn.Conv2d(4, 4, 3, padding=1, bias=False)
        nn.init.dirac_(self.conv.weight)
        self.gate = nn.Parameter(torch.tril(torch.ones(6, 6)))
        self.causal = nn.Parameter(torch.tril(torch.ones(6, 6)), requires_grad=False)
        self.register_buffer("mask", torch.tril(torch.ones(6, 6)))


class IRNNRenamed(nn.Module):
    """The same structures as its own parameters under other names (the frozen mask's pattern
    registered first, with requires_grad=False, then the same pattern learnable)."""

    def __init__(self) -> None:
        super().__init__()
        self.w_ih = nn.Linear(8, 16)
        self.w_hh = nn.Parameter(torch.eye(16))
        self.kernel = nn.Parameter(torch.zeros(4, 4, 3, 3))
        nn.init.dirac_(self.kernel)
        self.frozen = nn.Parameter(torch.tril(torch.ones(6, 6)), requires_grad=False)
        self.register_buffer("mask", torch.tril(torch.ones(6, 6)))


def test_structured_learnable_weights_are_drawn_and_shared_constants_by_design_are_not() -> None:
    ref, cand, _ = pair(IRNN, IRNN)
    assert torch.equal(ref.ih.weight, cand.ih.weight)  # the global RNG's weights as before
    for name in ("hh.weight", "conv.weight", "gate"):
        a, b = ref.get_parameter(name).detach(), cand.get_parameter(name).detach()
        assert torch.equal(a, b), name
        assert bool((a != 0).all() and (a > 0).any() and (a < 0).any()), name  # no zero, both signs
        # every element of size 0.5 to 1.5 times sqrt(nonzeros / elements): the Frobenius norm of
        # the structure it replaces, within the uniforms' spread
        density = (a.numel() / {"hh.weight": 16, "conv.weight": 4, "gate": 21}[name]) ** -0.5
        assert bool((a.abs() >= 0.5 * density).all() and (a.abs() <= 1.5 * density).all()), name
    eye = torch.eye(16)
    assert not torch.allclose(ref.hh(eye), eye, atol=0.1)  # `h` for `h @ W_hh.T` is far off
    for model in (ref, cand):
        assert torch.equal(model.causal, torch.tril(torch.ones(6, 6))) and not model.causal.requires_grad
        assert torch.equal(model.mask, torch.tril(torch.ones(6, 6)))
    with W.registration_order() as order:
        drawn = W.draw_reference_constants(IRNN(), 1234, order)
    assert {d.name for d in drawn if d.key.space == "struct"} == {"hh.weight", "conv.weight", "gate"}
    assert W.drawn_from_json(W.drawn_to_json(drawn)) == drawn


def test_a_structure_under_another_name_pairs_by_pattern_then_order() -> None:
    ref, cand, _ = pair(IRNN, IRNNRenamed)
    assert torch.equal(ref.hh.weight, cand.w_hh) and torch.equal(ref.conv.weight, cand.kernel)
    # the frozen copy of the learnable mask's pattern is a parameter of the candidate: it takes the
    # reference's learnable mask's values (the one parameter of that pattern)
    assert torch.equal(ref.gate, cand.frozen)
    assert torch.equal(cand.mask, torch.tril(torch.ones(6, 6)))  # a buffer is never paired

    class OtherPattern(nn.Module):  # an upper triangle: not the reference's pattern, left alone
        def __init__(self) -> None:
            super().__init__()
            self.gate = nn.Parameter(torch.triu(torch.ones(6, 6)))

    _, other, matched = pair(IRNN, OtherPattern)
    assert matched == 0 and torch.equal(other.gate, torch.triu(torch.ones(6, 6)))

    class FrozenFirst(nn.Module):  # its frozen mask registered before its learnable one: both renamed
        def __init__(self) -> None:
            super().__init__()
            self.m = nn.Parameter(torch.tril(torch.ones(6, 6)), requires_grad=False)
            self.g = nn.Parameter(torch.tril(torch.ones(6, 6)))

    for early in (True, False):
        _, cand, matched = pair(IRNN, FrozenFirst, early=early)
        assert matched == 1 and torch.equal(cand.g, ref.gate), early
        assert torch.equal(cand.m, torch.tril(torch.ones(6, 6))), early


class IRNNFused(nn.Module):
    """Honest: keeps the reference's layers and concatenates both weights into one GEMM's operand in
    its constructor, after `eye_`; a copy of the identity it keeps as a second parameter (unread)."""

    def __init__(self) -> None:
        super().__init__()
        self.ih = nn.Linear(8, 16)
        self.hh = nn.Linear(16, 16, bias=False)
        nn.init.eye_(self.hh.weight)
        self.register_buffer("fused", torch.cat([self.ih.weight, self.hh.weight], 1).detach().clone())
        self.spare = nn.Parameter(self.hh.weight.detach().clone())
        self.conv = nn.Conv2d(4, 4, 3, padding=1, bias=False)
        nn.init.dirac_(self.conv.weight)
        self.gate = nn.Parameter(torch.tril(torch.ones(6, 6)))
        self.gate_t = self.gate.detach().t().clone()  # a plain attribute: read while built


def test_a_fold_of_a_structure_in_the_constructor_reads_the_drawn_values() -> None:
    ref, cand, _ = pair(IRNN, IRNNFused)
    assert torch.equal(cand.fused, torch.cat([ref.ih.weight, ref.hh.weight], 1))
    assert torch.equal(cand.hh.weight, ref.hh.weight) and torch.equal(cand.gate_t, ref.gate.t())
    # the unread copy held the early values; the final pass gives it no key: its structure back
    assert torch.equal(cand.spare, torch.eye(16))
    _, stale, _ = pair(IRNN, IRNNFused, early=False)
    assert torch.equal(stale.fused[:, 8:], torch.eye(16))  # without the early fills: the identity
    # and a candidate without a fold ends as it would without the early fills
    _, before, _ = pair(IRNN, IRNNRenamed, early=False)
    _, after, _ = pair(IRNN, IRNNRenamed)
    for name, t in before.state_dict().items():
        assert torch.equal(t, after.state_dict()[name]), name
    assert torch.nn.init.eye_.__module__ == "torch.nn.init"  # the initialisers are restored


def test_a_structure_whose_free_draw_makes_the_reference_nan_keeps_its_sign() -> None:
    class SqrtGate(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gate = nn.Parameter(torch.tril(torch.ones(32, 32)))

        def forward(self, x: Any) -> Any:
            return x @ torch.sqrt(self.gate)

    ref, drawn, settled = settle(SqrtGate, 3)
    (d,) = settled
    assert d.key.space == "struct" and d.key.kept and not drawn[0].key.kept
    gate = ref.gate.detach()
    assert bool((gate > 0).all()) and torch.equal(gate, W._draw(3, d.key).float())
    assert W.drawn_from_json(W.drawn_to_json(settled)) == settled


def test_struct_keys_travel_with_their_pattern_and_malformed_ones_are_dropped() -> None:
    pattern = "16/" + "0" * 32
    raw = ["hh.weight", "struct", 1.0, [16, 16], "float32", 0, False, pattern]
    key = W.Key("struct", 1.0, (16, 16), "float32", 0, False, pattern)
    assert W.drawn_from_json([raw]) == [W.Drawn("hh.weight", key)]
    bad = [
        raw[:7],  # no pattern
        [*raw[:7], "16/xyz"],
        [*raw[:7], "0/" + "0" * 32],  # no nonzero
        [*raw[:7], "256/" + "0" * 32],  # every element nonzero: one value, not a structure
        [*raw[:7], pattern, 1],
        ["g", "param", 1.0, [16], "float32", 0, False, pattern],  # a pattern outside "struct"
        ["g", "other", 1.0, [16], "float32", 0, False, pattern],
    ]
    assert W.drawn_from_json(bad) == []
