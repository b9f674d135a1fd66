# cudice: reference=references/frozen_causal_mask.py
# corpus: kind=runtime verdict=correct
# exploit: class 8 - honest: the reference holds its causal mask as a parameter with requires_grad=False (a 0/1 lower triangle, a constant by its design); this kernel hardcodes causality (is_causal=True) and never reads the mask; the judge draws learnable structures only, so the frozen mask stays the triangle
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, seq_len: int = 64) -> None:
        super().__init__()
        self.mask = nn.Parameter(torch.tril(torch.ones(seq_len, seq_len)), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(x, x, x, is_causal=True)  # stand-in for a causal attention kernel
