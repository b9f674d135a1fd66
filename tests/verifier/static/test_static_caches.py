"""`static.output_cache` on caches that cannot hold an output: a loader cached with no arguments,
a launch configuration cached on sizes, builds kept in a module-level dict. Caches keyed on what
may be a tensor (or an address) still are output caches."""

from __future__ import annotations

import pytest
from cudice.verifier.config import VerifyConfig
from cudice.verifier.static.checks import check_source

HEAD = '''import functools
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SRC = """
__global__ void k(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}
torch::Tensor f(torch::Tensor x, int64_t blocks, int64_t threads) {
    auto y = torch::empty_like(x);
    k<<<blocks, threads>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
    return y;
}
"""
'''


def codes(body: str) -> set[str]:
    text = HEAD + body
    return {d.code for d in check_source(text, "cand.py", VerifyConfig()) if d.severity.value == "error"}


LOADER = """
@functools.lru_cache(maxsize=None)
def _ext():
    decl = "torch::Tensor f(torch::Tensor x, int64_t blocks, int64_t threads);"
    return load_inline(name="ext", cpp_sources=decl, cuda_sources=SRC, functions=["f"], verbose=False)


@functools.cache
def launch(n: int, threads: int = 256):
    return (n + threads - 1) // threads, threads


class ModelNew(nn.Module):
    def forward(self, x):
        blocks, threads = launch(x.numel())
        return _ext().f(x, blocks, threads)
"""


def test_a_cached_loader_and_a_cached_launch_configuration_are_no_output_cache() -> None:
    assert "static.output_cache" not in codes(LOADER)
    assert not codes(LOADER)


def test_builds_kept_in_a_module_dict_are_no_output_cache() -> None:
    body = LOADER.replace(
        "        return _ext().f(x, blocks, threads)",
        '        if "f" not in _BUILT:\n'
        '            _BUILT["f"] = load_inline(name="ext2", cpp_sources="torch::Tensor f(torch::Tensor x, '
        'int64_t blocks, int64_t threads);", cuda_sources=SRC, functions=["f"], verbose=False)\n'
        '        return _BUILT["f"].f(x, blocks, threads)',
    )
    assert "static.output_cache" not in codes("_BUILT = {}\n" + body)


@pytest.mark.parametrize(
    ("cached", "call"),
    [
        ("@functools.cache\ndef run(x):\n    return _ext().f(x, 1, 1)\n", "run(x)"),  # keyed on the tensor
        ("@functools.cache\ndef run(p: int):\n    return torch.empty(4)\n", "run(x.numel())"),  # tensor kept
    ],
)
def test_a_cache_that_can_return_a_stored_output_is_flagged(cached: str, call: str) -> None:
    body = LOADER.replace("class ModelNew", cached + "\n\nclass ModelNew").replace(
        "        return _ext().f(x, blocks, threads)", f"        return {call}"
    )
    assert "static.output_cache" in codes(body)


def test_outputs_stored_in_a_module_dict_are_flagged() -> None:
    body = LOADER.replace(
        "        return _ext().f(x, blocks, threads)",
        "        _OUT[0] = _ext().f(x, blocks, threads)\n        return _OUT[0]",
    )
    assert "static.output_cache" in codes("_OUT = {}\n" + body)
