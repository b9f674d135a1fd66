# cudice: reference=references/sort_relu.py
# corpus: kind=runtime verdict=correct codes=correctness.reference_ties
# exploit: class 8 - honest: a sort that orders equal keys (the zeros relu makes) the other way round, as an unstable GPU sort may (torch.sort promises no order among equal keys); ties made inside the forward, which no move of the inputs breaks: the sort's own tie sets judge it
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.relu(x)
        n = y.shape[-1]
        v, i = torch.sort(y.flip(-1), dim=-1, descending=True, stable=True)
        return v, (n - 1) - i
