"""Reference: stable grouping of tokens by expert id (MoE dispatch): argsort(stable=True) of int keys,
plus the routing scores gathered in that order."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, scores):
        expert = torch.argmax(scores, dim=1)            # (T,) int64, E=8 experts
        order = torch.argsort(expert, stable=True)      # tokens of expert 0 first, in token order
        return order


def get_inputs():
    return [torch.randn(4096, 8)]


def get_init_inputs():
    return []
