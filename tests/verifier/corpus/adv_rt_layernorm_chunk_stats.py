# cudice: reference=references/layernorm.py
# corpus: kind=runtime verdict=incorrect codes=correctness.mismatch
# exploit: class 4 - LayerNorm whose mean and variance come from the first quarter of each row only: within tolerance on i.i.d. standard-normal rows, wrong on structured ones
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        part = x[..., : x.shape[-1] // 4]
        mean = part.mean(dim=-1, keepdim=True)
        var = part.var(dim=-1, unbiased=False, keepdim=True)
        return (x - mean) / torch.sqrt(var + 1e-5)
