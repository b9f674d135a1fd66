"""C++ operators on tensors in host code are ATen compute (`static.cpp_torch_op`): `x * (x > 0)` is
flagged however the tensor is spelt, while the host arithmetic every honest wrapper does (grid sizes,
`x.size(0) * x.size(1)`, `x.data_ptr<float>() + offset`, `!x.is_contiguous()`) is not. Pure regex
work over the preprocessed text (`static/cpp_tensors.py`); no compiler runs here."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from cudice.verifier.config import VerifyConfig
from cudice.verifier.source.result import Diagnostic
from cudice.verifier.static.checks import check_source, has_violation
from cudice.verifier.static.cpp_tensors import tensor_operators

REPO = Path(__file__).resolve().parents[3]
ROOTS = {"torch", "at", "c10"}


def _file(body: str) -> str:
    return f'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
#include <torch/extension.h>
__global__ void k(const float* x, float* y, int64_t n) {{
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] = -x[i] * 2.0f + (x[i] > 0.0f ? 1.0f : 0.0f);
}}
{body}
"""
ext = load_inline(name="ops", cpp_sources="torch::Tensor run(torch::Tensor x, torch::Tensor b);",
                  cuda_sources=src, functions=["run"])


class ModelNew(nn.Module):
    def forward(self, x, b):
        return ext.run(x, b)
'''


def _check(body: str, policy: str = "default") -> list[Diagnostic]:
    return check_source(_file(body), "ops.py", VerifyConfig(static_policy=policy))


def _operator_findings(diags: list[Diagnostic]) -> list[Diagnostic]:
    return [d for d in diags if d.code == "static.cpp_torch_op" and "on the tensor" in d.message]


_LAUNCH = "k<<<(n + 255) / 256, 256>>>(xc.data_ptr<float>(), out.data_ptr<float>(), n);"


@pytest.mark.parametrize(
    ("statements", "op"),
    [
        ("return x * (x > 0).to(x.scalar_type());", "*"),
        ("if (x.numel() > 0) return (x > 0).to(x.scalar_type()) * x;", ">"),
        ("out += b;", "+="),
        ("out = xc - b;", "-"),
        ("return -xc;", "-"),
        ("return ~(x > 0);", ">"),
        ("auto m = x.gt(0); return !m;", "!"),
        ("auto z = torch::zeros_like(x); return z / 2;", "/"),
        ("auto v = xc.view({-1}); auto w = v; return w % 2;", "%"),
        ("std::vector<torch::Tensor> ts{x, b}; return ts[0] & ts[1];", "&"),
        ("return (xc) | b;", "|"),
        ("return x.contiguous() ^ b;", "^"),
        ("const at::Tensor& r = x; return r == r;", "=="),
        ("torch::Tensor&& t = std::move(out); t *= 2; return t;", "*="),
        ("return twice(x) <= b;", "<="),
        ("return [&](torch::Tensor t) { return t + 1; }(x);", "+"),
        ("return TIMES(x, b);", "*"),
        ("return at::relu(x) != b;", "!="),
        ("std::vector<at::Tensor> ts{x, b};\n    for (auto& t : ts) { t -= 1; }", "-="),
        ("for (const torch::Tensor& t : {x, b}) { out = out + t; }", "+"),
    ],
)
def test_an_operator_on_a_tensor_in_host_code_is_aten_compute(statements: str, op: str) -> None:
    body = (
        "#define TIMES(a, b) a * b\n"
        "torch::Tensor twice(const torch::Tensor& x) { auto y = torch::empty_like(x); return y; }\n"
        "torch::Tensor run(torch::Tensor x, torch::Tensor b) {\n"
        "    auto xc = x.contiguous();\n    auto out = torch::empty_like(xc);\n    int64_t n = xc.numel();\n"
        f"    {_LAUNCH}\n    {statements}\n    return out;\n}}"
    )
    diags = _check(body)
    found = _operator_findings(diags)
    assert has_violation(diags) and found, [(d.code, d.message) for d in diags]
    assert any(f"`{op}` on the tensor" in d.message for d in found), [d.message for d in found]
    d = next(d for d in found if f"`{op}` on the tensor" in d.message)
    assert "in host function `run`" in d.message and "Compute it in a `__global__` kernel" in d.message
    assert d.location is not None
    line = _file(body).splitlines()[d.location.line - 1]
    assert op in line or "TIMES(" in line, line  # a macro's finding lands on its invocation


@pytest.mark.parametrize(
    "statements",
    [
        "int64_t m = x.size(0) * x.size(1); int blocks = (int)((m + 255) / 256); (void)blocks;",
        'TORCH_CHECK(x.is_cuda() && x.dim() == 2, "x must be a 2-D CUDA tensor");',
        "TORCH_CHECK(x.sizes() == b.sizes() && x.scalar_type() == at::kFloat);",
        'if (!x.is_contiguous() || !b.defined()) { TORCH_CHECK(false, "contiguous"); }',
        "const float* p = x.data_ptr<float>() + 4 * x.stride(0); float* q = out.data_ptr<float>(); "
        "q += 1; (void)p;",
        "auto* r = x.data_ptr<float>(); r = r + n - 1; (void)r;",
        "float v = x.numel() > 0 ? 2.0f * (float)x.numel() : -1.0f; (void)v;",
        "auto sizes = x.sizes(); int64_t rows = sizes[0] * sizes[1]; (void)rows;",
        "auto opts = x.options().dtype(torch::kFloat32); auto o2 = torch::empty({n / 2, 2}, opts); (void)o2;",
        "std::vector<int64_t> shape{x.size(0) * 2, -x.size(1)}; int64_t last = x.size(-1) - 1; (void)last;",
        "auto stream = at::cuda::getCurrentCUDAStream(); (void)stream;",
        "int64_t e = x.element_size() * x.numel() << 1; (void)e;",
        "float* tmp = nullptr; float** pp = &tmp; *pp = out.data_ptr<float>(); (void)pp;",
        "const float alpha = 0.5f; float beta = -alpha * 2.0f + (float)b.size(0); (void)beta;",
        'AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "run", [&] {\n'
        "        auto* xp = x.data_ptr<scalar_t>(); (void)(xp + n);\n    });",
        "int64_t i0 = static_cast<int64_t>(x.size(0)) / 2; (void)i0;",
        "std::vector<torch::Tensor> ts{x, b}; int64_t total = 0;\n"
        "    for (const auto& t : ts) { total += t.numel() * 2; } (void)total;",
        "for (int64_t d = 0; d < x.dim(); ++d) { TORCH_CHECK(x.size(d) > 0 && d >= 0); }",
    ],
)
def test_host_arithmetic_on_sizes_pointers_and_flags_is_not_flagged(statements: str) -> None:
    body = (
        "torch::Tensor run(torch::Tensor x, torch::Tensor b) {\n"
        "    auto xc = x.contiguous();\n    auto out = torch::empty_like(xc);\n    int64_t n = xc.numel();\n"
        f"    {statements}\n    {_LAUNCH}\n    return out;\n}}"
    )
    diags = _check(body, "strict")
    assert diags == [], [(d.code, d.message) for d in diags]


def test_device_code_and_other_functions_parameters_are_not_tensors() -> None:
    """`x` is a tensor in the host function but a pointer in the kernel and a float in a device helper."""
    ops = tensor_operators(
        "torch::Tensor run(torch::Tensor x)",
        "{ auto f = [](float x) { return x * 2.0f; }; int64_t n = x.numel(); return torch::empty({n}); }",
        ROOTS,
    )
    assert [o.op for o in ops] == ["*"]  # a lambda re-declaring `x` as a float is not resolved (documented)
    body = "__device__ float twice(float x) { return x * 2.0f; }\n" + (
        "torch::Tensor run(torch::Tensor x, torch::Tensor b) {\n"
        "    auto xc = x.contiguous();\n    auto out = torch::empty_like(xc);\n    int64_t n = xc.numel();\n"
        f"    {_LAUNCH}\n    return out;\n}}"
    )
    assert _check(body) == []


def test_operators_on_tensors_warn_in_lenient() -> None:
    body = (
        "torch::Tensor run(torch::Tensor x, torch::Tensor b) {\n"
        "    auto xc = x.contiguous();\n    auto out = torch::empty_like(xc);\n    int64_t n = xc.numel();\n"
        f"    {_LAUNCH}\n    return out + b;\n}}"
    )
    diags = _check(body, "lenient")
    assert not has_violation(diags) and _operator_findings(diags)


def test_the_profiler_gate_attack_is_rejected_statically() -> None:
    """`adv_rt2_profiler_gate`: the kernel runs only under the profiler; every other call returns
    `x * (x > 0).to(...)`, computed by ATen through C++ operators (measured passing on a GPU)."""
    path = REPO / "tests/verifier/corpus/adv_rt2_profiler_gate.py"
    diags = check_source(path.read_text(), str(path))
    found = _operator_findings(diags)
    assert has_violation(diags) and {d.message.split("`")[1] for d in found} == {"*", ">"}
    assert all(d.location is not None and d.location.line == 20 for d in found)


def _honest_sources() -> list[tuple[str, str]]:
    """Every honest kernel file of the repository: the corpus's `honest*` files of every kind, the
    shipped examples and the benchmark's KernelBench-style candidates (every template, five variants)."""
    out = [(str(p), p.read_text()) for p in sorted((REPO / "tests/verifier/corpus").glob("honest*.py"))]
    out += [(str(p), p.read_text()) for p in sorted((REPO / "examples").glob("*.py"))]
    sys.path.insert(0, str(REPO / "bench"))
    try:
        import kb_candidates
    finally:
        sys.path.remove(str(REPO / "bench"))
    out += [(c.name, c.source) for c in kb_candidates.generate(kb_candidates.NUM_TEMPLATES * 5)]
    return out


def test_no_honest_kernel_file_has_an_operator_on_a_tensor() -> None:
    sources = _honest_sources()
    assert len(sources) >= 100
    for policy in ("strict", "default", "lenient"):
        flagged = [
            (name, d.message)
            for name, text in sources
            for d in _operator_findings(check_source(text, name, VerifyConfig(static_policy=policy)))
        ]
        assert flagged == [], flagged
