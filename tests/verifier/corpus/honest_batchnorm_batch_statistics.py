# cudice: reference=references/linear_bn.py
# corpus: kind=runtime verdict=correct
# exploit: class 8 - honest: a KernelBench-style kernel for a BatchNorm in training mode (the reference as constructed) normalises by the batch's mean and biased variance, with the module's weight and bias
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, fin: int, fout: int) -> None:
        super().__init__()
        self.fc = nn.Linear(fin, fout)
        self.bn = nn.BatchNorm1d(fout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        mean = h.mean(0)
        var = ((h - mean) ** 2).mean(0)
        y = (h - mean) / torch.sqrt(var + self.bn.eps) * self.bn.weight + self.bn.bias
        return torch.relu(y)
