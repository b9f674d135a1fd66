"""The real engine (`cudice.model.engine`, here on a tiny random checkpoint) with hooks the
batching tests hold on to, set through the environment of the server process:

- `CUDICE_TEST_FORWARD_GATE=<file>`: while that file exists, every model forward waits (up to
  120 s) and `<file>.held` is written, so tests can make requests meet in the batching engine's
  queue before any of them is decoded;
- `CUDICE_TEST_FORWARD_DELAY_S=<s>`: every forward sleeps that long (a generation that lasts);
- `CUDICE_TEST_ENCODE_LOG=<file>`: every prompt encoding (one per job the worker takes) appends a
  line, so tests know a job reached the worker;
- `CUDICE_TEAM_LOAD_LOG`: every load appends a line, as in team_engine.py.

Tokens are the real engine's: the hooks only wait."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from typing import Any

from cudice.model.engine import Engine
from cudice.model.engine import load_engine as real_load_engine

__all__ = ["load_engine"]

GATE_BOUND_S = 120.0


def _hold(module: Any, args: Any) -> None:
    gate = os.environ.get("CUDICE_TEST_FORWARD_GATE")
    if gate and os.path.exists(gate):
        with open(gate + ".held", "w") as f:
            f.write(str(os.getpid()))
        deadline = time.monotonic() + GATE_BOUND_S
        while os.path.exists(gate) and time.monotonic() < deadline:
            time.sleep(0.01)
    delay = float(os.environ.get("CUDICE_TEST_FORWARD_DELAY_S", "0") or 0)
    if delay > 0:
        time.sleep(delay)


def load_engine(
    path: str, device: str = "auto", dtype: str = "auto", fast: bool | None = None, freeze: bool = False
) -> Engine:
    log = os.environ.get("CUDICE_TEAM_LOAD_LOG")
    if log:
        with open(log, "a") as f:
            f.write(json.dumps({"path": path, "pid": os.getpid(), "fast": fast}) + "\n")
    engine = real_load_engine(path, device, dtype, fast=fast, freeze=freeze)
    engine.loaded.model.model.embed_tokens.register_forward_pre_hook(_hold)  # every forward embeds
    encode_log = os.environ.get("CUDICE_TEST_ENCODE_LOG")
    if encode_log:
        encode = engine.encode

        def logged(text: str) -> list[int]:
            ids: Sequence[int] = encode(text)
            with open(encode_log, "a") as f:
                f.write(json.dumps({"chars": len(text)}) + "\n")
            return list(ids)

        engine.encode = logged  # type: ignore[method-assign]
    return engine
