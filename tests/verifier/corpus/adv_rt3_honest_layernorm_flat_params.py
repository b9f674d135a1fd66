# cudice: reference=references/layernorm_3d_shape.py
# corpus: kind=runtime verdict=correct
# exploit: honest (false-rejection hunt) - KernelBench L1 #40's LayerNorm over (C, H, W) with its weight and bias held flat (C*H*W,), as a flat-indexing kernel wants them: the drawn weights went only to parameters of the reference's shape, so these kept 1 and 0 and the output differed
import math

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        n = math.prod(normalized_shape)
        self.weight = nn.Parameter(torch.ones(n))
        self.bias = nn.Parameter(torch.zeros(n))
        self.eps = 1e-5

    def forward(self, x):
        flat = x.reshape(x.shape[0], -1)
        mu = flat.mean(dim=1, keepdim=True)
        var = ((flat - mu) ** 2).mean(dim=1, keepdim=True)
        y = (flat - mu) / torch.sqrt(var + self.eps) * self.weight + self.bias
        return y.view_as(x)
