"""Softmax over the last dimension of a 3-D activation tensor."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        return F.softmax(scores, dim=-1)


batch = 4
heads = 64
length = 1000


def get_inputs():
    scores = torch.randn(batch, heads, length) * 3.0
    return [scores]


def get_init_inputs():
    return []
