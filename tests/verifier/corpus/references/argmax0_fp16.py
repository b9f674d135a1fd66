"""Reference: argmax over dim 0 of fp16 values."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.argmax(x, dim=0)


def get_inputs():
    return [torch.randn(16, 256, 256, dtype=torch.float16)]


def get_init_inputs():
    return []
