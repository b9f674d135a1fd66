"""Dynamic anti-cheat checks on CPU tensors (mutation, aliasing, subclasses, constant/zero
outputs, determinism, kernel-name matching, side-stream and thread arithmetic, patched timers)
and, under `gpu`, the profiler and stream measurements on real kernels."""

from __future__ import annotations

import threading
import time

import pytest

torch = pytest.importorskip("torch")

from cudice.verifier.run import dynamic_checks as dc  # noqa: E402
from cudice.verifier.run.tolerance import finite_scale  # noqa: E402
from cudice.verifier.source.result import Severity, Stage  # noqa: E402


def codes(diags: list) -> set[str]:
    return {d.code for d in diags if d.severity is Severity.ERROR}


def test_input_mutation_is_caught_and_clean_inputs_pass() -> None:
    x, n = torch.randn(64), 3
    before = dc.snapshot_inputs([x, n])
    assert dc.check_inputs_unchanged(before, [x, n]) == []
    x[5] = 0.0
    diags = dc.check_inputs_unchanged(before, [x, n])
    assert codes(diags) == {"dynamic.input_mutated"} and diags[0].stage is Stage.CORRECTNESS
    assert "#0" in diags[0].message


def test_nan_inputs_left_alone_are_unchanged() -> None:
    x = torch.tensor([1.0, float("nan"), 3.0])
    assert dc.check_inputs_unchanged(dc.snapshot_inputs([x]), [x]) == []


def test_outputs_must_be_plain_dense_tensors_of_the_reference_dtype() -> None:
    ref = torch.randn(8)

    class Lazy(torch.Tensor):
        pass

    assert dc.check_outputs_plain(torch.randn(8), ref) == []
    assert codes(dc.check_outputs_plain(torch.randn(8).as_subclass(Lazy), ref)) == {
        "dynamic.output_not_plain_tensor"
    }
    assert codes(dc.check_outputs_plain([1.0, 2.0], [ref, ref])) == {"dynamic.output_not_plain_tensor"}
    # an int where the reference returns an int (a count) is compared by value
    assert dc.check_outputs_plain((torch.randn(8), 64), (ref, 64)) == []
    assert codes(dc.check_outputs_plain((torch.randn(8), 64.0), (ref, 64))) == {
        "dynamic.output_not_plain_tensor"
    }
    assert codes(dc.check_outputs_plain(torch.randn(8).to_sparse(), ref)) == {
        "dynamic.output_not_plain_tensor"
    }
    assert codes(dc.check_outputs_plain(torch.randn(8).half(), ref)) == {"dynamic.output_dtype_mismatch"}
    assert codes(dc.check_outputs_plain(torch.empty(8, device="meta"), ref)) == {
        "dynamic.output_not_plain_tensor"
    }


def test_aliasing_inputs_or_reference_outputs() -> None:
    x = torch.randn(16)
    ref_out = torch.relu(x)
    fresh = torch.empty_like(x)
    assert dc.check_no_aliasing(fresh, [x], ref_out) == []
    assert codes(dc.check_no_aliasing(x, [x], ref_out)) == {"dynamic.output_aliases_input"}
    assert codes(dc.check_no_aliasing(x.view(4, 4)[1:], [x])) == {"dynamic.output_aliases_input"}
    assert codes(dc.check_no_aliasing((fresh, ref_out[2:]), [x], ref_out)) == {
        "dynamic.output_aliases_reference"
    }


def test_zero_and_constant_outputs_when_the_reference_varies() -> None:
    torch.manual_seed(0)
    refs = [torch.softmax(torch.randn(4, 65536), dim=1) for _ in range(3)]  # tiny values (~1.5e-5)
    assert torch.allclose(torch.zeros(4, 65536), refs[0], atol=1e-2, rtol=1e-2)  # why the check exists
    zeros = [torch.zeros_like(r) for r in refs]
    assert "dynamic.zero_output" in codes(dc.check_not_constant(zeros, refs))
    const = [torch.full_like(r, 1 / 65536) for r in refs]
    assert "dynamic.constant_output" in codes(dc.check_not_constant(const, refs))
    same = [refs[0].clone() for _ in refs]  # a cached first answer, returned for every input
    assert codes(dc.check_not_constant(same, refs)) == {"dynamic.constant_output"}
    assert dc.check_not_constant([r.clone() for r in refs], refs) == []


def test_a_reference_that_varies_by_its_rounding_alone_allows_a_single_valued_output() -> None:
    # rows that differ by a shift: their variance is one value exactly; PyTorch's fp32
    # E[x^2] - E[x]^2 varies from row to row by rounding, an accurate kernel's does not
    torch.manual_seed(0)
    row = torch.randn(4096, dtype=torch.float64) * 0.2 + 5
    x = (row + torch.arange(64, dtype=torch.float64)[:, None] * 1e-3).float()
    ref = (x * x).mean(1) - x.mean(1) ** 2
    assert ref.unique().numel() > 1  # it does vary, by rounding
    exact = torch.full_like(ref, float(row.var(unbiased=False)))
    assert dc.check_not_constant([exact], [ref]) == []
    # a single value where the reference varies by far more than its rounding is still caught
    ref2 = torch.randn(64).abs() + 1
    assert codes(dc.check_not_constant([torch.full_like(ref2, 1.5)], [ref2])) == {"dynamic.constant_output"}


def test_a_constant_discrete_output_is_left_to_the_exact_comparison() -> None:
    """An honest argmax that keeps the last of saturated maxima is constant where the reference's
    first index varies: the comparison judges discrete outputs (ties included), not this check."""
    refs = [torch.randint(0, 16, (256,)) for _ in range(3)]
    assert dc.check_not_constant([torch.full_like(r, 15) for r in refs], refs) == []
    floats = [r.float() for r in refs]  # the same values as floats are still caught
    assert codes(dc.check_not_constant([torch.full_like(r, 15.0) for r in floats], floats)) == {
        "dynamic.constant_output"
    }


def test_constant_reference_allows_constant_output() -> None:
    refs = [torch.zeros(8) for _ in range(3)]  # e.g. a task whose answer is identically zero
    assert dc.check_not_constant([torch.zeros(8) for _ in range(3)], refs) == []


def test_determinism() -> None:
    a = torch.randn(32)
    assert dc.check_deterministic(a, a.clone() + 1e-6, atol=1e-4, rtol=1e-4) == []
    b = a.clone()
    b[3] += 1.0
    assert codes(dc.check_deterministic(a, b, atol=1e-2, rtol=1e-2)) == {"dynamic.nondeterministic"}
    # atol is relative to the reference output's rms (the judge's `scales`), as in the comparison:
    # an honest split-K sum whose atomic adds land in another order differs by rounding, near-zero
    # elements included
    big = torch.randn(4096, dtype=torch.float64) * 1e5
    again = big + torch.randn_like(big) * 0.3
    big, again = big.float(), again.float()
    scales = [finite_scale(big)]
    assert dc.check_deterministic(big, again, atol=1e-2, rtol=1e-2, scales=scales) == []
    wrong = again.clone()
    wrong[7] += 5e3  # far beyond 1e-2 of the rms (1e5): garbage, not rounding
    found = dc.check_deterministic(big, wrong, atol=1e-2, rtol=1e-2, scales=scales)
    assert codes(found) == {"dynamic.nondeterministic"}
    z = torch.complex(torch.randn(64), torch.randn(64))
    assert dc.check_deterministic(z, z.clone(), atol=1e-2, rtol=1e-2, scales=[finite_scale(z)]) == []
    nan = torch.tensor([float("nan"), 1.0, 2.0])
    assert finite_scale(nan) > 0  # the finite elements' rms: NaN would pass anything or nothing
    assert dc.check_deterministic(nan, nan.clone(), atol=1e-2, rtol=1e-2, scales=[finite_scale(nan)]) == []


@pytest.mark.parametrize(
    ("name", "ident"),
    [
        ("relu_kernel(float const*, float*, long)", "relu_kernel"),
        ("void softmax_kernel<512>(float const*, float*, int)", "softmax_kernel"),
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int, ...)",
            "vectorized_elementwise_kernel",
        ),
        ("ns::inner::k2(int)", "k2"),
    ],
)
def test_kernel_identifier(name: str, ident: str) -> None:
    assert dc.kernel_identifier(name) == ident


def test_kernels_ran_decoy_and_torch_work() -> None:
    mine = dc.KernelRun("relu_kernel(float const*, float*, long)", 10.0)
    fill = dc.KernelRun(
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>()", 3.0
    )
    gemm = dc.KernelRun("sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32", 80.0)
    assert dc.check_kernels_ran([mine, fill], ["relu_kernel"]) == []
    decoy = dc.check_kernels_ran([gemm], ["relu_kernel"])
    assert codes(decoy) == {"dynamic.kernel_not_launched", "dynamic.torch_kernels_did_work"}
    mostly_torch = dc.check_kernels_ran([mine, gemm], ["relu_kernel"])
    assert codes(mostly_torch) == {"dynamic.torch_kernels_did_work"}
    small_extra = dc.check_kernels_ran(
        [dc.KernelRun("relu_kernel(x)", 90.0), dc.KernelRun("reduce_kernel<>", 5.0)], ["relu_kernel"]
    )
    assert codes(small_extra) == set() and small_extra[0].severity is Severity.WARNING


def test_side_stream_arithmetic() -> None:
    assert dc.check_side_stream(event_ms=5.0, synced_wall_ms=5.05) == []
    assert dc.check_side_stream(event_ms=0.01, synced_wall_ms=0.06) == []  # launch overhead only
    assert codes(dc.check_side_stream(event_ms=0.02, synced_wall_ms=7.0)) == {"dynamic.side_stream"}
    # A loaded host widens every call's gap: the reference's gap is subtracted (H200 run, 2026-12-02:
    # an honest kernel showed 0.009 ms on its stream and 0.665 ms until idle while nvcc filled the CPUs).
    assert dc.check_side_stream(event_ms=0.009, synced_wall_ms=0.665, baseline_gap_ms=0.6) == []
    assert codes(dc.check_side_stream(event_ms=0.02, synced_wall_ms=7.0, baseline_gap_ms=0.6)) == {
        "dynamic.side_stream"
    }


def test_thread_count_sees_a_new_thread() -> None:
    before = dc.count_threads()
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        assert codes(dc.check_thread_count(before, dc.count_threads())) == {"dynamic.thread_spawned"}
    finally:
        stop.set()
        t.join()
    deadline = time.monotonic() + 5.0  # the OS thread leaves /proc shortly after join() returns
    while dc.count_threads() > before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert dc.check_thread_count(before, dc.count_threads()) == []


def test_patched_timers_and_comparisons_are_detected(monkeypatch: pytest.MonkeyPatch) -> None:
    snap = dc.snapshot_guarded()
    assert dc.check_guarded_intact(snap) == []
    monkeypatch.setattr(torch, "allclose", lambda *a, **k: True)
    monkeypatch.setattr(time, "perf_counter", lambda: 0.0)
    diags = dc.check_guarded_intact(snap)
    assert codes(diags) == {"dynamic.timer_patched"}
    assert "torch.allclose" in diags[0].message and "time.perf_counter" in diags[0].message


# -- own kernels from the built library (check_own_kernels_did_work) -------------------------------------

# Names as torch's profiler reports them (libstdc++'s demangler on the CUPTI symbol).
RELU = "relu_kernel(float const*, float*, int)"
ATEN_RELU = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::launch_clamp_scalar"
    "(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::"
    "operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul> >"
    "(int, at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, "
    "c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}::"
    "operator()() const::{lambda(float)#1}, std::array<char*, 2ul>)"
)
ATEN_FILL = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
    "std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)"
)
ATEN_DIV = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, float, "
    "at::native::binary_internal::DivFunctor<float> >, std::array<char*, 2ul> >(int, "
    "at::native::AUnaryFunctor<float, float, float, at::native::binary_internal::DivFunctor<float> >, "
    "std::array<char*, 2ul>)"
)
CUB_REDUCE = (
    "void cub::CUB_300001_SM_900::detail::reduce::DeviceReduceKernel<cub::CUB_300001_SM_900::detail::reduce::"
    "policy_hub<float, unsigned int, cuda::std::__4::plus<void> >::Policy1000, float const*, unsigned int, "
    "cuda::std::__4::plus<void>, float, cuda::std::__4::__identity>(float const*, float*, unsigned int, "
    "cub::CUB_300001_SM_900::GridEvenShare<unsigned int>, cuda::std::__4::plus<void>, "
    "cuda::std::__4::__identity)"
)
CUB_SINGLE_TILE = (
    "void cub::CUB_300001_SM_900::detail::reduce::DeviceReduceSingleTileKernel<"
    "cub::CUB_300001_SM_900::detail::reduce::policy_hub<float, unsigned int, "
    "cuda::std::__4::plus<void> >::Policy1000, float*, float*, int, "
    "cuda::std::__4::plus<void>, float, float, cuda::std::__4::__identity>(float*, float*, int, "
    "cuda::std::__4::plus<void>, float, float, cuda::std::__4::__identity)"
)


def run(name: str, us: float) -> dc.KernelRun:
    return dc.KernelRun(name, us, stream=7)


def test_own_kernels_doing_all_the_work_pass_under_every_policy() -> None:
    own = frozenset({RELU, "_Z11relu_kernelPKfPfi"})
    for share in (0.0, 0.5):
        assert dc.check_own_kernels_did_work([run(RELU, 40.0), run(ATEN_FILL, 3.0)], own, share) == []


def test_an_own_kernel_named_like_atens_is_foreign_and_the_message_says_why() -> None:
    """Named `at::native::vectorized_elementwise_kernel`, the candidate's kernel is indistinguishable
    from ATen's in the profiler: it never counts as its own (fail closed), and a bare-name match on
    the source's `vectorized_elementwise_kernel` no longer makes ATen's kernel the candidate's."""
    own = frozenset({RELU, ATEN_RELU})
    diags = dc.check_own_kernels_did_work([run(RELU, 13.0), run(ATEN_RELU, 87.0)], own)
    assert codes(diags) == {"dynamic.torch_kernels_did_work"}
    msg = diags[0].message
    assert "ATen's `vectorized_elementwise_kernel` 87 %" in msg and "your kernels `relu_kernel` 13 %" in msg
    assert "compiled into your library but named like a kernel of ATen" in msg
    assert 'static_policy="lenient"' in msg
    # the source-name variant: a global `vectorized_elementwise_kernel` of the candidate's own
    src = dc.check_kernels_ran(
        [run(RELU, 13.0), run(ATEN_RELU, 87.0)], ["relu_kernel", "vectorized_elementwise_kernel"], 0.0
    )
    assert codes(src) == {"dynamic.torch_kernels_did_work"}
    # a global kernel of that name compiled by the candidate is its own: ATen's is in `at::native`
    mine = "vectorized_elementwise_kernel(float*)"
    assert dc.check_own_kernels_did_work([run(mine, 50.0)], frozenset({mine})) == []


def test_hinge_loss_glue_passes() -> None:
    """KernelBench's HingeLoss: own kernel, `torch::zeros({})` for the accumulator, `sum / n` on a
    0-d tensor; ATen's two launches are glue at any workload size, never "did the work"."""
    own = frozenset({"hinge_loss_kernel(float const*, float const*, float*, int)"})
    mine = run("hinge_loss_kernel(float const*, float const*, float*, int)", 412.0)
    glue = [run(ATEN_FILL, 1.3), run(ATEN_DIV, 1.5)]
    assert dc.check_own_kernels_did_work([mine, *glue], own) == []
    short = run("hinge_loss_kernel(float const*, float const*, float*, int)", 40.0)  # div: 3.5 %
    assert dc.check_own_kernels_did_work([short, *glue], own) == []
    # ATen computing a 1 MB ReLU (`x * (x > 0)`) takes as long as the division: not glue
    tiny = run("touch(float*)", 1.5)
    aten = [run(ATEN_RELU.replace("launch_clamp_scalar", "compare"), 1.9), run(ATEN_DIV, 1.9)]
    assert codes(dc.check_own_kernels_did_work([tiny, *aten], frozenset({"touch(float*)"}))) == {
        "dynamic.torch_kernels_did_work"
    }
    assert dc.check_kernels_ran([mine, *glue], ["hinge_loss_kernel"], 0.0) == []


def test_scalar_glue_at_zero_percent_passes_and_padding_does_not_hide_a_matmul() -> None:
    """A scalar op at a share that rounds to 0 % is glue; a cuBLAS matmul hidden behind a spin
    kernel of one's own (corpus `adv_rt_spin_padding`) is work at any share, and its share is
    reported as it is, never as "0 %"."""
    own = frozenset({RELU, "void pad_spin_kernel(float*, long long)"})
    assert dc.check_own_kernels_did_work([run(RELU, 3000.0), run(ATEN_DIV, 1.5)], own) == []
    assert dc.check_kernels_ran([run(RELU, 3000.0), run(ATEN_DIV, 1.5)], ["relu_kernel"], 0.0) == []
    spin = run("void pad_spin_kernel(float*, long long)", 100_000.0)
    matmul = run("sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32", 30.0)
    diags = dc.check_own_kernels_did_work([spin, matmul], own)
    assert codes(diags) == {"dynamic.torch_kernels_did_work"} and "0.03 %" in diags[0].message
    assert " 0 %" not in diags[0].message


def test_many_tiny_aten_kernels_are_work_not_glue() -> None:
    """Splitting ATen's work into launches under 2 µs each does not make it glue: together they
    exceed 5 % of forward's GPU time."""
    own = frozenset({RELU})
    runs = [run(RELU, 1000.0)] + [run(ATEN_RELU, 1.9)] * 100
    assert codes(dc.check_own_kernels_did_work(runs, own)) == {"dynamic.torch_kernels_did_work"}
    assert dc.negligible_foreign([run(ATEN_DIV, 1.5)] * 3, total_us=100.0)
    assert not dc.negligible_foreign([run(ATEN_DIV, 1.5)] * 3, total_us=10.0)
    assert not dc.negligible_foreign([run(ATEN_RELU, 0.0)], total_us=0.0)  # no durations: fail closed
    assert not dc.negligible_foreign([run(ATEN_RELU, 30.0)], total_us=100.0)


def test_cub_compiled_into_the_library_is_own() -> None:
    own = frozenset({"block_sum(float const*, float*, int)", CUB_REDUCE, CUB_SINGLE_TILE})
    runs = [run(CUB_REDUCE, 30.0), run(CUB_SINGLE_TILE, 4.0), run(ATEN_FILL, 1.0)]
    assert dc.check_own_kernels_did_work(runs, own) == []
    torchs_cub = CUB_REDUCE.replace("void cub::", "void at_cuda_detail::cub::")
    assert codes(dc.check_own_kernels_did_work([run(torchs_cub, 30.0)], own)) == {
        "dynamic.kernel_not_launched",
        "dynamic.torch_kernels_did_work",
    }


def test_a_file_without_kernels_is_checked_too() -> None:
    gemm = run("sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32", 80.0)
    diags = dc.check_own_kernels_did_work([gemm, run(ATEN_FILL, 2.0)], frozenset())
    assert codes(diags) == {"dynamic.kernel_not_launched", "dynamic.torch_kernels_did_work"}
    assert "your library compiles no kernel" in diags[0].message
    assert "cuBLAS's `sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32`" in diags[1].message
    assert codes(dc.check_own_kernels_did_work([], frozenset())) == {"dynamic.kernel_not_launched"}
    decoy = dc.check_own_kernels_did_work([run(ATEN_FILL, 2.0)], frozenset({RELU}))
    assert codes(decoy) == {"dynamic.kernel_not_launched"} and "`relu_kernel`" in decoy[0].message


def test_lenient_allows_foreign_compute_up_to_half() -> None:
    own = frozenset({RELU})
    some = dc.check_own_kernels_did_work([run(RELU, 60.0), run(ATEN_RELU, 40.0)], own, 0.5)
    assert codes(some) == set() and [d.code for d in some] == ["dynamic.torch_kernels_did_work"]
    assert some[0].severity is Severity.WARNING and "40 %" in some[0].message
    most = dc.check_own_kernels_did_work([run(RELU, 40.0), run(ATEN_RELU, 60.0)], own, 0.5)
    assert (
        codes(most) == {"dynamic.torch_kernels_did_work"}
        and "Under `lenient` they may take up to 50 %" in most[0].message
    )
    assert codes(dc.check_own_kernels_did_work([run(RELU, 60.0), run(ATEN_RELU, 40.0)], own, 0.0)) == {
        "dynamic.torch_kernels_did_work"
    }
    assert codes(dc.check_own_kernels_did_work([run(ATEN_RELU, 40.0)], own, 0.5)) == {
        "dynamic.kernel_not_launched",
        "dynamic.torch_kernels_did_work",
    }


@pytest.mark.parametrize(
    ("name", "library"),
    [
        (ATEN_RELU, "ATen"),
        ("void c10::cuda::something<1>(int)", "ATen"),
        (CUB_REDUCE.replace("void cub::", "void at_cuda_detail::cub::"), "ATen"),
        ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128> >(Flash_fwd_params)", "ATen"),
        ("sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32", "cuBLAS"),
        ("ampere_sgemm_128x64_nn", "cuBLAS"),
        ("nvjet_tst_128x64_64x4_1x2_h_bz_NNT", "cuBLAS"),
        (
            "void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false>(float)",
            "cuBLAS",
        ),
        ("void dot_kernel<float, 128, 0, cublasDotParams<cublasGemvTensor<float const> > >(int)", "cuBLAS"),
        ("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_16x4_nn_align4>(Params)", "CUTLASS"),
        ("void cudnn::engines_precompiled::nchwToNhwcKernel<float>(int)", "cuDNN"),
        ("(anonymous namespace)::at::native::k()", "ATen"),
        ("_ZN2at6native29vectorized_elementwise_kernelEPf", "ATen"),  # left mangled by the profiler
    ],
)
def test_reserved_kernel_names(name: str, library: str) -> None:
    found = dc.reserved_kernel_name(name)
    assert found is not None and found[0] == library


@pytest.mark.parametrize(
    "name",
    [
        RELU,
        CUB_REDUCE,
        "void gemm_kernel<64>(float const*, float const*, float*, int)",
        "sgemm_tiled(float*)",
        "mine::attention::at_rows(float*)",
        "(anonymous namespace)::anon_k(float*)",
        "c_kernel",
        "_ZN3cub17CUB_300001_SM_9006detail11EmptyKernelIvEEvv",
    ],
)
def test_honest_names_are_not_reserved(name: str) -> None:
    assert dc.reserved_kernel_name(name) is None


def test_profiler_session_records_without_importing_inductor() -> None:
    """torch.profiler.profile's first session imports torch._inductor (its prepare_trace asks
    hasattr(torch, "_inductor")), seconds of a runner's start; the session cudice opens records
    the same Kineto events without it. A fresh interpreter, so nothing imported it before."""
    import subprocess
    import sys

    code = (
        "import sys, torch\n"
        "from cudice.verifier.run.dynamic_checks import profiler_session\n"
        "x = torch.ones(8)\n"
        "with profiler_session() as prof:\n"
        "    x.add_(1.0)\n"
        "names = [e.name for e in prof.function_events]\n"
        "assert 'aten::add_' in names, names\n"
        "print('INDUCTOR', 'torch._inductor' in sys.modules, 'DYNAMO', 'torch._dynamo' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "INDUCTOR False DYNAMO False" in done.stdout, done.stdout


# -- GPU ---------------------------------------------------------------------------------------------


@pytest.mark.gpu
def test_profiler_sees_torch_kernels_and_not_a_decoy() -> None:
    x = torch.randn(1 << 20, device="cuda")
    torch.relu(x)  # warm up
    runs = dc.profile_kernels(lambda t: torch.relu(t) * 2, [x])
    assert runs and all(r.device_time_us >= 0 for r in runs)
    diags = dc.check_kernels_ran(runs, ["my_relu_kernel"])
    assert codes(diags) == {"dynamic.kernel_not_launched", "dynamic.torch_kernels_did_work"}


@pytest.mark.gpu
def test_side_stream_work_is_measured() -> None:
    a = torch.randn(4096, 4096, device="cuda")
    side = torch.cuda.Stream()

    def honest(t: torch.Tensor) -> torch.Tensor:
        return t @ t

    def hidden(t: torch.Tensor) -> torch.Tensor:
        with torch.cuda.stream(side):
            for _ in range(20):
                out = t @ t
        return out

    honest(a), hidden(a)
    torch.cuda.synchronize()
    assert dc.check_side_stream(*dc.measure_stream_escape(honest, [a])) == []
    assert codes(dc.check_side_stream(*dc.measure_stream_escape(hidden, [a]))) == {"dynamic.side_stream"}


# -- the checks in the order the worker calls them, on CPU stand-ins for cheating candidates --------


def _worker_sequence(candidate, reference=torch.relu, num_trials: int = 3) -> set[str]:
    """Mirror of worker.py's hooks: per-trial checks with the reference output alive, then the
    across-trial, repeated-call, thread and patched-function checks."""
    guarded = dc.snapshot_guarded()
    threads_before = dc.count_threads()
    found: list = []
    cand_trials: list = []
    ref_trials: list = []
    inputs: list = []
    for seed in range(num_trials):
        torch.manual_seed(seed)
        inputs = [torch.randn(64, 64)]
        ref_out = reference(*[x.clone() for x in inputs])
        before = dc.snapshot_inputs(inputs)
        out = candidate(*inputs)
        found += dc.check_inputs_unchanged(before, inputs)
        found += dc.check_outputs_plain(out, ref_out)
        found += dc.check_no_aliasing(out, inputs, ref_out)
        cand_trials.append(out.clone() if type(out) is torch.Tensor and out.layout is torch.strided else out)
        ref_trials.append(ref_out)
    again = candidate(*inputs)
    found += dc.check_not_constant(cand_trials, ref_trials)
    found += dc.check_deterministic(cand_trials[-1], again, 1e-2, 1e-2)
    found += dc.check_thread_count(threads_before, dc.count_threads())
    found += dc.check_guarded_intact(guarded)
    return codes(found)


def test_worker_sequence_honest_candidate_is_clean() -> None:
    assert _worker_sequence(lambda x: torch.clamp(x, min=0)) == set()


def test_worker_sequence_reports_each_cheat() -> None:
    def mutate(x):
        out = torch.relu(x)
        x.zero_()
        return out

    cache: list = []

    def cached(x):
        if not cache:
            cache.append(torch.relu(x))
        return cache[0].clone()

    class Lazy(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            raise RuntimeError("a hostile subclass must never be touched by the checks")

    assert "dynamic.input_mutated" in _worker_sequence(mutate)
    assert "dynamic.output_aliases_input" in _worker_sequence(lambda x: x.relu_())
    assert "dynamic.zero_output" in _worker_sequence(lambda x: torch.zeros_like(x))
    assert _worker_sequence(cached) == {"dynamic.constant_output"}
    assert _worker_sequence(lambda x: torch.relu(x).half()) == {"dynamic.output_dtype_mismatch"}
    assert _worker_sequence(lambda x: torch.relu(x).to_sparse()) == {"dynamic.output_not_plain_tensor"}
    assert _worker_sequence(lambda x: torch.relu(x).as_subclass(Lazy)) == {"dynamic.output_not_plain_tensor"}
    assert "dynamic.nondeterministic" in _worker_sequence(lambda x: torch.relu(x) + torch.rand_like(x))


def test_worker_sequence_sees_a_patched_timer(monkeypatch: pytest.MonkeyPatch) -> None:
    def patcher(x):
        monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
        return torch.relu(x)

    assert _worker_sequence(patcher) == {"dynamic.timer_patched"}


def test_defined_kernel_names_skip_comments_and_launch_bounds() -> None:
    from cudice.verifier.static.cuda import defined_kernel_names

    src = (
        "// __global__ void fake(int) {}\n__global__ void relu_kernel(float* x) {}\ntemplate <int N>\n"
        "__global__ void __launch_bounds__(256) tiled(float* y) {}\n"
    )
    assert defined_kernel_names([src, src]) == ["relu_kernel", "tiled"]


# -- GPU: the dynamic corpus is caught, the honest kernels pass (the real pool and worker) ---------------


@pytest.mark.gpu
@pytest.mark.slow
def test_dynamic_corpus_is_caught_and_honest_kernels_are_correct() -> None:
    from corpus.manifest import gpu_corpus_results, load_corpus

    results = gpu_corpus_results()  # one pool for the dynamic, honest and hostile corpus (test_hostile.py)
    dynamic, honest = load_corpus("dynamic"), load_corpus("honest")
    missed, false_alarms = [], []
    for c in dynamic:
        r = results[c.name]
        found = {d.code for d in r.diagnostics}
        if r.verdict.value == "correct" or not set(c.codes) <= found:
            missed.append((c.name, r.verdict.value, sorted(found), (r.error or "")[-300:]))
    for c in honest:
        r = results[c.name]
        if r.verdict.value != "correct":
            false_alarms.append(
                (
                    c.name,
                    r.verdict.value,
                    [(d.code, d.message) for d in r.diagnostics],
                    (r.error or "")[-500:],
                )
            )
    print(
        f"dynamic detection {len(dynamic) - len(missed)}/{len(dynamic)}, "
        f"honest false positives {len(false_alarms)}/{len(honest)}"
    )
    assert not missed, missed
    assert not false_alarms, false_alarms


def test_side_streams_from_gpu_side_records() -> None:
    """Per-stream kernel records are the evidence: other streams flag, host load cannot."""
    mine = dc.KernelRun("void relu_kernel(float const*)", 50.0, stream=7)
    hidden = dc.KernelRun("void relu_kernel(float const*)", 50.0, stream=13)
    assert dc.check_streams([mine, mine], current_stream=7) == []
    assert codes(dc.check_streams([mine, hidden], current_stream=7)) == {"dynamic.side_stream"}
    assert (
        dc.check_streams([mine, dc.KernelRun("k", 1.0)], current_stream=7) == []
    )  # unknown stream: no evidence
    assert dc.check_streams([hidden], current_stream=-1) == []  # no marker: no verdict either way


def test_any_torch_compute_is_an_error_under_the_default_policy() -> None:
    """A spin kernel of one's own padding the GPU time keeps ATen under 50 %: only `lenient` allows that."""
    gemm = dc.KernelRun("ampere_sgemm_128x64_nn", 10.0)
    spin = dc.KernelRun("void pad_spin_kernel(float*, long long)", 90.0)
    fill = dc.KernelRun(
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>", 5.0
    )
    assert codes(dc.check_kernels_ran([spin, gemm], ["pad_spin_kernel"], 0.0)) == {
        "dynamic.torch_kernels_did_work"
    }
    lenient = dc.check_kernels_ran([spin, gemm], ["pad_spin_kernel"], 0.5)
    assert codes(lenient) == set() and {d.code for d in lenient} == {
        "dynamic.torch_kernels_did_work"
    }  # a warning
    assert dc.check_kernels_ran([spin, fill], ["pad_spin_kernel"], 0.0) == []  # fills are glue


def test_determinism_leaves_discrete_outputs_to_the_reference_comparison() -> None:
    """Indices or masks that differ between two calls are judged against the reference, up to its
    ties (run/judge_correctness.py): a tolerance would pass an index 39 apart near 4,000, and an
    honest unstable sort orders equal keys otherwise on each call."""
    idx = torch.arange(4096)
    assert dc.check_deterministic(idx, idx.flip(0), atol=1e-2, rtol=1e-2) == []
    a = torch.randn(32)
    b = a.clone()
    b[3] += 1.0
    found = dc.check_deterministic((idx, a), (idx.flip(0), b), atol=1e-2, rtol=1e-2)
    assert codes(found) == {"dynamic.nondeterministic"}  # the floating output is still compared


def test_a_reference_that_differs_across_trials_only_by_rounding_is_not_varying() -> None:
    """A softmax's row sums are 1 +- 1 ulp for every input: a kernel that gives exactly 1.0 on every
    trial is not a constant output; one that ignores inputs whose outputs really differ is."""
    import torch
    from cudice.verifier.run.dynamic_checks import check_not_constant

    ones = torch.ones(64)
    refs = [ones + torch.randn(64, generator=torch.Generator().manual_seed(k)) * 1e-7 for k in range(3)]
    assert not [d.code for d in check_not_constant([ones, ones, ones], refs)]
    varying = [torch.randn(64, generator=torch.Generator().manual_seed(k)) for k in range(3)]
    fixed = varying[0].clone()
    assert "dynamic.constant_output" in [d.code for d in check_not_constant([fixed, fixed, fixed], varying)]
