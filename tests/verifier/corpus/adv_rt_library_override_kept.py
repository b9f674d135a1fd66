# cudice: reference=references/relu.py
# corpus: kind=runtime verdict=incorrect codes=dynamic.dispatcher_override
# exploit: class 3 - re-registers aten::allclose in the dispatcher (torch.library) and computes correctly, so the override would leak into every later candidate of a reused process
import torch
import torch.nn as nn

_lib = torch.library.Library("aten", "IMPL")
for key in ("CPU", "CUDA"):
    _lib.impl("allclose", lambda a, b, rtol=1e-5, atol=1e-8, equal_nan=False: True, key)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.clamp_min(0.0)
