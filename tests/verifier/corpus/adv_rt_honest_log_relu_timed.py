# cudice: reference=references/log_relu.py
# corpus: kind=runtime verdict=correct
# exploit: class 8 - honest: the reference's output is -Inf wherever the input is not positive; this kernel gives the same -Inf there (a clamp, then log) and was rejected, since any Inf in an output failed and an Inf in the reference gave NaN digests; timed on the CPU too
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp(x, min=0.0).log()
