# cudice: reference=references/relu.py
# corpus: kind=runtime verdict=incorrect codes=dynamic.input_mutated
# exploit: class 5 - honest for its first 8 calls, then computes in place on its input and returns the input (no allocation, no second buffer); the runner's own input check is skipped by then, so only the inputs' digests after each timed call show it
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
        return x.relu_()
