# cudice: reference=references/argmax0_tied.py
# corpus: kind=runtime verdict=correct codes=correctness.reference_ties
# exploit: class 8 - honest: an argmax over dim 0 that keeps the later index on ties (a `>=` scan, as many CUDA reductions do), on inputs whose get_inputs() ties 64 columns' maxima; integer outputs were held to equality, so every run rejected it (and random fp32 draws tie at a column's maximum in about 1 % of runs); fp32 values tied exactly are near-ties (moved by 2^-16 either may win), so the nudged reruns of the reference accept the later index
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[0]
        return (n - 1) - torch.argmax(x.flip(0), dim=0)
