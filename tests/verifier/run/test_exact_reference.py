"""The reference in float64 (run/exact_reference.py): given where the float64 run is the fp32 run up
to rounding, refused (`NoExact`, with the reason) wherever it could be another computation, since
the comparison widens its bounds by the distance between the two (run/tolerance.py). Each refused
reference below would otherwise let a wrong output through: the test of `compare_outputs` on it
checks that too."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from cudice.verifier.run.exact_reference import exact_outputs  # noqa: E402
from cudice.verifier.run.tolerance import NoExact, compare_outputs  # noqa: E402

GEN = torch.Generator().manual_seed(7)
X = torch.randn(64, 256, generator=GEN)
HALVES = (torch.arange(-2048, 2048, dtype=torch.float32) + 0.5).view(16, 256)  # exact ties for round()


def _exact(model: Any, inputs: list[Any]) -> tuple[Any, Any]:
    """(the reference's fp32 output, its float64 one or the NoExact raised)."""
    with torch.no_grad():
        ref = model(*[x.clone() for x in inputs])
    try:
        return ref, exact_outputs(model, inputs, ref, contextlib.nullcontext)
    except NoExact as exc:
        return ref, exc


class Variance(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * x).mean(-1) - x.mean(-1) ** 2


def test_a_deterministic_fp32_reference_is_run_in_float64_and_left_as_it_is() -> None:
    import copy

    model = nn.Sequential(nn.Linear(256, 64), Variance())
    weight, where = model[0].weight.detach().clone(), model[0].weight.data_ptr()
    x = X * 0.2 + 5
    _, got = _exact(model, [x])
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float64
    assert model[0].weight.dtype == torch.float32 and model[0].weight.data_ptr() == where
    assert torch.equal(model[0].weight, weight)
    assert torch.equal(got, copy.deepcopy(model).double()(x.double()))


class PrivateGenerator(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.g = torch.Generator().manual_seed(0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 0.5 * torch.rand(x.shape, generator=self.g, dtype=x.dtype)


class SeededInForward(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        g = torch.Generator().manual_seed(1234)  # the same seed, but fp64 draws other numbers
        return x + 0.5 * torch.rand(x.shape, generator=g, dtype=x.dtype)


class Dropout(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.dropout(x, 0.5, training=True)


class Counter(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("n", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.n += 1
        return x * self.n


def _roundabout(x: torch.Tensor) -> torch.Tensor:
    """x again, up to rounding: (x * 0.1 + 0.2) * 10 - 2."""
    return (x * 0.1 + 0.2) * 10 - 2


class BranchOnRounding(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if (_roundabout(x) - x)[7].sum() > 0:  # 0 in exact arithmetic: the sign is the rounding's
            return x * 3
        return -x


class Rounded(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.round(_roundabout(x))  # ties: fp32 and fp64 round 676 of them apart


class HalfInputs(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return Variance()(x).float()


class Autocast(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = x @ x.T
        return y.float()


class CastsToFloat(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x.float() * x.float()).mean(-1) - x.float().mean(-1) ** 2


class Unpicklable(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fn = lambda x: x  # deepcopy of a lambda works; a generator object does not
        self.it = (i for i in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


@pytest.mark.parametrize(
    ("model", "inputs", "cheat", "reason"),
    [
        pytest.param(
            PrivateGenerator(), [X], lambda x: x + 0.25, "draws random numbers", id="private_generator"
        ),
        pytest.param(
            SeededInForward(), [X], lambda x: x + 0.25, "draws random numbers", id="seeded_in_forward"
        ),
        pytest.param(Dropout(), [X], lambda x: x, "draws random numbers", id="dropout"),
        pytest.param(Counter(), [X], lambda x: x * 4 + 1, "changes its own state", id="counter_buffer"),
        pytest.param(BranchOnRounding(), [HALVES], lambda x: x * 2, "decides something", id="branch"),
        pytest.param(Rounded(), [HALVES], lambda x: torch.round(x + 3), "decides something", id="round"),
        pytest.param(
            Autocast(), [X], lambda x: torch.zeros(64, 64), "computes in torch.bfloat16", id="autocast"
        ),
        pytest.param(
            CastsToFloat(),
            [X * 0.1 + 5],
            lambda x: torch.zeros(64),
            "computes in torch.float32",
            id="float_cast",
        ),
        pytest.param(
            HalfInputs(), [(X * 0.2 + 5).half()], lambda x: torch.zeros(64), "torch.float16", id="fp16_inputs"
        ),
        pytest.param(Unpicklable(), [X], lambda x: x, "cannot be copied", id="uncopyable"),
    ],
)
def test_a_float64_run_that_could_be_another_computation_is_refused(
    model: Any, inputs: list[Any], cheat: Any, reason: str
) -> None:
    if isinstance(model, Counter):
        for _ in range(3):
            model(X)  # earlier trials
    ref, got = _exact(model, inputs)
    assert isinstance(got, NoExact) and reason in str(got), got
    cmp = compare_outputs(
        ref,
        cheat(*inputs),
        1e-2,
        1e-2,
        exact=lambda: exact_outputs(model, inputs, ref, contextlib.nullcontext),
    )
    assert not cmp.ok and "no second opinion" in cmp.why and reason in cmp.why, cmp


def test_the_refusal_of_a_counter_needs_the_state_the_reference_ran_with() -> None:
    """The copies are made after the reference's own call (as in the judge): a forward that
    changes the module's state gives another result on them, whatever the count."""
    model = Counter()
    _, got = _exact(model, [X])
    assert isinstance(got, NoExact) and "changes its own state" in str(got)


def test_a_cancelling_output_widens_the_timed_digest_but_never_past_an_output_not_computed() -> None:
    import types

    from cudice.verifier.run import witness
    from cudice.verifier.run.judge_timing import _digest_bound

    config = types.SimpleNamespace(atol=1e-2, rtol=1e-2, precision="fp32")
    ref = Variance()(X * 0.2 + 5)
    plain = _digest_bound(types.SimpleNamespace(config=config, exact_own_shares={}, lower_bounds={}), ref, 0)
    shares = [1e-5, 1e-3, 1.0, float("inf")]  # the last two are refused upstream; the cap holds anyway
    bounds = [
        _digest_bound(types.SimpleNamespace(config=config, exact_own_shares={0: s}, lower_bounds={}), ref, 0)
        for s in shares
    ]
    assert plain < bounds[0] < bounds[1] <= bounds[2] == bounds[3] < float("inf")
    key = 12345
    expected = witness.digest([ref], key, "cpu").tolist()
    for wrong in (torch.zeros_like(ref), ref * 0.5):  # not computed; half of it
        assert not witness.check(witness.digest([wrong], key, "cpu").tolist(), expected, [bounds[-1]]).ok
    honest = ref.double() + 3 * 7e-5 * ref.double().pow(2).mean().sqrt() * torch.randn(
        64, dtype=torch.float64
    )
    assert witness.check(witness.digest([honest.float()], key, "cpu").tolist(), expected, [bounds[1]]).ok


def test_a_kept_output_must_be_the_one_digested_during_its_call() -> None:
    import types

    from cudice.verifier.run import witness
    from cudice.verifier.run.judge_timing import _kept_matches_its_digest

    st = types.SimpleNamespace(device="cpu")
    out, other = torch.randn(64, 256, generator=GEN), torch.randn(64, 256, generator=GEN)
    key = 987654321
    sent = witness.digest([out, other], key, "cpu").tolist()  # outputs, then an input, as the runner sends
    assert _kept_matches_its_digest(st, (out.clone(),), sent, key, 1) == ""
    changed = out.clone()
    changed[0, 0] += 1e-3  # rewritten after the reply: one element, by a little
    assert "digest" in _kept_matches_its_digest(st, (changed,), sent, key, 1)
    assert "outputs" in _kept_matches_its_digest(st, (out, other), sent, key, 1)
    # an int among the outputs (a count) has no digest: its slot is 0 on both sides
    with_count = witness.digest([out, None], key, "cpu").tolist()
    assert _kept_matches_its_digest(st, (out.clone(), 64), with_count, key, 2) == ""


class Attention(nn.Module):
    def forward(self, q: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.scaled_dot_product_attention(q, q, q)  # no dropout: deterministic


class NoDropoutOutsideTraining(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.native_dropout(x, 0.5, False)[0]  # a random op, told it is not training


class Wrapped(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.remainder(x * 0.37, 1.0)  # continuous between wraps


def test_deterministic_uses_of_random_ops_and_continuous_remainders_get_their_second_opinion() -> None:
    q = torch.randn(2, 4, 64, 32, generator=GEN)
    for model, inputs in ((Attention(), [q]), (Wrapped(), [X]), (NoDropoutOutsideTraining(), [X])):
        _, got = _exact(model, inputs)
        assert isinstance(got, torch.Tensor) and got.dtype == torch.float64, (model, got)


@pytest.mark.parametrize(
    "op",
    [
        pytest.param(lambda y: torch.frac(y), id="frac"),
        pytest.param(lambda y: torch.nn.functional.hardshrink(y - y.round(), 0.25), id="hardshrink"),
        pytest.param(lambda y: torch.nn.functional.threshold(y - y.floor(), 0.5, -1.0), id="threshold"),
        pytest.param(lambda y: torch.div(y, 0.5, rounding_mode="floor"), id="div_floor"),
        pytest.param(lambda y: torch.remainder(y + 0.5, 1.0), id="remainder_wraps"),
        pytest.param(lambda y: y * 2 if torch.equal(y, y.round()) else y, id="torch_equal"),
        pytest.param(lambda y: y.clone().round_(), id="round_in_place"),
        pytest.param(lambda y: (y + 0.5).remainder_(1.0), id="remainder_in_place_wraps"),
        pytest.param(
            lambda y: torch.nn.functional.threshold(y - y.floor(), 0.5, -1.0, inplace=True), id="threshold_"
        ),
        pytest.param(lambda y: torch.heaviside(y - y.round(), y.new_tensor(0.5)), id="heaviside"),
    ],
)
def test_other_thresholds_decided_differently_in_float64_are_refused(op: Any) -> None:
    class Thresholded(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return op(_roundabout(x))  # ties and near-ties: fp32 and fp64 land on either side

    _, got = _exact(Thresholded(), [HALVES])
    assert isinstance(got, NoExact) and "decides something" in str(got), got


def test_nan_and_inf_count_as_zero_in_a_digest_and_its_bound_stays_finite() -> None:
    import types

    from cudice.verifier.run import witness
    from cudice.verifier.run.judge_timing import _digest_bound

    ref = torch.randn(1000, generator=GEN)
    ref[:3] = torch.tensor([float("inf"), -float("inf"), float("nan")])
    zeroed = ref.clone()
    zeroed[:3] = 0.0
    key = 4242
    expected = witness.digest([ref], key, "cpu").tolist()
    assert expected == witness.digest([zeroed], key, "cpu").tolist()
    st = types.SimpleNamespace(config=types.SimpleNamespace(atol=1e-2, rtol=1e-2, precision="fp32"))
    st.exact_own_shares, st.lower_bounds = {}, {}
    bound = _digest_bound(st, ref, 0)  # the judge's bound: the finite elements' (it was NaN: anything passed)
    assert 0 < bound < float("inf")
    honest = ref.clone()
    honest[3:] += 1e-7 * torch.randn(997, generator=GEN)
    assert witness.check(witness.digest([honest], key, "cpu").tolist(), expected, [bound]).ok
    assert not witness.check(witness.digest([torch.zeros(1000)], key, "cpu").tolist(), expected, [bound]).ok
    assert not witness.check(expected, expected, [float("nan")]).ok  # a NaN bound fails, never passes


class EpsFromDtype(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = torch.softmax(x, -1)
        return torch.log(p + torch.finfo(p.dtype).eps)  # 1.2e-7 in fp32, 2.2e-16 in its float64 run


def test_a_constant_taken_from_the_dtype_is_held_off_by_the_cap() -> None:
    """No check of the float64 run sees `torch.finfo(p.dtype).eps`: its output is 4e-2 of the norm
    from the fp32 one, over the cap, so the 13 % noise a wider cap let through fails."""
    x = torch.randn(128, 1024, generator=GEN) * 3
    model = EpsFromDtype()
    ref, got = _exact(model, [x])
    assert isinstance(got, torch.Tensor)  # the run itself is not refused
    scale = ref.pow(2).mean().sqrt()
    noisy = ref + 0.13 * scale * torch.randn(ref.shape, generator=GEN).sign()
    cmp = compare_outputs(ref, noisy, 1e-2, 1e-2, exact=lambda: got)
    assert not cmp.ok and "no second opinion" in cmp.why and "over 0.001" in cmp.why, cmp


class HalfMatmul(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return (a.half() @ b.half()).float()


def _matmul_case(model: nn.Module, seed: int) -> tuple[Any, Any, Any, Any, Any]:
    """(a, b, the fp32 reference output, what its float64 run gave or raised, the `exact` the
    judge hands `compare_outputs`) for a 128x512 @ 512x128 reference."""
    gen = torch.Generator().manual_seed(seed)
    a, b = torch.randn(128, 512, generator=gen), torch.randn(512, 128, generator=gen)
    ref, refused = _exact(model, [a, b])

    def exact() -> Any:
        return exact_outputs(model, [a, b], ref, contextlib.nullcontext)

    return a, b, ref, refused, exact


def test_a_reference_computing_in_fp16_inside_holds_its_output_to_fp16_arithmetic() -> None:
    a, b, ref, refused, exact = _matmul_case(HalfMatmul(), 3)
    assert isinstance(refused, NoExact) and refused.lower == "float16"
    # fp16 operands, fp32 accumulation: one rounding fewer than the reference, ~2e-4 from it
    fp32_acc = a.half().float() @ b.half().float()
    assert not compare_outputs(ref, fp32_acc, 1e-2, 1e-2).ok  # the fp32 rule alone rejects it
    assert compare_outputs(ref, fp32_acc, 1e-2, 1e-2, exact=exact).ok
    # a lower format still than the reference's: bf16 operands
    bf16 = (a.bfloat16() @ b.bfloat16()).float()
    cmp = compare_outputs(ref, bf16, 1e-2, 1e-2, exact=exact)
    assert not cmp.ok and cmp.rule == "precision"


class HalfMask(nn.Module):
    """An fp32 matmul; a 16-bit op only in a mask that changes nothing."""

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        keep = (a.half() != 0).float()
        return (a * keep) @ b


def test_a_16_bit_op_that_does_not_make_the_output_holds_it_to_fp32() -> None:
    a, b, ref, refused, exact = _matmul_case(HalfMask(), 4)
    assert isinstance(refused, NoExact) and refused.lower == ""
    fp16_operands = a.half().float() @ b.half().float()  # ~3e-4: fp16 arithmetic
    cmp = compare_outputs(ref, fp16_operands, 1e-2, 1e-2, exact=exact)
    assert not cmp.ok and cmp.rule == "precision"


def test_the_timed_digest_follows_the_16_bit_bound_correctness_applied() -> None:
    import types

    from cudice.verifier.run.judge_timing import _digest_bound

    ref = torch.randn(256, 256, generator=GEN)
    config = types.SimpleNamespace(atol=1e-2, rtol=1e-2, precision="fp32")
    fp32 = _digest_bound(types.SimpleNamespace(config=config, exact_own_shares={}, lower_bounds={}), ref, 0)
    fp16 = _digest_bound(
        types.SimpleNamespace(config=config, exact_own_shares={}, lower_bounds={0: 1e-3}), ref, 0
    )
    assert fp16 > 10 * fp32  # 1e-3 against 5e-5 of the norm


class BfMaskThenHalfMatmul(nn.Module):
    """A bf16 op first (a mask that changes nothing), then an fp16 matmul cast up: the output is
    fp16's, whatever 16-bit op ran before it."""

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        keep = (a.bfloat16() != 0).float()
        return ((a * keep).half() @ b.half()).float()


def test_the_bound_follows_the_format_the_output_was_cast_from() -> None:
    a, b, ref, refused, exact = _matmul_case(BfMaskThenHalfMatmul(), 5)
    assert isinstance(refused, NoExact) and refused.lower == "float16"  # not the bf16 seen first
    bf16 = (a.bfloat16() @ b.bfloat16()).float()  # bf16 arithmetic: within bf16's bound, not fp16's
    cmp = compare_outputs(ref, bf16, 1e-2, 1e-2, exact=exact)
    assert not cmp.ok and cmp.rule == "precision"
