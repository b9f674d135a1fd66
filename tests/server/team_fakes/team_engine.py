"""The scripted engine of tests/e2e/lsp_fakes, plus what the multi-client tests observe: every
`load_engine` call appends a line to `$CUDICE_TEAM_LOAD_LOG` (how many times the model was loaded),
and a reference containing `SLOW_GENERATE` generates one token per 0.1 s for up to 60 s, stopping
as soon as it is cancelled."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from lsp_fakes.fake_engine import FakeEngine, sampler_config

__all__ = ["TeamEngine", "load_engine", "sampler_config"]


class TeamEngine(FakeEngine):
    def _run(self, trigger: str, on_progress: Any, should_stop: Any) -> tuple[int, float, bool]:
        if "SLOW_GENERATE" not in trigger:
            return super()._run(trigger, on_progress, should_stop)
        t0 = time.perf_counter()
        for i in range(1, 601):
            if should_stop():
                return i, time.perf_counter() - t0, True
            time.sleep(0.1)
            if on_progress is not None:
                from cudice.model.generation import Progress

                on_progress(Progress(i, (i + 1) // 2, time.perf_counter() - t0, "x" * i))
        return 600, time.perf_counter() - t0, False


def load_engine(
    path: str, device: str = "auto", dtype: str = "auto", fast: bool | None = None, freeze: bool = False
) -> TeamEngine:
    log = os.environ.get("CUDICE_TEAM_LOAD_LOG")
    if log:
        with open(log, "a") as f:
            f.write(json.dumps({"path": path, "pid": os.getpid()}) + "\n")
    time.sleep(0.05)
    return TeamEngine(path)
