# cudice: reference=references/softmax_small.py
# corpus: kind=runtime verdict=incorrect codes=correctness.mismatch
# exploit: class 4 - a softmax without the max subtraction wherever a 32-element probe of its input looks tame, and the robust one where it looks wide: the input distributions differed in their global statistics, so a probe told them apart (the outliers distribution hides its large values at random positions)
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        probe = x.reshape(-1)[:: max(1, x.numel() // 32)][:32]
        if (
            float(probe.abs().max()) < 20.0
        ):  # looks like randn/positive/shifted: exp cannot overflow (it can: a large value elsewhere)
            e = torch.exp(x)
            return e / e.sum(dim=1, keepdim=True)
        m = x.max(dim=1, keepdim=True).values
        e = torch.exp(x - m)
        return e / e.sum(dim=1, keepdim=True)
