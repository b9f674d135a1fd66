"""The judge's comparison (run/tolerance.py) and wire format (run/channel.py); its inputs: test_inputs.py."""

from __future__ import annotations

import socket
import threading
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from cudice.verifier.config import VerifyConfig  # noqa: E402
from cudice.verifier.run import channel  # noqa: E402
from cudice.verifier.run.tolerance import PRECISIONS, NoExact, compare_outputs  # noqa: E402


def test_tiny_garbage_fails_where_an_absolute_atol_accepted_it() -> None:
    x = torch.randn(8, 65536)
    ref = torch.softmax(x, dim=1)  # every value ~1.5e-5
    assert torch.allclose(x * 1e-6, ref, atol=1e-2, rtol=1e-2)  # what the old absolute check accepted
    cmp = compare_outputs(ref, x * 1e-6, 1e-2, 1e-2)
    assert not cmp.ok and "rms" in cmp.why and cmp.rule == "element"


def test_honest_rounding_passes_in_every_dtype() -> None:
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(256, 256, dtype=torch.float64, generator=gen)
    b = torch.randn(256, 256, dtype=torch.float64, generator=gen)
    exact = a @ b
    fp32 = (a.float() @ b.float()).double()  # another summation order and precision
    assert compare_outputs(exact.float(), fp32.float(), 1e-2, 1e-2).ok
    # both sides see the same bf16 inputs, as the judge's reference and the candidate do
    a16, b16 = a.bfloat16(), b.bfloat16()
    exact16 = (a16.double() @ b16.double()).bfloat16()
    assert compare_outputs(exact16, (a16.float() @ b16.float()).bfloat16(), 1e-2, 1e-2).ok


def test_a_small_bias_on_every_element_fails_the_norm_check_with_the_bound_it_applies() -> None:
    ref = torch.randn(4096).abs() + 1.0
    biased = ref * (1 + 0.9e-2)  # each element inside rtol=1e-2, the whole output 0.9% off
    for precision in PRECISIONS:
        cmp = compare_outputs(ref, biased, 1e-2, 1e-2, precision=precision)
        assert not cmp.ok and cmp.rule == "norm" and cmp.precision == precision
        # the bound stated is the one applied: (rtol + atol) / 4, below the error it rejects
        assert "relative norm error 0.009 is above the norm bound 0.005 " in cmp.why, cmp.why
    assert compare_outputs(ref, ref * (1 + 1e-4), 1e-2, 1e-2, precision="lenient").ok
    assert compare_outputs(ref, ref * (1 + 1e-6), 1e-2, 1e-2).ok


def _tf32(x: torch.Tensor) -> torch.Tensor:
    """The inputs a TF32 tensor core multiplies: mantissas rounded to 10 bits."""
    return ((x.contiguous().view(torch.int32) + 0x1000) & ~0x1FFF).view(torch.float32)


def _chunked_matmul(a: torch.Tensor, b: torch.Tensor, num_chunks: int) -> torch.Tensor:
    k = a.shape[1] // num_chunks
    return sum((a[:, i : i + k] @ b[i : i + k] for i in range(0, a.shape[1], k)), torch.zeros(()))


@pytest.fixture(scope="module")
def matmul() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    a, b = torch.randn(512, 1024), torch.randn(1024, 512)
    return a, b, a @ b


@pytest.mark.parametrize(
    "lower",
    [
        pytest.param(lambda a, b: _tf32(a) @ _tf32(b), id="tf32"),
        pytest.param(lambda a, b: a.half().float() @ b.half().float(), id="fp16_inputs"),
        pytest.param(lambda a, b: (a @ b).half().float(), id="fp16_output"),
    ],
)
def test_lower_precision_matmul_fails_fp32_and_passes_lenient(matmul: Any, lower: Any) -> None:
    a, b, ref = matmul
    cand = lower(a, b)
    cmp = compare_outputs(ref, cand, 1e-2, 1e-2, precision="fp32")
    assert not cmp.ok and cmp.rule == "precision" and 1e-4 < cmp.rel_norm_err < 1e-3
    assert "above the fp32 bound 5e-05" in cmp.why and "precision='lenient'" in cmp.why
    assert "TF32" in cmp.why and "compute in fp32" in cmp.why
    lenient = compare_outputs(ref, cand, 1e-2, 1e-2, precision="lenient")
    assert lenient.ok and lenient.precision == "lenient" and "fp32 bound" in lenient.note
    assert not compare_outputs(ref.double(), cand.double(), 1e-2, 1e-2).ok  # fp64 held to fp32 too


def _online_softmax(x: torch.Tensor, block: int) -> torch.Tensor:
    m = torch.full((*x.shape[:-1], 1), -float("inf"))
    s = torch.zeros((*x.shape[:-1], 1))
    for c in x.split(block, -1):
        new_m = torch.maximum(m, c.amax(-1, keepdim=True))
        s = s * torch.exp(m - new_m) + torch.exp(c - new_m).sum(-1, keepdim=True)
        m = new_m
    return torch.exp2((x - m) * 1.4426950408889634) / s


def _two_pass_layer_norm(x: torch.Tensor) -> torch.Tensor:
    mean = x.mean(-1, keepdim=True)
    return (x - mean) * torch.rsqrt(((x - mean) ** 2).mean(-1, keepdim=True) + 1e-5)


def _one_pass_layer_norm(x: torch.Tensor) -> torch.Tensor:
    mean = x.mean(-1, keepdim=True)
    return (x - mean) * torch.rsqrt((x * x).mean(-1, keepdim=True) - mean * mean + 1e-5)


def test_honest_fp32_in_another_order_passes_fp32(matmul: Any) -> None:
    a, b, ref = matmul
    cases = [
        (ref, (a.double() @ b.double()).float()),  # fp64 accumulation
        (ref, _chunked_matmul(a, b, 8)),  # split-K
    ]
    x = torch.randn(1 << 20, generator=torch.Generator().manual_seed(0))
    blocks = x.view(1024, -1).sum(1)
    cases += [(x.sum(), blocks.sum()), (x.sum(), x.double().sum().float())]  # tree and fp64 sums
    rows = torch.randn(64, 4096) * 3 + 5  # the mean-5 rows the judge's shifted inputs bring
    for inputs in (rows, torch.randn(64, 4096) * 32):  # and the wide ones
        cases += [
            (torch.softmax(inputs, -1), _online_softmax(inputs, 512)),
            (torch.nn.functional.layer_norm(inputs, (4096,)), _two_pass_layer_norm(inputs)),
            (torch.nn.functional.layer_norm(inputs, (4096,)), _one_pass_layer_norm(inputs)),
        ]
    for i, (r, c) in enumerate(cases):
        cmp = compare_outputs(r, c, 1e-2, 1e-2)
        assert cmp.ok and cmp.rel_norm_err < 1e-5 and cmp.note == "", (i, cmp)


def test_precision_applies_to_fp32_and_fp64_outputs_only() -> None:
    x = torch.randn(64, 256)
    ref = torch.softmax(x, -1).to(torch.bfloat16)
    assert compare_outputs(ref, torch.softmax(x.bfloat16().float(), -1).bfloat16(), 1e-2, 1e-2).ok
    exact = torch.randn(256, 256, dtype=torch.float64)
    assert compare_outputs(exact, exact.float().double(), 1e-2, 1e-2).ok  # fp32 arithmetic is enough


def test_unknown_precision_and_config_values_are_refused() -> None:
    ref = torch.ones(3)
    with pytest.raises(ValueError, match=r"'fp32'.*'lenient'"):
        compare_outputs(ref, ref, 1e-2, 1e-2, precision="tf32")
    assert VerifyConfig().precision == "fp32" and VerifyConfig(precision="lenient").precision == "lenient"
    with pytest.raises(ValueError, match=r"VerifyConfig.precision='fp16' must be 'fp32' or 'lenient'"):
        VerifyConfig(precision="fp16")


@pytest.mark.parametrize(
    ("cand", "needle"),
    [
        (lambda r: r[:-1], "shape"),
        (lambda r: r.double(), "dtype"),
        (lambda r: r + 1.0, "differs"),
        (lambda r: torch.where(r > 0, torch.full_like(r, float("inf")), r), "NaN/Inf"),
        (lambda r: (r, r), "outputs"),
    ],
)
def test_mismatches_are_named(cand: object, needle: str) -> None:
    ref = torch.randn(16, 8)
    cmp = compare_outputs(ref, cand(ref), 1e-2, 1e-2)  # type: ignore[operator]
    assert not cmp.ok and needle in cmp.why


def test_outputs_nest_like_the_reference_and_dicts_pair_up_by_key() -> None:
    a, b = torch.randn(4, 3), torch.randn(5)
    ref = {"mean": a, "count": 7, "extra": (b,)}
    # the same keys in another order: pairs by key, not by insertion order
    reordered = {"extra": [b.clone()], "count": 7, "mean": a.clone()}
    assert compare_outputs(ref, reordered, 1e-2, 1e-2).ok
    # a key renamed (same leaves, same order): a caller would read a key that is not there
    renamed = {"mean": a.clone(), "count": 7, "extra_": (b.clone(),)}
    cmp = compare_outputs(ref, renamed, 1e-2, 1e-2)
    assert not cmp.ok and cmp.rule == "structure" and "'extra_'" in cmp.why and "'extra'" in cmp.why
    # tuple against list is the same layout; a bare tensor against a 1-tuple is not
    assert compare_outputs((a, b), [a.clone(), b.clone()], 1e-2, 1e-2).ok
    cmp = compare_outputs(a, (a.clone(),), 1e-2, 1e-2)
    assert not cmp.ok and cmp.rule == "structure" and "(x,)" in cmp.why
    # keys that crossed the runner's channel as text pair up with the reference's int keys
    assert compare_outputs({0: a, 1: b}, {"1": b.clone(), "0": a.clone()}, 1e-2, 1e-2).ok


def test_non_finite_reference_elements_are_left_unjudged_only_when_asked() -> None:
    ref = torch.tensor([1.0, float("inf"), 3.0, float("nan")])
    other = torch.tensor([1.0, 1e30, 3.0, 4.0])  # an order that did not overflow
    assert not compare_outputs(ref, other, 1e-2, 1e-2).ok
    assert compare_outputs(ref, other, 1e-2, 1e-2, match_non_finite=False).ok
    # the finite elements are still judged
    wrong = torch.tensor([1.0, 1e30, 6.0, 4.0])
    cmp = compare_outputs(ref, wrong, 1e-2, 1e-2, match_non_finite=False)
    assert not cmp.ok and cmp.rule == "element"


def test_a_plain_value_must_have_the_reference_type() -> None:
    assert compare_outputs((torch.ones(3), 5), (torch.ones(3), 5), 1e-2, 1e-2).ok
    for wrong in (torch.tensor(5.0), torch.tensor([5, 5]), 5.0, "5"):
        cmp = compare_outputs((torch.ones(3), 5), (torch.ones(3), wrong), 1e-2, 1e-2)
        assert not cmp.ok and cmp.rule == "value", wrong


def test_a_plain_float_is_compared_within_the_tolerance() -> None:
    ref = (torch.ones(3), 0.5)
    assert compare_outputs(ref, (torch.ones(3), 0.5 + 1e-6), 1e-2, 1e-2).ok  # another summation order
    for wrong in (0.6, float("nan"), float("inf"), 1, torch.tensor(0.5)):
        cmp = compare_outputs(ref, (torch.ones(3), wrong), 1e-2, 1e-2)
        assert not cmp.ok and cmp.rule == "value", wrong
    assert compare_outputs((float("nan"),), (float("nan"),), 1e-2, 1e-2).ok


def test_complex64_outputs_are_held_to_fp32_arithmetic() -> None:
    torch.manual_seed(0)
    x = torch.randn(64, 1024)
    ref = torch.fft.fft(x)
    assert compare_outputs(ref, torch.fft.fft(x.double()).to(torch.complex64), 1e-2, 1e-2).ok
    lower = torch.fft.fft(x.bfloat16().float())  # bf16 inputs: within 1e-2, far beyond fp32
    cmp = compare_outputs(ref, lower, 1e-2, 1e-2)
    assert not cmp.ok and cmp.rule == "precision"
    assert compare_outputs(ref, lower, 1e-2, 1e-2, precision="lenient").ok


def test_integer_outputs_must_be_equal() -> None:
    ref = torch.arange(10)
    assert compare_outputs(ref, ref.clone(), 1e-2, 1e-2).ok
    assert not compare_outputs(ref, ref + (ref == 3), 1e-2, 1e-2).ok


def test_channel_round_trip_and_bounds() -> None:
    a, b = socket.socketpair()
    value = (torch.randn(3, 4), [torch.arange(5), {"k": torch.ones(2, dtype=torch.bfloat16)}], 7, None, "s")
    tree, blobs = channel.encode(value)
    sender = threading.Thread(target=channel.send, args=(a, {"outputs": tree}, blobs))
    sender.start()
    header, got = channel.recv(b, 1 << 20)
    sender.join()
    back = channel.decode(header["outputs"], got)
    assert torch.equal(back[0], value[0]) and torch.equal(back[1][0], value[1][0])
    assert back[1][1]["k"].dtype == torch.bfloat16 and back[2:] == (7, None, "s")
    sender = threading.Thread(target=channel.send, args=(a, {"outputs": tree}, blobs))
    sender.start()
    with pytest.raises(channel.ChannelError, match="more than"):
        channel.recv(b, 8)  # a reply bigger than the judge allows is refused before it is read
    sender.join()
    with pytest.raises(channel.ChannelError, match="malformed"):
        channel.decode({"__t__": 0, "dtype": "object", "shape": [1]}, [bytearray(8)])
    a.close()
    b.close()


def test_timed_call_messages_round_trip_and_refuse_a_flood() -> None:
    """A stream's binary messages: a call and its digests come back exact, a failed call says so,
    and a reply that claims more digests than the judge allows is refused before it is read."""
    a, b = socket.socketpair()
    try:
        channel.send_call(a, 3, 2**64 - 5, channel.NO_SEAL)
        assert channel.recv_call(b) == (3, 2**64 - 5, channel.NO_SEAL)
        channel.send_digests(b, [1.5, -2.25e300, float("inf")])
        assert channel.recv_digests(a, 4) == [1.5, -2.25e300, float("inf")]
        channel.send_digests(b, None)
        assert channel.recv_digests(a, 4) is None
        channel.send_digests(b, [0.0] * 5)
        with pytest.raises(channel.ChannelError, match="at most 4"):
            channel.recv_digests(a, 4)
    finally:
        a.close()
        b.close()


def _variance_by_moments(x: torch.Tensor) -> torch.Tensor:
    """A variance as E[x^2] - E[x]^2: on rows of mean 5 and sd 0.2 it cancels 625-fold, so the fp32
    result is ~8e-5 off the exact one in norm, above the fp32 bound itself."""
    return (x * x).mean(-1) - x.mean(-1) ** 2


def test_an_output_that_cancels_is_judged_against_the_float64_reference() -> None:
    x = torch.randn(64, 4096, generator=torch.Generator().manual_seed(1)) * 0.2 + 5
    ref, exact = _variance_by_moments(x), _variance_by_moments(x.double())
    mean = x.mean(-1, keepdim=True)
    honest = ((x - mean) ** 2).mean(-1)  # two passes: more accurate than the reference
    asked: list[int] = []

    def exact_outputs() -> tuple[torch.Tensor]:
        asked.append(1)
        return (exact,)

    alone = compare_outputs((ref,), (honest,), 1e-2, 1e-2)
    assert not alone.ok and alone.rule == "precision"  # the fp32 reference alone rejects it
    judged = compare_outputs((ref,), (honest,), 1e-2, 1e-2, exact=exact_outputs)
    assert judged.ok and "judged against the reference computed in float64" in judged.exact_note, judged
    assert asked == [1] and judged.note == ""
    ((index, share),) = judged.exact_own_shares
    assert index == 0 and 1e-5 < share < 1e-3
    # fp16 arithmetic still fails, with both findings in the message (TF32's inputs pass here:
    # on this output they are within 4x of PyTorch's own fp32 result's distance to the exact one)
    for lower in (_variance_by_moments(x.half()).float(), _variance_by_moments(x.bfloat16()).float()):
        cmp = compare_outputs((ref,), (lower,), 1e-2, 1e-2, exact=exact_outputs)
        assert not cmp.ok and "against the reference computed in float64 too" in cmp.why, cmp
        assert cmp.exact_own_shares == ()
    # so does a candidate that knows the exact output and moves it 5x the reference's own error
    nudged = (exact - 5 * (ref.double() - exact)).float()
    assert not compare_outputs((ref,), (nudged,), 1e-2, 1e-2, exact=exact_outputs).ok


def test_an_output_that_is_mostly_rounding_noise_gets_no_second_opinion() -> None:
    """LayerNorm and then the mean over the normalised dim: 0 in exact arithmetic, so each value
    fp32 gives is its own rounding, and a comparison cannot tell an honest kernel from zeros."""
    x = torch.randn(64, 4096, generator=torch.Generator().manual_seed(1)) * 3 + 5
    ref = torch.nn.functional.layer_norm(x, (4096,)).mean(-1)
    exact = torch.nn.functional.layer_norm(x.double(), (4096,)).mean(-1)
    for cand in (_two_pass_layer_norm(x).view(64, 16, 256).sum(-1).sum(-1) / 4096, torch.zeros(64)):
        cmp = compare_outputs((ref,), (cand,), 1e-2, 1e-2, exact=lambda: (exact,))
        assert not cmp.ok and "no second opinion" in cmp.why and "rounding noise" in cmp.why, cmp


def test_the_float64_reference_moves_no_bound_where_the_output_does_not_cancel(matmul: Any) -> None:
    a, b, ref = matmul
    asked: list[int] = []

    def exact() -> torch.Tensor:
        asked.append(1)
        return a.double() @ b.double()

    assert compare_outputs(ref, _chunked_matmul(a, b, 8), 1e-2, 1e-2, exact=exact).ok
    assert asked == []  # a passing output never asks for it
    cmp = compare_outputs(ref, _tf32(a) @ _tf32(b), 1e-2, 1e-2, exact=exact)
    assert not cmp.ok and cmp.rule == "precision" and "above the fp32 bound 5e-05" in cmp.why, cmp
    assert "float64 too" in cmp.why and asked == [1]

    def refused() -> torch.Tensor:  # the judge's run refuses (exact_reference.py)
        raise NoExact("the reference's forward draws random numbers (aten::rand)")

    failed = compare_outputs(ref, _tf32(a) @ _tf32(b), 1e-2, 1e-2, exact=refused)
    assert not failed.ok and failed.rule == "precision" and "draws random numbers" in failed.why


def test_where_the_reference_is_not_finite_the_kernel_must_match_it() -> None:
    ref = torch.randn(1000)
    ref[:3] = torch.tensor([float("inf"), -float("inf"), float("nan")])
    honest = ref.clone()
    honest[3:] += 1e-7 * torch.randn(997)
    assert compare_outputs(ref, honest, 1e-2, 1e-2).ok
    for garbage in (torch.zeros(1000), torch.where(torch.isfinite(ref), torch.zeros(1000), ref)):
        cmp = compare_outputs(ref, garbage, 1e-2, 1e-2)  # an Inf used to make every bound Inf
        assert not cmp.ok and cmp.rule in ("non_finite", "element"), cmp
    flipped = honest.clone()
    flipped[0] = -float("inf")
    assert compare_outputs(ref, flipped, 1e-2, 1e-2).rule == "non_finite"
    finite = torch.randn(10)
    assert compare_outputs(
        finite, finite.clone().index_fill_(0, torch.tensor([2]), float("nan")), 1e-2, 1e-2
    ).rule == ("non_finite")


def test_complex_outputs_are_compared_in_both_parts() -> None:
    ref = torch.randn(256, dtype=torch.complex64)
    assert compare_outputs(ref, ref.clone(), 1e-2, 1e-2).ok
    wrong_imaginary = torch.complex(ref.real, torch.randn(256))
    assert not compare_outputs(ref, wrong_imaginary, 1e-2, 1e-2).ok


def test_a_lazily_conjugated_complex_output_is_compared_not_a_crash() -> None:
    z = torch.randn(64, dtype=torch.complex64)
    ref = z.conj()  # a view with the conjugate bit, as `.mH` and `.adjoint()` give
    assert compare_outputs(ref, z.conj().resolve_conj(), 1e-2, 1e-2).ok
    assert not compare_outputs(ref, z, 1e-2, 1e-2).ok
