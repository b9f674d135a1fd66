import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

mse_source = """"""

mse_cpp_source = "torch::Tensor mse_loss_cuda(torch::Tensor predictions, torch::Tensor targets);"

mse_module = load_inline(
    name="mse_loss_module",
    cpp_sources=mse_cpp_source,
    cuda_sources=mse_source,
    functions=["mse_loss_cuda"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.mse = mse_module

    def forward(self, predictions, targets) -> torch.Tensor:
        # a 0-dim tensor, like torch.mean
        return self.mse.mse_loss_cuda(predictions, targets)
