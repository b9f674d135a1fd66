"""Reference: argmax over dim 0 where 64 columns' maxima are tied between rows 3 and 9."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.argmax(x, dim=0)


def get_inputs():
    x = torch.randn(16, 64, 256)
    top = x[:, 0, :64].abs().amax(0) + 1.0
    x[3, 0, :64] = top
    x[9, 0, :64] = top
    return [x]


def get_init_inputs():
    return []
