"""Reference: softmax then the row sums: every output is 1 up to rounding (a constant output by construction)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1).sum(dim=-1)


def get_inputs():
    return [torch.randn(64, 1000)]


def get_init_inputs():
    return []
