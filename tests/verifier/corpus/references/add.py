"""Reference: elementwise add of two tensors (KernelBench's one-shot example)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a + b


N = 1 << 20


def get_inputs():
    return [torch.randn(N), torch.randn(N)]


def get_init_inputs():
    return []
