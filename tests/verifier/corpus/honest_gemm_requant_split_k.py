# cudice: reference=references/gemm_requant.py
# corpus: kind=runtime verdict=correct
# honest: fp32 GEMM summed over K in 4 chunks (split-K, fp32 throughout), then the same
# round-to-grid epilogue. Another summation order moves a few products of the 1M outputs across a
# rounding boundary by one ulp, so those outputs move by a whole grid step.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, out_scale=1.5):
        super().__init__()
        self.out_scale = out_scale

    def forward(self, a, b):
        k = a.shape[1]
        c = k // 4
        acc = a[:, :c] @ b[:c]
        for s in range(c, k, c):
            acc = acc + a[:, s:s + c] @ b[s:s + c]
        return torch.clamp(torch.round(acc / self.out_scale), -128, 127) * self.out_scale
