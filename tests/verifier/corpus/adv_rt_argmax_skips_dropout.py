# cudice: reference=references/dropout_argmax.py
# corpus: kind=runtime verdict=incorrect codes=correctness.mismatch
# exploit: class 4 - skips the reference's dropout (p=0.002, training mode): argmax of x itself, which differs from the reference only at the rows whose maximum was dropped; the reference rerun on nudged inputs draws fresh masks and gives the undropped argmax there, so every difference read as a tie of the reference's. A reference that draws random numbers gets no second opinion at ties
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.argmax(x, dim=1)
