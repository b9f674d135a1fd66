"""What a runner's request handlers share (run/runner.py): one small state, the reply, failures.

`RunnerState` is what one runner process keeps between the judge's requests: its socket and
role, the model it loaded and where it was written, the current inputs and the last outputs, the
staged sets of the timed calls with their seal plans and kept outputs, and the snapshots the
`guards` request compares against. The handlers (run/runner.py, run/runner_timed.py) are plain
functions over it. `RunnerFailure` ends a request with a verdict-bearing error reply (the process
keeps serving); `guard` and `sync` turn the candidate's exceptions and sticky CUDA errors into one.

Not covered: the request loop and its dispatch table (run/runner.py). Nothing here is trusted by
the judge: the candidate's Python runs in this process and can change any of it
(docs/anticheat.md).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cudice.verifier.run import channel
from cudice.verifier.source.result import Diagnostic, Location, Severity, Stage, Verdict

if TYPE_CHECKING:
    import torch
    from cudice.verifier.run.seal import Plan


@dataclass(slots=True)
class RunnerState:
    """What one runner process holds between requests; one per process."""

    sock: socket.socket
    role: str = "candidate"
    model: Any = None
    inputs: list[Any] = field(default_factory=list)
    last: Any = None
    device: str = "cpu"
    where: Location = field(default_factory=lambda: Location("<candidate>", 1, 1))
    guards: dict[str, object] = field(default_factory=dict)
    dispatch: dict[str, str] = field(default_factory=dict)
    hooks: dict[str, int] = field(default_factory=dict)
    flush: torch.Tensor | None = None
    sets: list[list[Any]] = field(default_factory=list)  # staged input sets of the timed calls
    seal_plans: list[list[Plan]] = field(default_factory=list)  # per staged set, its seal.Plan list
    # zeroed (calls, 4 * DIGEST_SLOTS) float64 during a stream
    digest_room: torch.Tensor | None = None
    # every output of the timed calls since the last staging, by set
    kept: dict[int, Any] = field(default_factory=dict)
    trace: list[list[Any]] = field(default_factory=list)  # per traced timed call: host stamps and CUDA events
    # the GPU buffer of the last outputs offered to the judge (run/shared_staging.py), released
    # when the next request arrives: the judge has cloned what it needs by then
    offered: Any = None


class RunnerFailure(Exception):
    """Ends a request with a verdict-bearing error reply (the process keeps serving)."""

    def __init__(self, verdict: str, diagnostics: list[Diagnostic], error: str | None = None) -> None:
        super().__init__(verdict)
        self.verdict, self.diagnostics, self.error = verdict, diagnostics, error


def reply(st: RunnerState, header: dict[str, Any], blobs: list[memoryview] | None = None) -> None:
    channel.send(st.sock, header, blobs or [])


def received(st: RunnerState, req: dict[str, Any], blobs: list[bytearray], key: str) -> tuple[bool, Any]:
    """The value of `req[key]`: from the request's blobs, or (`"shared"` in `req`) cloned out of
    the GPU buffer whose fd follows the request (run/shared_staging.py `take`; the fd is always
    read, so the next message starts where it should, and always closed). (True, value), or
    (False, None) where this process cannot map the buffer: it has then answered
    `"staged": false`, and the judge sends the value over the socket."""
    if "shared" not in req:
        return True, channel.decode(req[key], blobs, st.device)
    fd = channel.recv_fd(st.sock)
    handed = False  # `take` closes the descriptor once called
    try:
        from cudice.verifier.run import shared_staging

        spec = req["shared"]
        size = spec.get("size") if isinstance(spec, dict) else None
        tree = req[key]
        handed = True
        return True, shared_staging.take(fd, size, tree, st.device)
    except Exception as exc:
        reply(st, {"ok": True, "staged": False, "why": f"{type(exc).__name__}: {exc}"[:500]})
        return False, None
    finally:
        if not handed:
            os.close(fd)


def guard(st: RunnerState, fn: Callable[[], Any], stage: Stage) -> Any:
    from cudice.verifier.run.judging import Stop, call_or_stop

    try:
        return call_or_stop(fn, stage, st.where)
    except Stop as stop:
        raise RunnerFailure(stop.verdict.value, stop.diagnostics, stop.error) from None


def sync(st: RunnerState) -> None:
    import torch

    if not st.device.startswith("cuda"):
        return
    try:
        torch.cuda.synchronize()
    except Exception as exc:  # a sticky CUDA error (illegal address...) poisons this process
        raise RunnerFailure(
            Verdict.RUNTIME_ERROR.value,
            [
                Diagnostic(
                    Severity.ERROR,
                    f"CUDA error after the kernel: {exc}".strip(),
                    "runtime.cuda_error",
                    Stage.CORRECTNESS,
                    st.where,
                )
            ],
            str(exc),
        ) from None
