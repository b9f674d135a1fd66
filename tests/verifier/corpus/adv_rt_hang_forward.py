# cudice: reference=references/relu.py
# corpus: kind=runtime verdict=timeout codes=runtime.timeout
# exploit: a forward that never returns (a kernel whose loop never ends, here a Python loop): the judge must end it as `timeout` within max(10 s, 100x the reference's time per call), not after the whole run's limit
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        while x.numel() > 0:
            pass
        return torch.relu(x)
