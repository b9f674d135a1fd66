# cudice: reference=references/irnn_cell.py
# corpus: kind=runtime verdict=incorrect codes=correctness.mismatch
# exploit: class 4 - never multiplies by the recurrent weight (h @ W_hh^T is replaced by h): W_hh is nn.init.eye_'s identity at construction, and a judge that drew only single-valued parameters left it the identity on every trial, so half the FLOPs were skipped and it passed; the judge draws a learnable parameter holding one nonzero value and zeros (eye_, dirac_) too
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, input_size: int = 128, hidden_size: int = 128) -> None:
        super().__init__()
        self.ih = nn.Linear(input_size, hidden_size)
        self.hh = nn.Linear(hidden_size, hidden_size, bias=False)
        nn.init.eye_(self.hh.weight)

    def forward(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        # stand-in for one GEMM kernel with a fused bias, residual and ReLU: W_hh is never read
        return torch.relu(torch.addmm(self.ih.bias, x, self.ih.weight.t()) + h)
