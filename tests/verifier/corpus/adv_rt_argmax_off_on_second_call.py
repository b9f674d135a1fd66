# cudice: reference=references/argmax_rows.py
# corpus: kind=runtime verdict=incorrect codes=dynamic.nondeterministic
# exploit: class 8 - a discrete output right on a trial's first call and shifted on a second call with the same inputs (a race in the index write, modelled by a content check): the determinism check compared indices within 1 % of each other (indices near 2,000 off by one passed); the second call is now judged against the reference, up to its ties
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.last = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        idx = torch.argmax(x, dim=1)
        key = float(x.sum())
        repeated = key == self.last
        self.last = key
        if repeated:  # the second call on the same inputs: large indices off by one
            idx = torch.where(idx > 100, idx - 1, idx)
        return idx
