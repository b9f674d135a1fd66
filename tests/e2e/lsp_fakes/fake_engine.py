"""A scripted engine: emits one token per `CUDICE_FAKE_TOKEN_DELAY_S`, obeys should_stop.

Trigger words in the reference / prefix: CUDICE_TEST_CRASH (the process exits mid-job),
CUDICE_TEST_HANG (ignores should_stop: the server must kill it). A checkpoint path containing
"broken" fails to load. It reports with the engine's own records (`cudice.model.generation`).
"""

from __future__ import annotations

import os
import time
from typing import Any

from cudice.model.generation import Generation, Progress

FAKE_KERNEL = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = """
__global__ void fake_kernel(const float* x, float* out, int n) { }
"""

class ModelNew(nn.Module):
    def forward(self, x):
        return x
'''
FAKE_MIDDLE = "\n// written by the fake engine\n__global__ void fake_kernel(float* x) { x[0] = 1.0f; }\n"


class FakeEngine:
    def __init__(self, path: str) -> None:
        self.path = path

    def _run(self, trigger: str, on_progress: Any, should_stop: Any) -> tuple[int, float, bool]:
        delay = float(os.environ.get("CUDICE_FAKE_TOKEN_DELAY_S", "0.01"))
        num = int(os.environ.get("CUDICE_FAKE_NUM_TOKENS", "20"))
        hang = "CUDICE_TEST_HANG" in trigger
        t0 = time.perf_counter()
        for i in range(1, num + 1):
            if "CUDICE_TEST_CRASH" in trigger and i == 3:
                os._exit(7)
            if should_stop() and not hang:
                return i, time.perf_counter() - t0, True
            time.sleep(delay)
            if on_progress is not None:
                on_progress(Progress(i, (i + 1) // 2, time.perf_counter() - t0, "x" * i))
        return num, time.perf_counter() - t0, False

    def generate_kernel(
        self, reference_source: str, config: Any, on_progress: Any = None, should_stop: Any = None
    ) -> Generation:
        n, s, stopped = self._run(reference_source, on_progress, should_stop)
        return Generation(FAKE_KERNEL, None, n, (n + 1) // 2, 2.0, s, stopped)

    def infill(
        self,
        prefix: str,
        suffix: str,
        pytorch_code: str,
        config: Any,
        on_progress: Any = None,
        should_stop: Any = None,
    ) -> Generation:
        n, s, stopped = self._run(prefix, on_progress, should_stop)
        return Generation(prefix + FAKE_MIDDLE + suffix, FAKE_MIDDLE, n, (n + 1) // 2, 2.0, s, stopped)


LOADS: list[dict[str, Any]] = []  # what load_engine was asked for, for in-process tests


def load_engine(
    path: str, device: str = "auto", dtype: str = "auto", fast: bool | None = None, freeze: bool = False
) -> FakeEngine:
    LOADS.append({"path": path, "device": device, "dtype": dtype, "fast": fast})
    if "broken" in path:
        raise ValueError(f"{path} is not a checkpoint (fake engine)")
    time.sleep(float(os.environ.get("CUDICE_FAKE_LOAD_S", "0.05")))
    return FakeEngine(path)


def sampler_config(settings: Any) -> Any:
    return settings
