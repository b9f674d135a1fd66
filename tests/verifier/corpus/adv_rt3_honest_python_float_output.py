# cudice: reference=references/tuple_float.py
# corpus: kind=runtime verdict=correct
# exploit: honest (false-rejection hunt) - the reference returns (tensor, python float): a plain float output was refused as a lazy object; it is compared within the tolerance
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return torch.mul(x, self.scale), self.scale
