# cudice: reference=references/relu.py
# corpus: kind=runtime verdict=incorrect codes=correctness.timed_call_digest
# exploit: class 5 - honest for its first 8 calls (more than the correctness trials and the repeated call), then returns a cheap wrong answer: only checking timed calls catches it
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls <= 8:
            return torch.relu(x)
        return torch.empty_like(x)
