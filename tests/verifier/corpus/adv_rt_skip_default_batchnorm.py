# cudice: reference=references/linear_bn.py
# corpus: kind=runtime verdict=incorrect codes=correctness.mismatch
# exploit: class 4 - skips the BatchNorm: with the statistics and weights a fresh BatchNorm1d starts with (mean 0, variance 1, weight 1, bias 0) it is x / sqrt(1 + eps) in eval mode, within the tolerance of x; the judge draws such constant weights (and runs the models in training mode, as KernelBench does, unless the reference calls self.eval())
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, fin: int, fout: int) -> None:
        super().__init__()
        self.fc = nn.Linear(fin, fout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x))
