"""The binding without pybind11 (verifier/build/cabi.py): which modules take it, and that it
binds as pybind11 does.

Pure tests: the declarations `signatures()` accepts and refuses, and the rule that decides
whether a failed shim build stands or goes to the pybind11 build. Compiler tests: the shim
and a C++ source compiled with g++ into an extension (host code only, so it loads on this
CPU-only torch) give the values, identities, in-place effects, exception types and messages,
argument checks and reference counts the pybind11 binding gives; `slow` ones build real
candidates with nvcc and check that a shim that cannot compile falls back to pybind11.
"""

from __future__ import annotations

import gc
import importlib.machinery
import importlib.util
import shlex
import shutil
import subprocess
import sys
import types
import weakref
from pathlib import Path

import pytest
from cudice.verifier.build.cabi import shim, signatures
from cudice.verifier.build.compile import (
    BuildResult,
    _fails_in_user_lines,
    build_module,
    cabi_module,
    host_only_ldflags,
)
from cudice.verifier.build.generated import from_call, from_values
from cudice.verifier.build.headers import ensure_overlay
from cudice.verifier.config import VerifyConfig
from cudice.verifier.source.document import parse_document
from cudice.verifier.source.result import Severity
from verifier_marks import needs_nvcc

torch = pytest.importorskip("torch")

DECLS = """
#include <torch/extension.h>
// the functions
torch::Tensor add_scaled(torch::Tensor a, const torch::Tensor& b, double alpha);
std::vector<torch::Tensor> split2(torch::Tensor x);
std::tuple<torch::Tensor, torch::Tensor> pair(const at::Tensor &x);
void fill(torch::Tensor& x, int64_t v);
int64_t count(std::vector<torch::Tensor> xs, bool twice);
torch::Tensor maybe(c10::optional<torch::Tensor> x, int n);
torch::Tensor check(torch::Tensor x, int kind);
double mean(torch::Tensor x);
torch::Tensor same(torch::Tensor x);
bool is_big(torch::Tensor x, float limit);
"""
FUNCTIONS = ["add_scaled", "split2", "pair", "fill", "count", "maybe", "check", "mean", "same", "is_big"]
SOURCE = """
#include <torch/extension.h>
#include <stdexcept>
torch::Tensor add_scaled(torch::Tensor a, const torch::Tensor& b, double alpha) { return a.add(b, alpha); }
std::vector<torch::Tensor> split2(torch::Tensor x) { return {x.mul(2), x.add(1)}; }
std::tuple<torch::Tensor, torch::Tensor> pair(const at::Tensor &x) { return {x, x.neg()}; }
void fill(torch::Tensor& x, int64_t v) { x.fill_(v); }
int64_t count(std::vector<torch::Tensor> xs, bool twice) { return (int64_t)xs.size() * (twice ? 2 : 1); }
torch::Tensor maybe(c10::optional<torch::Tensor> x, int n) { return x.has_value() ? *x : torch::zeros({n}); }
torch::Tensor check(torch::Tensor x, int kind) {
  if (kind == 1) TORCH_CHECK_INDEX(false, "index ", 7, " out of range");
  if (kind == 2) throw std::out_of_range("std range");
  if (kind == 3) TORCH_CHECK_VALUE(false, "bad value");
  if (kind == 4) throw 42;
  TORCH_CHECK(x.dim() == 2, "need a 2-D tensor, got ", x.dim());
  return x;
}
double mean(torch::Tensor x) { return x.mean().item<double>(); }
torch::Tensor same(torch::Tensor x) { return x; }
bool is_big(torch::Tensor x, float limit) { return x.abs().max().item<float>() > limit; }
"""


def test_signatures_accept_declarations_in_known_types() -> None:
    sigs = signatures([DECLS], FUNCTIONS, [SOURCE])
    assert sigs is not None
    by = {s.name: s for s in sigs}
    assert [s.name for s in sigs] == FUNCTIONS  # in the order of `functions`
    assert by["add_scaled"].params == ("tensor", "tensor", "double") and by["add_scaled"].result == "tensor"
    assert by["fill"].params == ("tensor_ref", "int64") and by["fill"].result == "void"
    assert by["pair"].result == "tensor_tuple:2" and by["split2"].result == "tensor_list"
    assert by["maybe"].params == ("opt_tensor", "int32") and by["count"].params == ("tensor_list", "bool")
    assert by["add_scaled"].cpp_params == ("torch::Tensor", "const torch::Tensor&", "double")


@pytest.mark.parametrize(
    ("cpp", "functions", "cuda"),
    [
        ("torch::Tensor f(torch::Tensor x) { return x; }", ["f"], ""),  # a definition
        (
            "torch::Tensor f(torch::Tensor x);\ntorch::Tensor f(torch::Tensor x, double a);",
            ["f"],
            "",
        ),  # overloaded
        ("torch::Tensor f(torch::Tensor x);", ["g"], ""),  # the bound name is not declared
        ("torch::Tensor f(torch::Tensor x);\ntorch::Tensor g(torch::Tensor x);", ["f"], ""),  # an unbound one
        ("torch::Tensor f(at::Scalar s);", ["f"], ""),  # a type the binding does not convert
        ("torch::Tensor f(std::vector<int64_t> shape);", ["f"], ""),
        ("torch::Tensor& f(torch::Tensor& x);", ["f"], ""),  # a reference result
        ("torch::Tensor f(double& x);", ["f"], ""),  # a non-const scalar reference
        ("#define N 4\ntorch::Tensor f(torch::Tensor x);", ["f"], ""),  # a macro
        ("namespace k { torch::Tensor f(torch::Tensor x); }", ["f"], ""),
        ("torch::Tensor f(torch::Tensor x);", None, ""),  # the candidate writes its own PYBIND11_MODULE
        ("torch::Tensor f(torch::Tensor x);", ["f"], "static torch::Tensor f(torch::Tensor x) { return x; }"),
        ("torch::Tensor f(torch::Tensor x);", ["f"], "inline torch::Tensor f(torch::Tensor x) { return x; }"),
        ("torch::Tensor f(torch::Tensor x);", ["f"], 'extern "C" int g();'),
        ("torch::Tensor f(torch::Tensor x);", ["f"], "namespace { int k; }"),
    ],
)
def test_signatures_refuse_what_only_the_pybind11_build_decides(
    cpp: str, functions: list[str] | None, cuda: str
) -> None:
    assert signatures([cpp], functions, [cuda]) is None


def test_generated_modules_carry_the_binding_only_with_cuda_sources() -> None:
    decl = "torch::Tensor f(torch::Tensor x);"
    assert from_values("m", decl, "torch::Tensor f(torch::Tensor x) { return x; }", ["f"]).binding is not None
    assert (
        from_values("m", [decl, "torch::Tensor f(torch::Tensor x) { return x; }"], None, ["f"]).binding
        is None
    )


def _result(output: str) -> BuildResult:
    return BuildResult(False, Path("/nowhere"), None, (), output, 0.0, False)


def test_a_failed_shim_build_stands_only_when_every_error_is_in_the_users_lines() -> None:
    module = cabi_module(
        from_values(
            "m",
            "torch::Tensor f(torch::Tensor x);",
            "torch::Tensor f(torch::Tensor x) {\n  return x\n}",
            ["f"],
        )
    )
    cu = module.file("cuda.cu")
    assert cu is not None
    user = cu.pieces[0].first_line + 1  # "  return x": the user's line
    shim_line = cu.text.count("\n")  # the shim's last line
    assert _fails_in_user_lines(module, _result(f'/b/cuda.cu({user}): error: expected a ";"\n'))
    assert not _fails_in_user_lines(module, _result(f"/b/cuda.cu({shim_line}): error: no instance\n"))
    assert not _fails_in_user_lines(
        module,
        _result(f'/b/cuda.cu({user}): error: expected a ";"\n/b/cuda.cu({shim_line}): error: no instance\n'),
    )
    assert not _fails_in_user_lines(module, _result("nvcc fatal: something went wrong\n"))  # no position


def _compile_extension(
    tmp_path: Path, name: str, source: str, decls: str, functions: list[str]
) -> types.ModuleType:
    """g++ the host `source` + shim into an extension named `name` (lean headers, as the fast build uses)."""
    from cudice.verifier.build.toolchain import probe_toolchain

    sigs = signatures([decls], functions, [source])
    assert sigs is not None
    config = VerifyConfig(cache_dir=tmp_path / "cache")
    tc = probe_toolchain(config.cache_dir, config.arch_list_env)
    overlay = ensure_overlay(config.cache_dir, tc.cflags)
    src, lib = tmp_path / f"{name}.cpp", tmp_path / f"{name}.so"
    src.write_text(source + "\n" + shim(sigs))
    flags = tc.cflags.replace("-DTORCH_EXTENSION_NAME=", "-DCUDICE_UNUSED_NAME=")
    cmd = [
        *shlex.split(tc.cxx),
        f"-I{overlay.device}",
        *shlex.split(flags),
        f"-DTORCH_EXTENSION_NAME={name}",
        "-idirafter",
        str(overlay.standins),
        "-shared",
        "-fPIC",
        str(src),
        "-o",
        str(lib),
        *shlex.split(host_only_ldflags(tc.ldflags)),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    loader = importlib.machinery.ExtensionFileLoader(name, str(lib))
    spec = importlib.util.spec_from_file_location(name, str(lib), loader=loader)
    assert spec is not None
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


needs_gxx = pytest.mark.skipif(
    shutil.which("c++") is None and shutil.which("g++") is None, reason="needs g++"
)


@pytest.fixture(scope="module")
def ext(tmp_path_factory: pytest.TempPathFactory) -> types.ModuleType:
    return _compile_extension(tmp_path_factory.mktemp("cabi"), "cabi_probe", SOURCE, DECLS, FUNCTIONS)


@needs_gxx
@pytest.mark.timeout(1500)
def test_results_identities_and_in_place_effects_are_pybind11s(ext: types.ModuleType) -> None:
    x = torch.arange(6.0).reshape(2, 3)
    assert torch.equal(ext.add_scaled(x, x, 2), x * 3)
    assert torch.equal(ext.add_scaled(x, x, 2), ext.add_scaled(x, x, 2.0))  # an int for a double
    halves = ext.split2(x)
    assert isinstance(halves, list) and torch.equal(halves[0], x * 2) and torch.equal(halves[1], x + 1)
    first, second = ext.pair(x)
    assert first is x and torch.equal(second, -x)  # a returned input is the same Python object
    assert ext.same(x) is x
    assert ext.count([x, x, x], True) == 6 and ext.count((x,), False) == 1
    assert torch.equal(ext.maybe(None, 3), torch.zeros(3)) and ext.maybe(x, 1) is x
    assert ext.mean(x) == pytest.approx(2.5) and isinstance(ext.mean(x), float)
    assert ext.is_big(x, 4.5) is True and ext.is_big(x, 5) is False
    y = torch.zeros(4)
    assert ext.fill(y, 7) is None and torch.equal(y, torch.full((4,), 7.0))  # in place, as with pybind11
    assert "add_scaled(" in (ext.add_scaled.__doc__ or "")


@needs_gxx
@pytest.mark.timeout(1500)
def test_exceptions_are_translated_as_torch_translates_them(ext: types.ModuleType) -> None:
    t = torch.ones(3)
    with pytest.raises(IndexError, match="index 7 out of range"):
        ext.check(t, 1)
    with pytest.raises(IndexError, match="std range"):
        ext.check(t, 2)
    with pytest.raises(ValueError, match="bad value"):
        ext.check(t, 3)
    with pytest.raises(RuntimeError, match="unknown exception"):
        ext.check(t, 4)
    with pytest.raises(RuntimeError, match="need a 2-D tensor, got 1") as info:
        ext.check(t, 0)
    assert "Exception raised from" not in str(info.value)  # no C++ backtrace, as torch shows it by default


@needs_gxx
@pytest.mark.timeout(1500)
@pytest.mark.parametrize(
    ("fn", "args"),
    [
        ("fill", (torch.zeros(2), 1.5)),  # a float for an int64_t
        ("add_scaled", (torch.ones(1), torch.ones(1), "2")),  # a string for a double
        ("same", (None,)),  # None for a tensor
        ("same", ([1.0],)),  # a list for a tensor
        ("same", ()),  # too few
        ("same", (torch.ones(1), torch.ones(1))),  # too many
        ("count", ("ab", True)),  # a string for a tensor list
        ("count", ([torch.ones(1), 3], True)),  # a list holding a non-tensor
        ("count", ([torch.ones(1)], "yes")),  # a string has no __bool__: pybind11 refuses it
        ("maybe", (None, 2**31)),  # out of `int`'s range
    ],
)
def test_arguments_no_pybind11_caster_takes_are_a_type_error(
    ext: types.ModuleType, fn: str, args: tuple[object, ...]
) -> None:
    with pytest.raises(TypeError, match=rf"{fn}\(\): incompatible function arguments"):
        getattr(ext, fn)(*args)


@needs_gxx
@pytest.mark.timeout(1500)
def test_conversions_pybind11_makes_are_made(ext: types.ModuleType) -> None:
    class Index:
        def __index__(self) -> int:
            return 2

    y = torch.zeros(2)
    ext.fill(y, Index())
    assert torch.equal(y, torch.full((2,), 2.0))
    ext.fill(y, True)  # a bool is an int
    assert torch.equal(y, torch.ones(2))
    assert ext.count([y], None) == 1 and ext.count([y], 2) == 2  # None is false; numbers have __bool__
    with pytest.raises(TypeError, match="keyword"):
        ext.same(x=y)


@needs_gxx
@pytest.mark.timeout(1500)
def test_no_reference_is_leaked_or_lost(ext: types.ModuleType) -> None:
    x = torch.ones(8)
    before = sys.getrefcount(x)
    for _ in range(2000):
        ext.same(x)
        ext.pair(x)
        ext.count([x, x], True)
        ext.maybe(x, 1)
    assert sys.getrefcount(x) == before
    out = ext.add_scaled(x, x, 1.0)
    gone = weakref.ref(out)
    del out
    gc.collect()
    assert gone() is None  # the result's only owner was the caller
    kept = ext.split2(x)
    assert torch.equal(kept[0], x * 2)  # list items outlive the call


GUARD_CLASH = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = """
#include <torch/extension.h>
namespace cudice_cabi { int wrap = 1; }  // the shim's own namespace: its build fails, pybind11's does not
__global__ void twice_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}
torch::Tensor twice(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int n = x.numel();
    twice_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""
ext = load_inline(name="clash_ext", cpp_sources="torch::Tensor twice(torch::Tensor x);",
                  cuda_sources=src, functions=["twice"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.twice(x)
'''


@needs_nvcc
@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_a_shim_that_cannot_compile_costs_time_never_the_verdict(session_config: VerifyConfig) -> None:
    doc = parse_document(GUARD_CLASH, "/virtual/clash.py")
    module = from_call(doc, doc.load_inline_calls[0])
    assert module is not None and module.binding is not None
    auto = build_module(module, doc.path, session_config, link=False)
    assert auto.ok and auto.build_path == "fast", auto.output[-2000:]  # the pybind11 build, slim headers
    assert not any(d.severity is Severity.ERROR for d in auto.diagnostics)
    off = build_module(module, doc.path, session_config.with_(cabi_binding=False), link=False)
    assert off.ok and off.build_path == "fast"
