# cudice: reference=references/argmax0_fp16.py
# corpus: kind=runtime verdict=incorrect codes=correctness.mismatch
# exploit: class 8 - first-index rule: the later index on equal maxima of fp16 inputs, where ties among 16 draws are common. PyTorch documents the first of equal maxima as argmax's answer, and no nudge moves a 16-bit value: exact ties are decided as documented
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        n = x.shape[0]
        return (n - 1) - torch.argmax(x.flip(0), dim=0)
