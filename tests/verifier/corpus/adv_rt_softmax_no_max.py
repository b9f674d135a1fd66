# cudice: reference=references/softmax_small.py
# corpus: kind=runtime verdict=incorrect codes=correctness.mismatch
# exploit: class 4 - softmax that skips the max subtraction: exact on standard-normal inputs, overflows on wider ones
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e = torch.exp(x)
        return e / e.sum(dim=1, keepdim=True)
