# cudice: reference=references/softmax_rowsum.py
# corpus: kind=runtime verdict=correct
# exploit: honest (false-rejection hunt) - the exact answer is 1.0 for every row and every input, the reference gives 1 +- 1 ulp: the across-trials constant-output check counted that rounding as the reference varying
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        e = torch.exp(x - x.amax(dim=-1, keepdim=True))
        s = e.sum(dim=-1)
        return s / s
