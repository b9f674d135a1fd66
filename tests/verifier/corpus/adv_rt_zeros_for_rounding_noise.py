# cudice: reference=references/layernorm_mean.py
# corpus: kind=runtime verdict=incorrect codes=correctness.mismatch
# exploit: class 4 - LayerNorm then the mean over the same dim is 0 in exact arithmetic, so PyTorch's fp32 output is rounding noise; this returns zeros at no cost, hoping the judge's float64 second opinion (whose output is 0 up to rounding) accepts it
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.zeros(x.shape[0], device=x.device, dtype=x.dtype)
