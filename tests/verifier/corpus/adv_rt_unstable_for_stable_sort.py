# cudice: reference=references/stable_group.py
# corpus: kind=runtime verdict=incorrect codes=correctness.mismatch
# exploit: class 4 - the reference groups tokens by expert with argsort(stable=True) (token order kept within an expert); this kernel returns each expert's tokens in reverse order, as an atomic scatter would: a stable sort has one right order, yet it was recorded as a selecting op whose ties any order may break
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, scores):
        expert = torch.argmax(scores, dim=1)
        n = expert.shape[0]
        return (n - 1) - torch.argsort(expert.flip(0), stable=True)
