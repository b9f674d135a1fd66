"""Reference: KL divergence of two row-wise probability distributions (KernelBench level 1 #98)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.kl_div(torch.log(predictions), targets, reduction="batchmean")


batch_size = 128
dim = 4096


def get_inputs():
    return [torch.randn(batch_size, dim).softmax(dim=-1), torch.randn(batch_size, dim).softmax(dim=-1)]


def get_init_inputs():
    return []
