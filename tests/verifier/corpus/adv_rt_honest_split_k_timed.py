# cudice: reference=references/matmul.py
# corpus: kind=runtime verdict=correct
# exploit: class 8 - honest: a matmul summed over K in 8 chunks (another summation order, fp32 throughout); timed on the CPU too, so the timed calls' digests, whose bound follows the fp32 rule, must accept honest rounding
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        k = A.shape[1] // 8
        out = A[:, :k] @ B[:k]
        for i in range(k, A.shape[1], k):
            out = out + A[:, i : i + k] @ B[i : i + k]
        return out
