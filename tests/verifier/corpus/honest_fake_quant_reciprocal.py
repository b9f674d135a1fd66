# cudice: reference=references/fake_quant.py
# corpus: kind=runtime verdict=correct
# honest: the usual CUDA fake-quant kernel, rintf(x * inv_scale) with inv_scale = 1/scale computed
# once on the host (exactly what PyTorch's own fake_quantize_per_tensor_affine kernel does).
# x * (1/s) and x / s differ by one ulp in a few elements (a few in 16M), and where that ulp straddles a .5
# boundary the rounded value moves by one quantisation step.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale=0.05):
        super().__init__()
        self.scale = scale
        self.inv_scale = 1.0 / scale

    def forward(self, x):
        # stand-in for: out[i] = fminf(fmaxf(rintf(x[i] * inv_scale), -128.f), 127.f) * scale
        return torch.clamp(torch.round(x * self.inv_scale), -128, 127) * self.scale
