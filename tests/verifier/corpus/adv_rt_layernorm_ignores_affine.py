# cudice: reference=references/layernorm_affine.py
# corpus: kind=runtime verdict=incorrect codes=correctness.mismatch
# exploit: class 4 - a LayerNorm that never reads its weight and bias, which a fresh nn.LayerNorm holds at 1 and 0
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.d = d

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m = x.mean(-1, keepdim=True)
        v = ((x - m) ** 2).mean(-1, keepdim=True)
        return (x - m) / torch.sqrt(v + 1e-5)
