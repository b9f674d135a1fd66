"""Reference: LayerNorm without affine weights, then the mean over the normalised dim. The true
output is 0 for every row, so every value fp32 gives is its own rounding: an output that cancels."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.layer_norm(x, (x.shape[-1],)).mean(-1)


def get_inputs():
    return [torch.randn(64, 4096) * 3 + 5]


def get_init_inputs():
    return []
