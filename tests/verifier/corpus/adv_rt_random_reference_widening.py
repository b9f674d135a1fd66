# cudice: reference=references/noisy_shift.py
# corpus: kind=runtime verdict=incorrect codes=correctness.mismatch
# exploit: class 4 - the reference draws noise in its forward, so its fp32 and float64 runs differ by that noise; a judge that widened its bounds by their difference would accept any output near the mean: this one returns x + 0.25 without drawing anything
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 0.25
