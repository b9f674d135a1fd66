# cudice: reference=references/first_hit.py
# corpus: kind=runtime verdict=incorrect codes=correctness.mismatch
# exploit: class 4 - returns the last element above 1.0 where the reference's argmax over an int mask means the first (torch.argmax documents the first maximal index): a mask's ties are its answer, yet every hit counted as another index of an equal value under the argmax's tie set; an op that selects from integers, bools or two values gets no tie set
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        m = (x > 1.0).to(torch.int32)
        n = m.shape[1]
        return (n - 1) - torch.argmax(m.flip(1), dim=1)
