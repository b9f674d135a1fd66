"""The runner's dispatch table and request loop (run/runner.py `HANDLERS`, `serve`), on the CPU.

Every op the judge sends (its requests in run/judge_*.py and run/runner_link.py, read from their
source) has a handler. The loop, run in a thread of this process over a socket pair: it says
`ready` first; an unknown op, or one that is not a string, is answered "unknown request" and the
loop keeps serving; a handler's failure is a verdict-bearing reply; `exit` ends the loop.

Not covered: the handlers' own work (load, calls, staging, streams, profiles), which
test_judge.py and the GPU tests run in real runner processes; `load` is left out here because it
replaces torch's `load_inline` in the process it runs in.
"""

from __future__ import annotations

import ast
import socket
import threading
from pathlib import Path

import pytest
from cudice.verifier.run import channel
from cudice.verifier.run.runner import HANDLERS, serve
from cudice.verifier.run.runner_state import RunnerState

RUN = Path(__file__).resolve().parents[3] / "verifier" / "run"


def _ops_sent(path: Path) -> set[str]:
    """The `"op"` values of the dict literals in `path` (the requests it builds)."""
    ops: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if (
                    isinstance(key, ast.Constant)
                    and key.value == "op"
                    and isinstance(value, ast.Constant)
                    and isinstance(value.value, str)
                ):
                    ops.add(value.value)
    return ops


def test_every_op_the_judge_sends_has_a_handler() -> None:
    sources = [*sorted(RUN.glob("judge*.py")), RUN / "runner_link.py"]
    sent = set().union(*(_ops_sent(p) for p in sources))
    ops = {"load", "inputs", "call", "fetch", "stage", "stream", "batch", "kept", "guards", "release"}
    assert ops <= sent
    assert sent <= set(HANDLERS), sorted(sent - set(HANDLERS))


def test_the_loop_answers_unknown_and_failing_requests_and_ends_on_exit() -> None:
    pytest.importorskip("torch")
    ours, theirs = socket.socketpair()
    loop = threading.Thread(target=serve, args=(RunnerState(theirs),), daemon=True)
    loop.start()
    try:
        ready, _ = channel.recv(ours, 1 << 20)
        assert ready["op"] == "ready"
        # where its start went (no GPU here: the import, and the age of this test's process)
        assert ready["warm_s"]["import"] >= 0.0 and ready["warm_s"]["age"] > ready["warm_s"]["import"]

        channel.send(ours, {"op": "no_such_op"})
        rep, _ = channel.recv(ours, 1 << 20)
        assert rep["ok"] is False and rep["error"] == "unknown request 'no_such_op'"

        channel.send(ours, {"op": ["kept"]})  # not a string: never looked up
        rep, _ = channel.recv(ours, 1 << 20)
        assert rep["ok"] is False and rep["error"] == "unknown request ['kept']"

        channel.send(ours, {"op": "kept", "index": 3})  # nothing was timed: a failure reply
        rep, _ = channel.recv(ours, 1 << 20)
        assert rep["ok"] is False and rep["verdict"] == "runtime_error"
        assert [d["message"] for d in rep["diagnostics"]] == ["the output of timed call 3 was not kept"]

        channel.send(ours, {"op": "exit"})
        loop.join(timeout=60)
        assert not loop.is_alive()
    finally:
        ours.close()
        theirs.close()


def test_release_drops_what_the_last_phase_left_and_keeps_the_model() -> None:
    """`release` (sent after correctness and after each timing repetition) empties the trial's
    inputs and outputs, the staged sets, their seal plans and the kept outputs; the model stays."""
    torch = pytest.importorskip("torch")
    ours, theirs = socket.socketpair()
    st = RunnerState(theirs)
    model = object()
    st.model, st.inputs, st.last = model, [torch.ones(4)], torch.ones(4)
    st.sets, st.seal_plans, st.kept = [[torch.ones(4)]], [[]], {0: torch.ones(4)}
    loop = threading.Thread(target=serve, args=(st,), daemon=True)
    loop.start()
    try:
        channel.recv(ours, 1 << 20)  # ready
        channel.send(ours, {"op": "release"})
        rep, _ = channel.recv(ours, 1 << 20)
        assert rep["ok"] is True
        assert (st.inputs, st.last, st.sets, st.seal_plans, st.kept) == ([], None, [], [], {})
        assert st.model is model
        channel.send(ours, {"op": "exit"})
        loop.join(timeout=60)
    finally:
        ours.close()
        theirs.close()
