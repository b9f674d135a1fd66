# cudice: reference=references/layernorm_mean.py
# corpus: kind=runtime verdict=correct codes=correctness.exact_reference
# exploit: class 8 - honest: LayerNorm then the mean over the same dim is 0 in exact arithmetic, so PyTorch's fp32 output is rounding noise; this two-pass LayerNorm summed in blocks of 256 is as close to the exact output (judged against the reference run in float64), but not to PyTorch's noise (a false rejection before)
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(-1, keepdim=True)
        centred = x - mean
        normed = centred * torch.rsqrt((centred * centred).mean(-1, keepdim=True) + 1e-5)
        rows, cols = normed.shape
        return normed.view(rows, cols // 256, 256).sum(-1).sum(-1) / cols
