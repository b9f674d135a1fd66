# cudice: reference=references/first_top_level.py
# corpus: kind=runtime verdict=incorrect codes=correctness.mismatch
# exploit: class 8 - first-index rule: the last position at the highest of five levels where the reference's argmax means the first (PyTorch documents the first of equal maxima); the levels are ties the forward makes, which no move of the inputs breaks
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        level = (x > 0).float() + (x > 0.5).float() + (x > 1).float() + (x > 1.5).float()
        n = level.shape[1]
        return (n - 1) - torch.argmax(level.flip(1), dim=1)
