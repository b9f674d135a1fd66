import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

rmsnorm_kernel_source = """"""

rmsnorm_cpp_source = "torch::Tensor rms_norm(torch::Tensor input, float eps);"

rmsnorm_lib = load_inline(
    name="rmsnorm_lib",
    cpp_sources=rmsnorm_cpp_source,
    cuda_sources=rmsnorm_kernel_source,
    functions=["rms_norm"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.eps = 1e-6
        self.lib = rmsnorm_lib

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lib.rms_norm(x, self.eps)
