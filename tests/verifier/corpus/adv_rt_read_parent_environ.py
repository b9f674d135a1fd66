# cudice: reference=references/relu.py
# corpus: kind=runtime verdict=correct
# exploit: class 7 - reads /proc/<pid>/environ and cmdline of its parent and of every process it can see, looking for secrets; if it finds one it signals it by returning garbage (so `correct` proves it saw none)
import os

import torch
import torch.nn as nn

SECRET = b"CUDICE_TEST_SECRET_TOKEN"
found = False
for pid in [str(os.getppid())] + [p for p in os.listdir("/proc") if p.isdigit()]:
    for what in ("environ", "cmdline"):
        try:
            found = found or SECRET in open(f"/proc/{pid}/{what}", "rb").read()
        except OSError:
            pass


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(x) if found else torch.relu(x)
