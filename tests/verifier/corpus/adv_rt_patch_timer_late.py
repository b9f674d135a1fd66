# cudice: reference=references/relu.py
# corpus: kind=runtime verdict=incorrect codes=dynamic.timer_patched
# exploit: class 5 - computes correctly but, once past the correctness trials, replaces time.perf_counter and torch.cuda.Event.elapsed_time (after the single guard check of the old worker) to shrink its timings
import time

import torch
import torch.nn as nn

_real = time.perf_counter


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls == 10:
            time.perf_counter = lambda: _real() / 3.0
            torch.cuda.Event.elapsed_time = lambda self, end: 0.001
        return torch.relu(x)
