import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

layernorm_source = """"""

layernorm_cpp_source = "torch::Tensor layernorm_forward(torch::Tensor x, double eps);"

layernorm = load_inline(
    name="layernorm_no_affine",
    cpp_sources=layernorm_cpp_source,
    cuda_sources=layernorm_source,
    functions=["layernorm_forward"],
    verbose=False,
)


class ModelNew(nn.Module):
    """LayerNorm over the last dimension, no weight or bias."""

    def __init__(self):
        super().__init__()
        self.eps = 1e-5

    def forward(self, hidden) -> torch.Tensor:
        return layernorm.layernorm_forward(hidden, self.eps)
