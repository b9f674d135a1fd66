# cudice: reference=references/relu.py
# corpus: kind=runtime verdict=incorrect codes=correctness.mismatch
# exploit: fourth runtime red team - the comment names the ReLU reference, but the file also defines its own identity `Model` and `get_inputs`; the same-file `Model` used to win over the comment without a word, so a copy was judged against a reference the candidate wrote itself
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x.clone()


def get_inputs():
    return [torch.randn(16, 16384)]


def get_init_inputs():
    return []


class ModelNew(nn.Module):
    def forward(self, x):
        return x.clone()  # stand-in for a copy kernel: not ReLU
