"""Reference: Linear, BatchNorm1d (training mode: the batch's statistics, as KernelBench runs it), ReLU."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, fin: int, fout: int) -> None:
        super().__init__()
        self.fc = nn.Linear(fin, fout)
        self.bn = nn.BatchNorm1d(fout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(self.fc(x)))


def get_inputs():
    return [torch.randn(128, 512)]


def get_init_inputs():
    return [512, 256]
