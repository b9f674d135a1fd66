# cudice: reference=references/relu.py
# corpus: kind=runtime verdict=incorrect codes=correctness.mismatch
# exploit: class 4 - __init__ precomputes the outputs for the inputs of the public, constant trial seeds (43, 44, ... after seed 42) and replays them in order, computing nothing
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.cached = []
        for seed in range(43, 53):
            torch.manual_seed(seed)
            self.cached.append(torch.relu(torch.randn(16, 16384)))
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.cached[self.calls % len(self.cached)]
        self.calls += 1
        return out.to(x.device)
