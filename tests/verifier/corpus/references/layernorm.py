"""Reference: LayerNorm over the last dimension without affine parameters (KernelBench level 1 #40, small)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.layer_norm(x, x.shape[-1:])


def get_inputs():
    return [torch.randn(32, 4096)]


def get_init_inputs():
    return []
