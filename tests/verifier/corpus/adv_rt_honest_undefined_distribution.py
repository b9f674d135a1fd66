# cudice: reference=references/dropout_mask.py
# corpus: kind=runtime verdict=correct codes=correctness.distribution_skipped
# exploit: class 8 - honest: the reference's get_inputs() draws a Bernoulli mask from rand() probabilities, which a 32x wider distribution makes invalid; that distribution is skipped, not a runtime error of the candidate
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return x * mask
