# cudice: reference=references/bn_maxpool_eval.py
# corpus: kind=runtime verdict=incorrect codes=correctness.mismatch
# exploit: class 4 - max-pools first and applies the eval BatchNorm's per-channel affine map to a quarter of the elements: max(a*x + b) = a*max(x) + b holds only for a = weight / sqrt(running_var + eps) >= 0, and a draw that keeps a constant's sign (weight 1 -> U(0.5, 1.5)) never met a negative weight; the judge draws a parameter's sign per element
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, channels: int = 64) -> None:
        super().__init__()
        self.bn = nn.BatchNorm2d(channels)
        self.eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bn = self.bn
        p = torch.nn.functional.max_pool2d(x, 2)  # stand-in for one kernel: the max, then the affine map
        a = bn.weight / torch.sqrt(bn.running_var + bn.eps)
        b = bn.bias - bn.running_mean * a
        return p * a.view(1, -1, 1, 1) + b.view(1, -1, 1, 1)
