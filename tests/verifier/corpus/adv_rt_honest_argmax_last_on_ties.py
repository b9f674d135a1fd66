# cudice: reference=references/argmax0.py
# corpus: kind=runtime verdict=correct
# exploit: class 8 - honest: an argmax over dim 0 that keeps the later index on ties (a `>=` scan, as many CUDA reductions do); the structured distribution repeated dim 0's first slice exactly, so every column tied and this kernel was rejected
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[0]
        return (n - 1) - torch.argmax(x.flip(0), dim=0)
