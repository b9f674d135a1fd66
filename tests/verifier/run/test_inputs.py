"""The judge's correctness inputs (run/inputs.py): distributions applied where `get_inputs()` draws.

Every structure `get_inputs()` builds from its random values (triangular, symmetric, positive
definite, probabilities, sorted, unit rows, labels) must survive every distribution; the
distributions must still do their job (a LayerNorm taking statistics over fixed chunks fails);
the same seed must give the same bits, in this process and in another one.
"""

from __future__ import annotations

import contextlib
import hashlib
import subprocess
import sys
import textwrap
from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from cudice.verifier.run.inputs import DISTRIBUTIONS, InputsError, make_inputs, secret_seed  # noqa: E402
from torch import randn as bare_randn  # noqa: E402  (bound before make_inputs replaces torch.randn)

N = 24


def _triangular() -> list[Any]:  # KernelBench's lower-triangular matmul draws its operands so
    return [torch.tril(torch.rand(N, N)), torch.triu(torch.randn(N, N))]


def _check_triangular(lower: Any, upper: Any) -> None:
    assert torch.equal(lower, lower.tril()) and torch.equal(upper, upper.triu())
    inside = torch.ones(N, N, dtype=torch.bool)
    assert bool((lower[inside.tril()] != 0).all()) and bool((upper[inside.triu()] != 0).all())


def _symmetric() -> list[Any]:
    a = torch.randn(N, N)
    return [(a + a.T) / 2]


def _check_symmetric(s: Any) -> None:
    assert torch.equal(s, s.T)


def _positive_definite() -> list[Any]:
    a = torch.randn(N, N)
    return [a @ a.T + N * torch.eye(N)]


def _check_positive_definite(spd: Any) -> None:
    assert int(torch.linalg.cholesky_ex(spd.double()).info) == 0


def _probabilities() -> list[Any]:
    p = torch.rand(8, N)
    return [torch.softmax(torch.randn(8, N), dim=-1), p / p.sum(-1, keepdim=True)]


def _check_probabilities(*ps: Any) -> None:
    for p in ps:
        assert bool((p >= 0).all()) and torch.allclose(p.sum(-1), torch.ones(8), atol=1e-5)


def _sorted() -> list[Any]:
    return [torch.sort(torch.randn(N)).values, torch.randn(4, N).sort(dim=-1).values]


def _check_sorted(*xs: Any) -> None:
    for x in xs:
        assert bool((x.diff(dim=-1) >= 0).all())


def _normalised() -> list[Any]:
    return [F.normalize(torch.randn(8, N), dim=-1)]


def _check_normalised(x: Any) -> None:
    assert torch.allclose(x.norm(dim=-1), torch.ones(8), atol=1e-5)


def _labels() -> list[Any]:
    labels = torch.randint(0, 10, (N,))
    return [torch.randn(N, 10), labels, F.one_hot(labels, 10).float()]


def _check_labels(logits: Any, labels: Any, one_hot: Any) -> None:
    assert labels.dtype == torch.int64 and bool(((labels >= 0) & (labels < 10)).all())
    assert torch.equal(one_hot.sum(-1), torch.ones(N)) and torch.equal(one_hot.argmax(-1), labels)


def _bounded() -> list[Any]:
    return [torch.randn(N).clamp(-1.0, 1.0), torch.randn(N).abs(), torch.rand(N) < 0.5]


def _check_bounded(clamped: Any, magnitudes: Any, mask: Any) -> None:
    assert bool((clamped.abs() <= 1).all()) and bool((magnitudes >= 0).all()) and mask.dtype == torch.bool


STRUCTURES: dict[str, tuple[Callable[[], list[Any]], Callable[..., None]]] = {
    "triangular": (_triangular, _check_triangular),
    "symmetric": (_symmetric, _check_symmetric),
    "positive_definite": (_positive_definite, _check_positive_definite),
    "probabilities": (_probabilities, _check_probabilities),
    "sorted": (_sorted, _check_sorted),
    "normalised": (_normalised, _check_normalised),
    "labels": (_labels, _check_labels),
    "bounded": (_bounded, _check_bounded),
}


@pytest.mark.parametrize("dist", DISTRIBUTIONS)
@pytest.mark.parametrize("structure", sorted(STRUCTURES))
def test_get_inputs_structure_survives_every_distribution(structure: str, dist: str) -> None:
    get_inputs, check = STRUCTURES[structure]
    check(*make_inputs(get_inputs, secret_seed(), dist, "cpu"))


def test_distributions_shape_the_drawn_values_as_described() -> None:
    seed = secret_seed()
    as_given, wide, positive, shifted, structured, outliers = (
        make_inputs(lambda: [torch.randn(8, 6, 5, 64)], seed, d, "cpu")[0] for d in DISTRIBUTIONS
    )
    assert torch.equal(wide, as_given * 32)  # one base stream: the same draws, 32x wider
    assert bool((positive >= 0.05).all()) and bool((positive < 2.05).all())
    assert shifted.mean() > 3
    per_row = shifted.mean(-1)  # (8, 6, 5): every row its own offset, along every leading dim
    assert all(per_row.std(d).mean() > 0.15 for d in range(3))
    step = structured[1] - structured[0]  # repeated along dim 0, each copy moved by its own offset
    assert float(step.max() - step.min()) < 1e-5 and 0 < abs(float(step.mean())) < 0.01
    assert bool((structured.argmax(0) == structured.flip(0).argmax(0).neg().add(7)).all())  # no ties
    assert structured[..., 32:].mean() - structured[..., :32].mean() > 2.5  # a ramp along the last dim
    assert structured.mean() > 1.0  # [-1, 5] in fp32: the rows' sums do not cancel
    half = make_inputs(lambda: [torch.randn(64, 64, dtype=torch.float16)], seed, "structured", "cpu")[0]
    assert abs(half.float().mean()) < 1.0  # [-3, 3] in 16-bit formats: no overflow from a mean of 2
    half = make_inputs(lambda: [torch.randn(64, dtype=torch.float16)], seed, "wide", "cpu")[0]
    assert half.dtype == torch.float16 and half.abs().max() < 4 * 6  # 4x in 16-bit formats
    # the given values but two, large, at random positions: one with its sign kept, one positive
    moved = outliers != as_given
    assert int(moved.sum()) == 2
    assert bool((outliers[moved].abs() >= 96).all()) and float(outliers[moved].max()) >= 96
    assert int((outliers[moved].sign() == as_given[moved].sign()).sum()) >= 1
    tiny = make_inputs(lambda: [torch.rand(7)], seed, "outliers", "cpu")[0]
    plain = make_inputs(lambda: [torch.rand(7)], seed, "as_given", "cpu")[0]
    assert int((tiny != plain).sum()) == 2 and bool((tiny >= 0).all())  # two even in 7; rand stays >= 0
    one = make_inputs(lambda: [torch.randn(())], seed, "outliers", "cpu")[0]
    assert float(one) >= 96  # a single value: the positive one


def test_a_sample_of_the_outliers_input_rarely_sees_an_outlier() -> None:
    """A shortcut that reads k of the values (a probe) to decide whether the input is tame meets
    an outlier with odds of about 2k/numel: 32 strided values of a 64x4096 input, over 200 seeds."""
    hits = 0
    for _ in range(200):
        x = make_inputs(lambda: [torch.randn(64, 4096)], secret_seed(), "outliers", "cpu")[0]
        probe = x.reshape(-1)[:: x.numel() // 32][:32]
        hits += int(float(probe.abs().max()) >= 20.0)
        assert float(x.max()) >= 96  # and a softmax without the max subtraction overflows
    assert hits <= 2


@pytest.mark.parametrize("dist", DISTRIBUTIONS)
def test_honest_fp32_row_sums_pass_the_precision_bound_under_every_distribution(dist: str) -> None:
    """A kernel that sums each row one element at a time in fp32 is honest: its rounding differs
    from torch's order, never by more than fp32 allows. `structured` makes every row alike, so the
    whole output is one scalar per row position; its ramp once summed to zero along the row, that
    scalar then cancelled, and 13-17 % of such sums of 1024 columns failed the fp32 bound."""
    from cudice.verifier.run.tolerance import compare_outputs

    def one_by_one(x: torch.Tensor) -> torch.Tensor:
        total = torch.zeros(x.shape[:-1], dtype=torch.float32)
        for c in range(x.shape[-1]):
            total = total + x[..., c]
        return total

    for _ in range(60):  # with the zero-sum ramp 13-17 % of draws failed: (0.87)^60 < 3e-4
        (x,) = make_inputs(lambda: [torch.randn(16, 1024)], secret_seed(), dist, "cpu")
        ref = torch.sum(x, dim=-1)
        cmp = compare_outputs(ref, one_by_one(x), 1e-3, 1e-3, precision="fp32")
        assert cmp.ok, cmp.why


def test_integers_are_kept_as_drawn_and_equal_across_distributions() -> None:
    seed = secret_seed()
    labels = [make_inputs(_labels, seed, d, "cpu")[1] for d in DISTRIBUTIONS]
    assert all(torch.equal(labels[0], x) for x in labels[1:])
    assert not torch.equal(labels[0], make_inputs(_labels, seed + 1, "as_given", "cpu")[1])


def _chunk_layer_norm(x: Any, num_chunks: int = 64) -> Any:
    """A cheating LayerNorm: mean and variance over fixed contiguous chunks of the flat input."""
    chunks = x.reshape(num_chunks, -1)
    mean, var = chunks.mean(1, keepdim=True), chunks.var(1, unbiased=False, keepdim=True)
    return ((chunks - mean) / torch.sqrt(var + 1e-5)).reshape(x.shape)


def _sample_layer_norm(x: Any) -> Any:
    """An honest LayerNorm over all but the batch dim, in another precision and order."""
    dims = tuple(range(1, x.dim()))
    xd = x.double()
    mean, var = xd.mean(dims, keepdim=True), xd.var(dims, unbiased=False, keepdim=True)
    return ((xd - mean) / torch.sqrt(var + 1e-5)).float()


def test_chunk_statistics_layer_norm_fails_and_the_honest_one_passes() -> None:
    def rel_err(fn: Callable[[Any], Any], x: Any) -> float:
        ref = F.layer_norm(x, x.shape[1:])
        return float((fn(x) - ref).norm() / ref.norm())

    def get_inputs() -> list[Any]:
        return [torch.randn(16, 32, 32, 64)]  # 64 chunks of 16384: four per sample

    inputs = {d: make_inputs(get_inputs, 2024, d, "cpu")[0] for d in DISTRIBUTIONS}
    assert all(rel_err(_sample_layer_norm, x) < 1e-5 for x in inputs.values())
    cheat = {d: rel_err(_chunk_layer_norm, x) for d, x in inputs.items()}
    assert cheat["as_given"] < 1e-2  # iid values hide it: every chunk has the sample's statistics
    assert cheat["shifted"] > 1e-1, cheat


def test_factory_arguments_are_honoured_and_its_generator_replaced() -> None:
    def get_inputs() -> list[Any]:
        g = torch.Generator().manual_seed(0)  # a fixed generator would make the inputs predictable
        return [
            torch.randn(4, 4, generator=g),
            torch.rand(3, dtype=torch.float64, device="cpu"),
            torch.randn(5, dtype=torch.bfloat16),
            torch.empty(6).normal_(generator=g),
            torch.randint(0, 9, (7,), generator=g),
            torch.randn_like(torch.ones(2, 3), dtype=torch.float16),
        ]

    a, b = make_inputs(get_inputs, 1, "as_given", "cpu"), make_inputs(get_inputs, 2, "as_given", "cpu")
    dtypes = (torch.float32, torch.float64, torch.bfloat16, torch.float32, torch.int64, torch.float16)
    assert tuple(x.dtype for x in a) == dtypes
    assert [x.shape for x in a] == [(4, 4), (3,), (5,), (6,), (7,), (2, 3)]
    assert not any(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert not torch.equal(a[0], torch.randn(4, 4, generator=torch.Generator().manual_seed(0)))


def test_names_bound_in_the_reference_module_and_its_own_seeding() -> None:
    def get_inputs() -> list[Any]:
        torch.manual_seed(0)  # does nothing inside make_inputs
        return [bare_randn(8), torch.randperm(8)]

    seed = secret_seed()
    as_given, wide = (make_inputs(get_inputs, seed, d, "cpu") for d in ("as_given", "wide"))
    assert torch.equal(wide[0], as_given[0] * 32)  # `from torch import randn` is replaced too
    other = make_inputs(get_inputs, seed + 1, "as_given", "cpu")
    assert not torch.equal(other[0], as_given[0]) and not torch.equal(other[1], as_given[1])
    assert bare_randn is torch.randn  # restored


def test_originals_and_global_rng_are_restored_also_after_an_exception() -> None:
    randn, normal_, state = torch.randn, torch.Tensor.normal_, torch.get_rng_state()

    def broken() -> list[Any]:
        torch.randn(3)
        raise KeyError("no such shape")

    with pytest.raises(InputsError) as info:
        make_inputs(broken, 5, "shifted", "cpu")
    assert torch.randn is randn and torch.Tensor.normal_ is normal_ and "normal_" not in vars(torch.Tensor)
    assert torch.equal(torch.get_rng_state(), state)
    message = str(info.value)
    assert "broken" in message and __file__ in message and "KeyError" in message and "'shifted'" in message
    assert not info.value.only_under_dist and isinstance(info.value.__cause__, KeyError)


def test_a_failure_only_under_one_distribution_is_marked_so() -> None:
    def get_inputs() -> list[Any]:
        return [torch.bernoulli(torch.rand(N))]  # probabilities: 32x wider ones are not

    assert make_inputs(get_inputs, 3, "as_given", "cpu")[0].shape == (N,)
    with pytest.raises(InputsError, match="precondition") as info:
        make_inputs(get_inputs, 3, "wide", "cpu")
    assert info.value.only_under_dist and info.value.dist == "wide"
    with pytest.raises(ValueError, match="as_given"):
        make_inputs(get_inputs, 3, "gaussian", "cpu")


def test_tensors_made_without_a_random_factory_are_left_as_made() -> None:
    def get_inputs() -> list[Any]:
        return [torch.ones(4), torch.arange(5.0), torch.tensor([1.5, -2.0]), 7, "text"]

    for dist in DISTRIBUTIONS:
        ones, ramp, fixed, k, s = make_inputs(get_inputs, secret_seed(), dist, "cpu")
        assert torch.equal(ones, torch.ones(4)) and torch.equal(ramp, torch.arange(5.0))
        assert torch.equal(fixed, torch.tensor([1.5, -2.0])) and (k, s) == (7, "text")


SOURCE = textwrap.dedent(
    """
    import torch

    def get_inputs():
        a = torch.randn(16, 32)
        return [torch.tril(torch.rand(16, 16)), a @ a.T, torch.randint(0, 5, (9,)),
                torch.empty(4, 8).uniform_(-1, 1), torch.normal(0.0, 2.0, (3, 5, 7)), 3]
    """
)

DIGEST = textwrap.dedent(
    """
    import hashlib, sys, torch
    from cudice.verifier.run.inputs import DISTRIBUTIONS, make_inputs

    def digest(get_inputs, seed):
        h = hashlib.sha256()
        for dist in DISTRIBUTIONS:
            for x in make_inputs(get_inputs, seed, dist, "cpu"):
                h.update(x.numpy().tobytes() if isinstance(x, torch.Tensor) else repr(x).encode())
        return h.hexdigest()
    """
)


def _digest(seed: int) -> str:
    scope: dict[str, Any] = {"hashlib": hashlib}
    exec(SOURCE + DIGEST, scope)
    return str(scope["digest"](scope["get_inputs"], seed))


def test_same_seed_same_bits_in_this_process_and_another() -> None:
    seed = secret_seed()
    here = _digest(seed)
    assert _digest(seed) == here and _digest(seed + 1) != here
    script = SOURCE + DIGEST + f"\nprint(digest(get_inputs, {seed}))\n"
    other = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    assert other.stdout.strip() == here


@pytest.mark.gpu
def test_inputs_land_on_the_device_and_draws_there_are_seeded() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")

    def get_inputs() -> list[Any]:
        return [torch.randn(64, device="cuda"), torch.tril(torch.rand(8, 8))]

    a, b = (make_inputs(get_inputs, 9, "shifted", "cuda") for _ in range(2))
    assert a[0].is_cuda and a[1].is_cuda and torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert torch.equal(a[1], a[1].tril())


@pytest.mark.gpu
def test_drawing_on_the_device_is_seeded_and_keeps_the_structure() -> None:
    """The judge's timed sets are drawn on the GPU itself: same seed, same values; `tril` and the
    like keep their structure; a tensor that get_inputs() puts on the CPU explicitly still arrives."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")

    def get_inputs() -> list[Any]:
        return [torch.tril(torch.randn(64, 64)), torch.randn(8, device="cpu"), 3]

    a, b = (make_inputs(get_inputs, 5, "as_given", "cuda", draw_on_device=True) for _ in range(2))
    assert a[0].is_cuda and a[1].is_cuda and a[2] == 3
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) and torch.equal(a[0], a[0].tril())
    # drawn on the device indeed: a CPU draw, the silent fallback, gives other values
    on_cpu = make_inputs(get_inputs, 5, "as_given", "cpu")
    assert not torch.equal(a[0].cpu(), on_cpu[0])


def test_the_first_draw_on_a_device_leaves_torchs_default_device_working() -> None:
    """torch's default-device mode builds its set of factories once, at its first use: built while
    make_inputs' replacements were installed, no factory in the process would get the default
    device afterwards (every draw on the GPU silently fell back to the CPU). A fresh interpreter,
    whose first default-device use is make_inputs', must still draw on the default device after."""
    script = textwrap.dedent(
        """
        import torch
        from cudice.verifier.run.inputs import make_inputs
        make_inputs(lambda: [torch.randn(16)], 3, "as_given", "meta", draw_on_device=True)
        with torch.device("meta"):
            print("DEVICE", torch.randn(2).device.type, torch.rand(2).device.type)
        """
    )
    got = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert "DEVICE meta meta" in got.stdout, got.stdout + got.stderr[-2000:]


def test_a_get_inputs_that_cannot_draw_on_the_device_is_drawn_on_the_cpu() -> None:
    """Where drawing on the device fails, get_inputs() runs again on the CPU: the same values as a
    plain CPU draw (the meta device stands in for a device it cannot draw on)."""

    def get_inputs() -> list[Any]:
        x = torch.randn(16)
        return [x, float(x.sum())]  # a host value: cannot be read from a meta tensor

    got = make_inputs(get_inputs, 7, "as_given", "meta", draw_on_device=True)
    want = make_inputs(get_inputs, 7, "as_given", "cpu")
    assert got[0].device.type == "meta" and got[1] == want[1]


def test_only_the_references_own_distribution_draws_on_the_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """Another distribution may break a precondition of get_inputs() (bernoulli of probabilities
    beyond [0, 1]); on a GPU that is a device-side assertion that ends the CUDA context, so those
    draws run on the CPU, where it raises and the distribution is skipped. Where each draw was
    asked to run is recorded (there is no GPU here)."""
    from cudice.verifier.run import inputs

    asked: list[tuple[str, str | None]] = []
    real_run = inputs._run

    def run(get_inputs: Any, seed: int, dist: str, default_device: str | None = None) -> list[Any]:
        asked.append((dist, default_device))
        return real_run(get_inputs, seed, dist)

    monkeypatch.setattr(inputs, "_run", run)

    def get_inputs() -> list[Any]:
        return [torch.bernoulli(torch.rand(N))]

    make_inputs(get_inputs, 7, "as_given", "meta", draw_on_device=True)  # meta: a device, not the CPU
    assert asked == [("as_given", "meta")]
    asked.clear()
    for dist in DISTRIBUTIONS[1:]:
        with contextlib.suppress(InputsError):
            make_inputs(get_inputs, 7, dist, "meta", draw_on_device=True)
    assert asked and all(device is None for _, device in asked), asked
