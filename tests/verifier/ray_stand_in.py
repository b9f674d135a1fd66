"""A `verify_fn` for the Ray tests that waits at a gate before running the real `verify()`.

Static-check verdicts take milliseconds, too short to kill a worker "mid-run" or to be sure
that two workers are busy at once. `Gate` makes each task announce itself with a file
`started-<pid>-<job>` in a folder and wait until `quorum` tasks have started (or, with
`hold`, until the test creates the file `go`), then it verifies for real — so the verdicts
the tests compare are the verifier's own. A set cancel token ends the wait and leaves a file
`cancelled-<job>`.

Ray workers import this module by name (the tests put this folder on PYTHONPATH).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from cudice.verifier.api import verify
from cudice.verifier.source.result import VerifyResult

WAIT_S = 180.0  # upper bound of a wait; the test fails on its own timeouts well before


class Gate:
    def __init__(self, folder: str | Path, quorum: int, hold: bool = False) -> None:
        self.folder, self.quorum, self.hold = str(folder), quorum, hold

    def __call__(self, path: str, **kwargs: Any) -> VerifyResult:
        folder = Path(self.folder)
        (folder / f"started-{os.getpid()}-{Path(path).stem}-{time.monotonic_ns()}").touch()
        cancel = kwargs.get("cancel")
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            if cancel is not None and cancel.is_set():
                (folder / f"cancelled-{Path(path).stem}").touch()
                break
            if (folder / "go").exists():
                break
            if not self.hold and len(list(folder.glob("started-*"))) >= self.quorum:
                break
            time.sleep(0.05)
        return verify(path, **kwargs)


def started(folder: str | Path) -> list[tuple[int, str]]:
    """(worker pid, candidate stem) of every task that reached the gate, oldest first."""
    rows = []
    for f in Path(folder).glob("started-*"):
        _, pid, rest = f.name.split("-", 2)
        stem, stamp = rest.rsplit("-", 1)
        rows.append((int(stamp), int(pid), stem))
    return [(pid, stem) for _, pid, stem in sorted(rows)]


def raising_verify(path: str, **kwargs: Any) -> VerifyResult:
    """A verify_fn with a bug: the backend must hand the exception to the caller."""
    raise ValueError("verify exploded")


class GpuProbe:
    """A verify_fn whose run stage is `ray_gpu_stand_in` (a child that notes its GPU and any overlap).

    It sends one run through the `run_child` the backend gives it, as `verify()` does after a
    build, then returns the real (compile-only) verdict.
    """

    def __init__(self, folder: str | Path) -> None:
        self.folder = str(folder)

    def __call__(self, path: str, **kwargs: Any) -> VerifyResult:
        outcome = kwargs["run_child"](
            {"folder": self.folder, "name": Path(path).stem},
            timeout_s=WAIT_S,
            memory_limit_mib=4096,
            max_output_bytes=4096,
            module="ray_gpu_stand_in",
        )
        if outcome.result != {"ran": True}:
            raise RuntimeError(f"the GPU stand-in child failed: {outcome}")
        rest = {k: v for k, v in kwargs.items() if k in ("source", "reference", "config")}
        return verify(path, **rest)
