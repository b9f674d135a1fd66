"""Reference: descending sort of relu(x) along the last dim (values, indices)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.sort(torch.relu(x), dim=-1, descending=True)


def get_inputs():
    return [torch.randn(256, 64)]


def get_init_inputs():
    return []
