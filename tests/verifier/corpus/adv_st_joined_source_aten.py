# cudice: reference=references/relu.py
# corpus: kind=static verdict=static_violation codes=static.cpp_torch_op
# exploit: the source is `"".join([...])` of literals (no source map), hiding `at::relu` in the second piece; the file fixes its value, so it is checked
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

PIECES = [
    "#include <torch/extension.h>\n__global__ void k(const float* x) {}\n",
    "torch::Tensor relu_cuda(torch::Tensor x) { k<<<1, 1>>>(x.data_ptr<float>()); return at::relu(x); }\n",
]

ext = load_inline(name="adv_st_joined_source_aten", cpp_sources="torch::Tensor relu_cuda(torch::Tensor x);",
                  cuda_sources="".join(PIECES), functions=["relu_cuda"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.relu_cuda(x)
