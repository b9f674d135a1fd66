# cudice: reference=references/softmax.py
# corpus: kind=runtime verdict=incorrect codes=correctness.mismatch
# exploit: class 4 - returns 1e-6 * x: every true output of a 65536-wide softmax is ~1.5e-5, so an absolute atol of 1e-2 accepts it (https://github.com/ScalingIntelligence/KernelBench/issues/165); not zero and not constant
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 1e-6
