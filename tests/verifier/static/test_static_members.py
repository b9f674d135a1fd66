"""Member functions defined in class bodies, and ATen helpers that are no ops (red team 5).

`static/cpp_scan.py` lists in-class member functions (`C::m`, host or device by their own
qualifiers); `static/cuda.py` counts a launch in one when the member is reachable from a bound
function (`obj.m(...)`, a functor `C{}(...)`, `&C::m` in a pybind `.def`); `static/bindings.py`
treats `ext.C()` of a `py::class_` the extension binds as the extension; `static/cpp_names.py`
allows `at::ceil_div` and the `ATen/TensorUtils.h` checks. The cheats next to each stay caught.
"""

from __future__ import annotations

import pytest
from cudice.verifier.config import VerifyConfig
from cudice.verifier.source.result import Diagnostic, Severity
from cudice.verifier.static.checks import check_source
from cudice.verifier.static.cpp_scan import blank_comments_and_strings, find_functions

_KERNEL = """
__global__ void relu_kernel(const float* x, float* y, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i], 0.f);
}
"""


def _candidate(cuda: str, *, functions: bool = True, init: str = "pass", forward: str = "") -> str:
    load = (
        'cpp_sources="torch::Tensor relu_cuda(torch::Tensor x);", functions=["relu_cuda"]'
        if functions
        else 'cpp_sources=""'
    )
    forward = forward or "return ext.relu_cuda(x.contiguous())"
    return f'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
{_KERNEL}
{cuda}
"""
ext = load_inline(name="m", cuda_sources=src, {load})


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        {init}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        {forward}
'''


def _errors(text: str, policy: str = "default") -> list[tuple[str, str]]:
    diags: list[Diagnostic] = check_source(text, "cand.py", VerifyConfig(static_policy=policy))
    return [(d.code, d.message) for d in diags if d.severity is Severity.ERROR]


def _codes(text: str, policy: str = "default") -> set[str]:
    return {code for code, _ in _errors(text, policy)}


_LAUNCH = "relu_kernel<<<(n + 255) / 256, 256, 0, at::cuda::getCurrentCUDAStream()>>>(x, y, n);"


def test_member_functions_are_listed_with_their_class_and_qualifiers() -> None:
    code = blank_comments_and_strings("""
template <typename T>
struct __align__(16) Box final : public Base<T> {
  public:
    Box(int t) : t_(t) {}
    __device__ static float relu(float v) { return v; }
    __host__ __device__ float both(float v) const { return v; }
    float operator()(float v) const { return v; }
    struct Inner { void go() { } };
  private:
    int t_;
};
enum class E { A, B };
struct Box2* make() { return nullptr; }
""")
    fns = {f.qualname: f for f in find_functions(code)}
    assert set(fns) == {"Box::Box", "Box::relu", "Box::both", "Box::operator()", "Inner::go", "make"}
    assert fns["Box::relu"].is_device and not fns["Box::both"].is_device
    assert not fns["Box::operator()"].is_device and fns["make"].cls == ""


@pytest.mark.parametrize(
    "cuda",
    [
        # an in-class member called on an object
        """
struct Launcher {
    int threads;
    void run(const float* x, float* y, int64_t n) const { LAUNCH }
};
torch::Tensor relu_cuda(torch::Tensor x) {
    auto y = torch::empty_like(x);
    Launcher l{256};
    l.run(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
    return y;
}""".replace("LAUNCH", _LAUNCH),
        # a functor's operator(), private members, a static member
        """
class Relu {
  public:
    void operator()(const float* x, float* y, int64_t n) const { launch(x, y, n); }
  private:
    static void launch(const float* x, float* y, int64_t n) { LAUNCH }
};
torch::Tensor relu_cuda(torch::Tensor x) {
    auto y = torch::empty_like(x);
    Relu{}(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
    return y;
}""".replace("LAUNCH", _LAUNCH),
    ],
    ids=["object.method", "functor"],
)
def test_a_launch_in_a_reachable_member_counts(cuda: str) -> None:
    assert _errors(_candidate(cuda), "strict") == []


def test_a_pybind_class_method_is_a_root_and_its_objects_are_the_extension() -> None:
    cuda = """
class ReluOp {
  public:
    torch::Tensor forward(torch::Tensor t) {
        auto out = torch::empty_like(t);
        const float* x = t.data_ptr<float>(); float* y = out.data_ptr<float>(); int64_t n = t.numel();
        LAUNCH
        return out;
    }
};
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    pybind11::class_<ReluOp>(m, "ReluOp").def(pybind11::init<>()).def("forward", &ReluOp::forward);
}""".replace("LAUNCH", _LAUNCH)
    ok = _candidate(cuda, functions=False, init="self.op = ext.ReluOp()", forward="return self.op.forward(x)")
    assert _errors(ok, "strict") == []
    # an object of a class the extension does not bind is no extension object
    other = ok.replace("self.op = ext.ReluOp()", "self.op = ext.Other()")
    assert "static.kernel_never_launched" in _codes(other)


def test_a_decoy_kernel_in_an_unreached_member_is_still_reported() -> None:
    cuda = """
struct Decoy {
    void run(const float* x, float* y, int64_t n) const { LAUNCH }
    void operator()(const float* x, float* y, int64_t n) const { LAUNCH }
};
torch::Tensor relu_cuda(torch::Tensor x) { return torch::empty_like(x); }""".replace("LAUNCH", _LAUNCH)
    assert "static.kernel_never_launched" in _codes(_candidate(cuda))


def test_device_members_are_device_code_but_host_members_are_judged() -> None:
    device = """
struct Op {
    __device__ static float relu(float v) { return v > 0.f ? v : 0.f; }
    __device__ float operator()(float v) const { return relu(v); }
};
torch::Tensor relu_cuda(torch::Tensor x) {
    auto y = torch::empty_like(x);
    const float* xp = x.data_ptr<float>(); float* yp = y.data_ptr<float>(); int64_t n = x.numel();
    relu_kernel<<<(n + 255) / 256, 256, 0, at::cuda::getCurrentCUDAStream()>>>(xp, yp, n);
    return y;
}"""
    assert _errors(_candidate(device), "strict") == []
    # the member `relu` is the class's own name only: outside it, `relu(x)` on a tensor is `at::relu`
    adl = device.replace("return y;\n}", "return relu(x);\n}")
    assert any("at::relu" in msg for _, msg in _errors(_candidate(adl)))
    # a host member doing ATen work is reported under its class's name
    host = """
struct Cheat {
    torch::Tensor go(torch::Tensor t) { return torch::relu(t); }
};
torch::Tensor relu_cuda(torch::Tensor x) { return Cheat{}.go(x); }"""
    errs = _errors(_candidate(host))
    assert any(code == "static.cpp_torch_op" and "`Cheat::go`" in msg for code, msg in errs)


_HELPERS = """
#include <ATen/ceil_div.h>
#include <ATen/TensorUtils.h>
torch::Tensor relu_cuda(torch::Tensor x) {
    at::TensorArg x_arg{x, "x", 1};
    at::CheckedFrom c = "relu_cuda";
    at::checkAllSameGPU(c, {x_arg});
    at::checkContiguous(c, x_arg);
    at::checkDim(c, x_arg, 2);
    at::checkScalarType(c, x_arg, at::kFloat);
    auto y = torch::empty_like(x);
    const float* xp = x.data_ptr<float>(); float* yp = y.data_ptr<float>(); int64_t n = x.numel();
    relu_kernel<<<(int)at::ceil_div(n, (int64_t)256), 256, 0, at::cuda::getCurrentCUDAStream()>>>(xp, yp, n);
    return %s;
}"""


@pytest.mark.parametrize("policy", ["strict", "default", "lenient"])
def test_aten_helpers_that_are_no_ops_are_glue(policy: str) -> None:
    assert _errors(_candidate(_HELPERS % "y"), policy) == []


@pytest.mark.parametrize("op", ["at::relu(x)", "at::clamp_min(x, 0)", "at::ceil(x)", "at::native::relu(x)"])
def test_aten_ops_next_to_the_helpers_stay_caught(op: str) -> None:
    assert "static.cpp_torch_op" in _codes(_candidate(_HELPERS % op))


def test_device_qualifiers_in_a_cpp_source_are_host_code() -> None:
    """`cpp_sources` go to the host compiler, where `__device__` is an ignored attribute: a function or
    member so marked there runs on the host, and its ATen calls are found."""
    text = _candidate(
        "torch::Tensor relu_cuda(torch::Tensor x) { return torch::empty_like(x); }",
        forward="ext.relu_cuda(x)\n        return ext.relu_host(x)",
    )
    cpp = r'''r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
struct S { __device__ static torch::Tensor go(torch::Tensor x) { return at::relu(x); } };
torch::Tensor relu_cuda(torch::Tensor x);
torch::Tensor relu_host(torch::Tensor x) { return S::go(x); }
"""'''
    text = text.replace('cpp_sources="torch::Tensor relu_cuda(torch::Tensor x);"', f"cpp_sources={cpp}")
    text = text.replace('functions=["relu_cuda"]', 'functions=["relu_cuda", "relu_host"]')
    errs = _errors(text)
    assert any(code == "static.cpp_torch_op" and "`S::go`" in msg for code, msg in errs), errs


@pytest.mark.parametrize(
    "call",
    [
        "cusolverDnSgetrf(h, 4, 4, y.data_ptr<float>(), 4, nullptr, nullptr, nullptr);",
        "nppiAdd_32f_C1R(x.data_ptr<float>(), 4, x.data_ptr<float>(), 4, y.data_ptr<float>(), 4, {2, 2});",
        "cutensorContract(h, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 0);",
    ],
)
def test_a_vendor_library_beyond_cublas_does_the_work_is_a_violation(call: str) -> None:
    cuda = f"""
torch::Tensor relu_cuda(torch::Tensor x) {{
    auto y = torch::empty_like(x);
    void* h = nullptr;
    {call}
    relu_kernel<<<1, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
    return y;
}}
"""
    diags = check_source(_candidate(cuda), "cand.py", VerifyConfig())
    found = [d for d in diags if d.code == "static.cpp_torch_op" and d.severity is Severity.ERROR]
    assert found and "vendor library" in found[0].message, [(d.code, d.message) for d in diags]
