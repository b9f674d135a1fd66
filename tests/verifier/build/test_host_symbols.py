"""The symbol check (build/host_symbols.py): what a compiled candidate's host objects call, read with
`nm`, whatever the source's spelling.

One build of a module that hides ATen ops behind three spellings the source rules miss (an ATen
function as a template argument, an operator called by name, an unqualified call found by
argument-dependent lookup) must come back a `static_violation` naming each op's symbol; the honest
example gets nothing; unreadable symbols (no `nm`, not an object) give nothing. The rules
themselves are checked on symbol lists, without a compiler.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cudice.verifier.build import host_symbols
from cudice.verifier.build.compile import build_module
from cudice.verifier.build.generated import from_call, from_values
from cudice.verifier.build.host_symbols import classify, op_base, read_symbols, symbol_findings
from cudice.verifier.source.document import read_document
from cudice.verifier.source.result import Location, Severity
from cudice.verifier.static.policy import Strictness
from verifier_marks import needs_nvcc

REPO = Path(__file__).resolve().parents[3]
OPS = frozenset(
    {"relu", "add", "mul", "fmax", "select", "select_scatter", "to", "empty", "view", "copy", "zeros"}
)

# three spellings of an ATen call the source rules do not see; each links to `at::_ops::<op>::call`
HIDDEN_OPS_CU = r"""
#include <torch/extension.h>
__global__ void touch_kernel(float* c) { if (threadIdx.x == 1000) c[0] = 0.f; }
template <at::Tensor (*F)(const at::Tensor&)>
at::Tensor apply_op(const at::Tensor& t) { return F(t); }
torch::Tensor hidden(torch::Tensor x) {
    auto out = torch::empty_like(x);
    touch_kernel<<<1, 32>>>(out.data_ptr<float>());
    auto r = apply_op<&at::relu>(x);
    auto m = at::operator*(r, x);
    return fmax(m, out);
}
"""


def test_ops_are_named_by_their_longest_op_prefix() -> None:
    assert op_base("relu", OPS) == "relu"
    assert op_base("relu_", OPS) == "relu"
    assert op_base("add__Tensor", OPS) == "add"
    assert op_base("mul_Tensor", OPS) == "mul"
    assert op_base("to_dtype", OPS) == "to"
    assert op_base("select_int", OPS) == "select"
    assert op_base("select_scatter", OPS) == "select_scatter"


def test_compute_ops_threads_and_modules_are_found_and_glue_is_not() -> None:
    undefined = {
        "at::_ops::relu::call(at::Tensor const&)",
        "at::_ops::select_scatter::call(at::Tensor const&, at::Tensor const&, long, c10::SymInt)",
        "at::_ops::empty_memory_format::call(c10::ArrayRef<c10::SymInt>)",
        "at::_ops::view::call(at::Tensor const&, c10::ArrayRef<c10::SymInt>)",
        "at::_ops::to_dtype::call(at::Tensor const&, c10::ScalarType, bool, bool)",
        "at::_ops::copy_::call(at::Tensor&, at::Tensor const&, bool)",
        "at::_ops::zeros::call(c10::ArrayRef<c10::SymInt>)",
        "torch::nn::ReLUImpl::forward(at::Tensor)",
        "std::thread::_M_start_thread(std::unique_ptr<std::thread::_State>, void (*)())",
        "thrd_create",
        "clone",
        "c10::ThreadPool::ThreadPool(int, int, std::function<void ()>)",
        "PyRun_SimpleStringFlags",
        "PyObject_GetAttrString",  # the binding's own
        "pthread_mutex_lock",
        "c10::detail::torchCheckFail(char const*, char const*, unsigned int, char const*)",
    }
    found = {sym.split("(")[0]: code for code, sym, _ in classify(undefined, set(), Strictness.DEFAULT, OPS)}
    assert found == {
        "at::_ops::relu::call": "static.cpp_torch_op",
        "at::_ops::select_scatter::call": "static.cpp_torch_op",
        "torch::nn::ReLUImpl::forward": "static.cpp_torch_op",
        "std::thread::_M_start_thread": "static.cpp_std_thread",
        "thrd_create": "static.cpp_std_thread",
        "clone": "static.cpp_std_thread",
        "c10::ThreadPool::ThreadPool": "static.cpp_std_thread",
        "PyRun_SimpleStringFlags": "static.cpp_torch_op",
    }
    strict = {sym.split("(")[0] for _, sym, _ in classify(undefined, set(), Strictness.STRICT, OPS)}
    assert {"at::_ops::copy_::call", "at::_ops::zeros::call"} <= strict  # filling is glue only above strict
    assert "at::_ops::view::call" not in strict


def test_unreadable_symbols_give_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    not_an_object = tmp_path / "x.o"
    not_an_object.write_text("not an ELF object")
    where = Location("/virtual/x.py", 1, 1)
    assert read_symbols(not_an_object) is None
    assert symbol_findings([not_an_object], Strictness.DEFAULT, where, OPS) == ()
    assert symbol_findings([tmp_path / "missing.o"], Strictness.DEFAULT, where, OPS) == ()
    monkeypatch.setattr(host_symbols, "find_nm", lambda: None)
    assert read_symbols(not_an_object) is None


@needs_nvcc
@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_hidden_aten_spellings_are_found_through_their_symbols(
    session_config, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = from_values(
        "hidden_ops_ext", "torch::Tensor hidden(torch::Tensor x);", HIDDEN_OPS_CU, ["hidden"]
    )
    res = build_module(module, "/virtual/hidden.py", session_config, link=False, symbols=True)
    assert res.ok and res.violation, res.output[-2000:]
    messages = [d.message for d in res.diagnostics if d.code == "static.cpp_torch_op"]
    assert all(d.severity is Severity.ERROR for d in res.diagnostics if d.code == "static.cpp_torch_op")
    for op in ("at::_ops::relu::call", "at::_ops::mul_Tensor::call", "at::_ops::fmax::call"):
        assert any(op in m for m in messages), (op, messages)
    # the same build with its symbols unreadable: nothing found, no rejection (the objects are cached)
    monkeypatch.setattr(host_symbols, "find_nm", lambda: None)
    res = build_module(module, "/virtual/hidden.py", session_config, link=False, symbols=True)
    assert res.ok and not res.violation
    assert not [d for d in res.diagnostics if d.code == "static.cpp_torch_op"]


@needs_nvcc
@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_an_honest_kernel_gets_no_symbol_finding(session_config) -> None:
    doc = read_document(REPO / "examples" / "relu_cuda.py")
    module = from_call(doc, doc.load_inline_calls[0])
    assert module is not None
    res = build_module(module, doc.path, session_config, link=False, symbols=True)
    assert res.ok and not res.violation, res.output[-2000:]
    assert not [d for d in res.diagnostics if d.code.startswith("static.")]
    assert "symbols" in res.step_wall_s and res.step_wall_s["symbols"] < 5.0


def test_vendor_library_entry_points_are_found_however_they_are_reached() -> None:
    undefined = {
        "cusolverDnSgetrf",
        "nppiAdd_32f_C1R_Ctx",
        "cublasLtMatmul",
        "cutensorContract",
        "cudaMalloc",  # the runtime: allocation and launches are the candidate's own business
        "cudaLaunchKernel",
        "cub::DeviceReduce::Sum",  # not a C entry point: CUB's templates compile into the candidate
    }
    found = classify(undefined, set(), Strictness.DEFAULT, OPS)
    assert {sym for _, sym, _ in found} == {
        "cusolverDnSgetrf",
        "nppiAdd_32f_C1R_Ctx",
        "cublasLtMatmul",
        "cutensorContract",
    }
    assert {code for code, _, _ in found} == {"static.cpp_torch_op"}
    assert all("vendor library" in what for _, _, what in found)
