# cudice: reference=references/relu.py
# corpus: kind=runtime verdict=incorrect codes=dynamic.global_hook
# exploit: class 1 - computes correctly but leaves a global forward hook installed, ready to replace the output of whatever model runs next in the process (the reference, or a later candidate)
import torch
import torch.nn as nn


def _swap(module, args, output):
    return None  # harmless here; a real attack returns a captured tensor for the reference


torch.nn.modules.module.register_module_forward_hook(_swap)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)
