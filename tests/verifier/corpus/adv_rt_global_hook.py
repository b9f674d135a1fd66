# cudice: reference=references/relu.py
# corpus: kind=runtime verdict=incorrect codes=correctness.mismatch
# exploit: class 1 - a global forward hook captures the reference's output when the reference runs in the same process and returns it as ModelNew's
import torch
import torch.nn as nn

_seen = {}


def _capture(module, args, output):
    if type(module).__name__ == "Model":
        _seen["out"] = output.detach().clone()
    elif type(module).__name__ == "ModelNew" and "out" in _seen:
        return _seen["out"]
    return None


torch.nn.modules.module.register_module_forward_hook(_capture)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(x).fill_(1.0)
