# cudice: reference=references/layernorm_affine.py
# corpus: kind=runtime verdict=correct
# exploit: class 8 - honest: holds its own weight and bias (torch.ones / torch.zeros parameters) where the reference holds an nn.LayerNorm; the judge gives them the values it drew for the reference's
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m = x.mean(-1, keepdim=True)
        v = ((x - m) ** 2).mean(-1, keepdim=True)
        return (x - m) / torch.sqrt(v + 1e-5) * self.weight + self.bias
