"""Honest shapes the fail-closed checks must keep clean, each beside the cheat that must stay caught.

From a false-rejection hunt on the tightened static checks: the configuration numbers of a
`torch.nn` layer held for its weights, a `@property` returning a number, a product of sizes by
`functools.reduce(operator.mul, ...)`, c10's value helpers in C++ host code, and harmless nvcc
flags (warnings, optimisation levels, packaging, the list form of `-gencode ... code=[...]`).
"""

from __future__ import annotations

import pytest
from cudice.verifier.config import VerifyConfig
from cudice.verifier.static.checks import check_source

HEAD = '''import functools
import operator
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SRC = """
__global__ void k(const float* x, float* y, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}
void launch(torch::Tensor x, torch::Tensor y, int64_t blocks, int64_t threads) {
    HOSTLINE
    k<<<blocks, threads>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
}
"""
DECL = "void launch(torch::Tensor x, torch::Tensor y, int64_t b, int64_t t);"
ext = load_inline(name="ext", cpp_sources=DECL, cuda_sources=SRC, functions=["launch"], FLAGS verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        INIT

    BODY

    def forward(self, x):
        y = torch.empty_like(x)
        threads = THREADS
        ext.launch(x, y, (x.numel() + threads - 1) // threads, threads)
        return y
'''


def errors(
    threads: str = "256", body: str = "", init: str = "pass", host: str = "", flags: str = ""
) -> set[str]:
    text = (
        HEAD.replace("THREADS", threads)
        .replace("BODY", body or "pass")
        .replace("INIT", init)
        .replace("FLAGS", flags)
        .replace("HOSTLINE", host)
    )
    return {d.code for d in check_source(text, "cand.py", VerifyConfig()) if d.severity.value == "error"}


def test_the_template_is_clean() -> None:
    assert errors() == set()


def test_a_held_layers_configuration_numbers_are_plain() -> None:
    assert errors("self.conv.kernel_size[0] * self.conv.out_channels") == set()


def test_a_configuration_name_the_file_stores_into_is_not_trusted() -> None:
    # `stride` replaced by a tensor at load: its arithmetic is no longer launch arithmetic
    assert "static.torch_op_in_forward" in errors(
        "int(self.conv.stride[0] * (self.conv.stride[0] > 0))", init="self.conv.stride = torch.ones(2)"
    )


def test_a_property_returning_a_number_is_plain_and_one_with_a_setter_is_not() -> None:
    prop = "@property\n    def block(self):\n        return 256"
    assert errors("self.block", body=prop) == set()
    setter = prop + "\n\n    @block.setter\n    def block(self, v):\n        self._b = v"
    assert "static.torch_op_in_forward" in errors("self.block", body=setter)


def test_a_product_of_sizes_by_reduce_is_plain_and_one_of_tensors_is_not() -> None:
    assert errors("functools.reduce(operator.mul, x.shape, 1) // x.shape[0] + 1") == set()
    assert "static.torch_op_in_forward" in errors("int(functools.reduce(operator.mul, [x, x], 1).sum())")


@pytest.mark.parametrize(
    "host",
    [
        'TORCH_CHECK(x.is_cuda(), c10::str("bad ", x.sizes()));',
        'TORCH_CHECK(c10::isFloatingType(x.scalar_type()), "float");',
        "auto n = c10::multiply_integers(x.sizes());",
    ],
)
def test_c10_value_helpers_are_glue(host: str) -> None:
    assert errors(host=host) == set()


@pytest.mark.parametrize(
    "flag",
    [
        "--diag-suppress=20012",
        "-diag-suppress 177",
        "--disable-warnings",
        "--extra-device-vectorization",
        "--optimize=3",
        "-gencode arch=compute_80,code=[sm_80,compute_80]",
    ],
)
def test_harmless_nvcc_flags_are_allowed(flag: str) -> None:
    assert errors(flags=f"extra_cuda_cflags=[{flag!r}],") == set()


@pytest.mark.parametrize("flag", ["-include /tmp/x.h", "--default-stream=per-thread", "-DACT=at::relu"])
def test_flags_that_change_what_the_code_means_are_still_refused(flag: str) -> None:
    found = errors(flags=f"extra_cuda_cflags=[{flag!r}],", host="ACT(x);" if "ACT" in flag else "")
    assert found & {"static.dynamic_source", "static.cpp_torch_op"}, found
