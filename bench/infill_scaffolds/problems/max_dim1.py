"""Max reduction over the middle dimension of a 3-D tensor."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        # values only; the indices are dropped
        return torch.max(x, dim=1)[0]


batch_size = 16
dim1 = 256
dim2 = 257


def get_inputs():
    x = torch.randn(batch_size, dim1, dim2)
    return [x]


def get_init_inputs():
    return []
