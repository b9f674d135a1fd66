import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

softmax_source = """"""

cpp_source = "torch::Tensor softmax_lastdim(torch::Tensor scores);"

softmax_ext = load_inline(
    name="softmax_lastdim",
    cpp_sources=cpp_source,
    cuda_sources=softmax_source,
    functions=["softmax_lastdim"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        # the host function treats every leading dimension as a row and returns scores' shape
        return softmax_ext.softmax_lastdim(scores)
