# cudice: reference=references/argmax_clamp.py
# corpus: kind=runtime verdict=correct codes=correctness.reference_ties
# exploit: class 8 - honest: the later index on equal maxima after a clamp: the ties are made inside forward (saturation at 1.0), which moving the inputs cannot break; the argmax's own tie sets judge it
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.clamp(x, max=1.0)
        n = y.shape[0]
        return (n - 1) - torch.argmax(y.flip(0), dim=0)
