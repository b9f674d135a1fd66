"""Reference: a ConvNeXt/CaiT-style residual MLP block with LayerScale: x + gamma * MLP(LN(x)), gamma
initialised to 1e-6 * ones(dim) as timm's ConvNeXt, CaiT and DeiT-III blocks do."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim: int = 256, hidden: int = 1024, init_value: float = 1e-6) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self.gamma = nn.Parameter(init_value * torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc2(torch.nn.functional.gelu(self.fc1(self.norm(x))))
        return x + self.gamma * h


def get_inputs():
    return [torch.randn(256, 256)]


def get_init_inputs():
    return []
