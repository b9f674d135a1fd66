"""Reference: binary cross entropy on sigmoid predictions and soft [0,1] targets (KernelBench-like)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return F.binary_cross_entropy(predictions, targets)


batch_size = 128
dim = 1024


def get_inputs():
    return [torch.rand(batch_size, dim), torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
