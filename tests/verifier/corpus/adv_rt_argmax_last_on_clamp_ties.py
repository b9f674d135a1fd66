# cudice: reference=references/argmax_clamp.py
# corpus: kind=runtime verdict=incorrect codes=correctness.mismatch
# exploit: class 8 - first-index rule: the later index on equal maxima after a clamp. PyTorch documents the first of equal maxima as argmax's answer; these ties are made inside forward (saturation at 1.0), so no move of the inputs breaks them and the first index is the only right answer (a kernel may break only near-ties, which the nudges find)
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.clamp(x, max=1.0)
        n = y.shape[0]
        return (n - 1) - torch.argmax(y.flip(0), dim=0)
