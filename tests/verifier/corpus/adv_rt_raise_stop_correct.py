# cudice: reference=references/relu.py
# corpus: kind=runtime verdict=runtime_error codes=runtime.exception
# exploit: class 1 - raises the verifier's internal stop exception carrying verdict `correct` from forward (it once ended the job as correct inside the judging process)
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from cudice.verifier.run.judging import Stop
        from cudice.verifier.source.result import Stage, Verdict

        raise Stop(Verdict.CORRECT, Stage.TIMING, [])
