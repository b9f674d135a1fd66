# cudice: reference=references/bce_probs.py
# corpus: kind=runtime verdict=correct codes=correctness.distribution_skipped
# exploit: honest (false-rejection hunt) - BCE on torch.rand targets: the judge's drawn distributions move the probabilities out of [0, 1], where the reference's own forward raises; that ended the job as a crash, and now skips those distributions as when get_inputs() refuses them
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        return F.binary_cross_entropy(predictions, targets)
