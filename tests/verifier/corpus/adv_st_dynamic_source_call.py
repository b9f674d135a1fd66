# cudice: reference=references/relu.py
# corpus: kind=static verdict=static_violation codes=static.dynamic_source
# exploit: the CUDA source is the result of a function call (decoded at import), so the static C++ checks never see the torch::relu it hides
import base64

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline


def _source() -> str:
    hidden = base64.b64decode(b"dG9yY2g6OlRlbnNvciByZWx1X2N1ZGEodG9yY2g6OlRlbnNvciB4KSB7IHJldHVybiB0b3JjaDo6cmVsdSh4KTsgfQ==")
    return "#include <torch/extension.h>\n__global__ void k() {}\n" + hidden.decode()


ext = load_inline(name="adv_st_dynamic_source_call", cpp_sources="torch::Tensor relu_cuda(torch::Tensor x);",
                  cuda_sources=_source(), functions=["relu_cuda"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.relu_cuda(x)
