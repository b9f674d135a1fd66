"""A scripted verifier with the API of `cudice.verifier.api` (quick_check, verify).

- a line containing `vv >` -> compile error on that line (like examples/relu_broken.py)
- `SLOW_VERIFY` in the source -> the full verification sleeps 300 s (to be superseded/cancelled)
- `QUICK_BUSY=<s>` -> the quick check computes for s seconds of wall time (a preamble being built)
- `QUICK_STALL=<s>` -> the quick check sleeps s seconds, using no CPU (a stuck clangd)
- `VERIFY_DELAY=<s>` -> the full verification sleeps s seconds after its static stage
- `SPAWN_COMPILER` -> the full verification runs a "compiler" through the real
  `cudice.verifier.build.objects.run_process` (own session, a forked grandchild: `sleep 301`,
  `sleep 302`) and the quick check starts a "clangd" child (`sleep 303`) and waits on it
- otherwise correct, 2.31x on an "NVIDIA H200" (or compile-only when the config says so)
- `CUDICE_FAKE_VERIFY_LOG=<file>` in the environment -> each `verify` call appends a JSON line
  {"sha": sha256 of the source, "compile_only": ..., "build_only": ..., "pid": ...} when it starts
`verify` reports partial results after its static and compile stages, as the real one does.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import subprocess
import time
from typing import Any

from cudice.verifier.source.result import (
    Diagnostic,
    Location,
    Severity,
    Stage,
    Timing,
    Verdict,
    VerifyResult,
)


def _compile_errors(path: str, source: str) -> tuple[Diagnostic, ...]:
    for i, line in enumerate(source.splitlines(), start=1):
        if "vv >" in line:
            col = line.index("vv") + 1
            return (
                Diagnostic(
                    Severity.ERROR,
                    'identifier "vv" is undefined',
                    "compile.error",
                    Stage.COMPILE,
                    Location(path, i, col, i, col + 2),
                ),
            )
    return ()


def _seconds(marker: str, source: str) -> float:
    found = re.search(marker + r"=([0-9.]+)", source)
    return float(found.group(1)) if found else 0.0


def quick_check(path: str, source: str, checker: Any = None, *, config: Any = None) -> VerifyResult:
    if "SPAWN_COMPILER" in source:
        subprocess.Popen(["sleep", "303"]).wait()
    busy_until = time.monotonic() + _seconds("QUICK_BUSY", source)
    while time.monotonic() < busy_until:
        sum(i * i for i in range(10_000))
    time.sleep(_seconds("QUICK_STALL", source))
    errors = _compile_errors(path, source)
    if errors:
        return VerifyResult(Verdict.COMPILE_ERROR, Stage.COMPILE, path, errors)
    return VerifyResult(Verdict.CHECKED, Stage.COMPILE, path)


def verify(
    path: str,
    *,
    source: str | None = None,
    reference: Any = None,
    config: Any = None,
    on_stage: Any = None,
    cancel: Any = None,
) -> VerifyResult:
    source = source or ""
    log = os.environ.get("CUDICE_FAKE_VERIFY_LOG")
    if log:
        entry = {
            "sha": hashlib.sha256(source.encode()).hexdigest(),
            "compile_only": bool(config is not None and config.compile_only),
            "build_only": bool(config is not None and config.build_only),
            "pid": os.getpid(),
        }
        with open(log, "a") as f:
            f.write(json.dumps(entry) + "\n")
    if on_stage:
        on_stage(VerifyResult(Verdict.CHECKED, Stage.STATIC, path))
    if "SLOW_VERIFY" in source:
        time.sleep(300)
    time.sleep(_seconds("VERIFY_DELAY", source))
    if "SPAWN_COMPILER" in source:
        from cudice.verifier.build.objects import run_process

        run_process(["sh", "-c", "sleep 301 & sleep 302; wait"], 600.0, None)
    errors = _compile_errors(path, source)
    if errors:
        return VerifyResult(Verdict.COMPILE_ERROR, Stage.COMPILE, path, errors)
    if config is not None and (config.compile_only or config.build_only):
        return VerifyResult(Verdict.COMPILED, Stage.COMPILE, path, compile_only=True)
    if on_stage:
        on_stage(VerifyResult(Verdict.COMPILED, Stage.COMPILE, path))
    now = datetime.datetime.now(datetime.timezone.utc).isoformat()
    return VerifyResult(
        Verdict.CORRECT,
        Stage.TIMING,
        path,
        candidate=Timing(0.1, 0.09, 0.12, 0.095, 0.105, 30),
        reference=Timing(0.231, 0.22, 0.25, 0.225, 0.235, 30),
        speedup=2.31,
        speedup_min=2.14,
        speedup_max=2.47,
        num_correct_trials=5,
        num_trials=5,
        gpu_name="NVIDIA H200",
        measured_at=now,
    )
