# cudice: reference=references/argmax0_tied.py
# corpus: kind=runtime verdict=incorrect codes=correctness.mismatch
# exploit: class 4 - returns index 0 wherever a column's maximum is tied, hoping that differences at the reference's ties are let through whatever their value: only a value the reference itself gives on nudged inputs is
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        top = x.max(dim=0, keepdim=True).values
        tied = (x == top).sum(dim=0) > 1
        return torch.where(tied, torch.zeros_like(tied, dtype=torch.long), torch.argmax(x, dim=0))
