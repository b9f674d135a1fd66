"""`cudice-lsp --tcp --multi` serves generations through the continuous-batching engine.

End to end on the CPU: a real server process over real TCP sockets (test_team.py's harness), the
real engine on a tiny random checkpoint (float32, greedy) wrapped by team_fakes/gated_engine.py,
whose gate holds every forward until the test lets go, so requests of several sessions meet in the
engine's queue before any is decoded and then decode in one batch:

1. two sessions generating at once each get exactly what they get alone;
2. a cancel in one session stops its row only: the other session's generation completes, unchanged;
3. a session that disconnects has only its own row cancelled;
4. beyond the engine's capacity (rows + queue) a generation is refused with the per-session
   bound's kind of answer (`{"ok": false, "reason": ...}` + a warning), never left waiting;
5. the worker itself turns the engine's `QueueFull` into `ModelBusy` (in process, no LSP).

Waits are on notifications, files the engine writes and process logs, with generous bounds.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from cudice.server.settings import Settings
from cudice.server.workers.model import BatchOptions, LoadRequest, ModelBusy, ModelWorker
from pygls.uris import to_fs_path
from test_team import (
    E2E,
    HERE,
    REPO,
    WAIT_S,
    Editor,
    TeamServer,
    _jsonl,
    _open,
    _start,
    _stop,
    _tokens_reported,
    _until,
    _workspace,
)

pytestmark = [pytest.mark.timeout(400)]

NEW_TOKENS = 48  # per answer: short, and enough blocks for rows to decode side by side


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from cudice.model.tiny import make_tiny

    return make_tiny(tmp_path_factory.mktemp("tiny_sdar"), sdar_layout=True)


def _engine_env(tmp: Path) -> dict[str, str]:
    return {
        "CUDICE_ENGINE_MODULE": "team_fakes.gated_engine",
        "CUDICE_TEST_FORWARD_GATE": str(tmp / "gate"),
        "CUDICE_TEST_ENCODE_LOG": str(tmp / "encodes.jsonl"),
    }


@pytest.fixture
async def batched(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[TeamServer]:
    server = await _start(tmp_path, env_extra={**_engine_env(tmp_path), **getattr(request, "param", {})})
    try:
        yield server
    finally:
        await _stop(server)


class Gate:
    """The forward gate of gated_engine.py in `tmp`."""

    def __init__(self, tmp: Path) -> None:
        self.path = tmp / "gate"
        self.held = tmp / "gate.held"
        self.encodes = tmp / "encodes.jsonl"

    def close(self) -> None:
        self.held.unlink(missing_ok=True)
        self.path.write_text("")

    def open(self) -> None:
        self.path.unlink(missing_ok=True)

    def jobs_taken(self) -> int:
        """Jobs the worker has encoded (taken from the server) so far."""
        return len(_jsonl(self.encodes))


async def _session(team: TeamServer, tmp: Path, name: str, ckpt: Path, new_tokens: int) -> tuple[Editor, str]:
    """A connected editor with its own workspace, whose reference ends with a comment naming it
    (so each session's prompt, and answer, differs); the shared model loaded."""
    root = _workspace(tmp, name)
    ref = root / "relu.py"
    ref.write_text(ref.read_text() + f"\n# session {name}\n")
    options = {
        "model": {"path": str(ckpt), "device": "cpu", "dtype": "float32"},
        "sampler": {"maxNewTokens": new_tokens},
    }
    editor = await team.connect(root, options)
    await editor.wait_model("ready", WAIT_S)
    _open(editor, ref.as_uri(), ref.read_text())
    return editor, ref.as_uri()


async def _generate(editor: Editor, ref_uri: str) -> dict[str, Any]:
    return dict(await asyncio.wait_for(editor.command("cudice.generateKernel", ref_uri, "Model"), WAIT_S))


async def _answer(editor: Editor, ref_uri: str) -> str:
    """Generate and return the written file's text."""
    got = await _generate(editor, ref_uri)
    assert got["ok"] is True, got
    return Path(str(to_fs_path(got["uri"]))).read_text()


def _batch_rows(team: TeamServer) -> list[int]:
    """The `batch_rows` of every finished model job in the server log."""
    return [
        int(line.rsplit("up to ", 1)[1].split()[0])
        for line in team.log
        if "model job" in line and "in a batch of up to" in line
    ]


async def test_two_sessions_generating_at_once_each_get_what_they_get_alone(
    batched: TeamServer, tmp_path: Path, ckpt: Path
) -> None:
    gate = Gate(tmp_path)
    a, ref_a = await _session(batched, tmp_path, "a", ckpt, NEW_TOKENS)
    b, ref_b = await _session(batched, tmp_path, "b", ckpt, NEW_TOKENS)
    assert len(_jsonl(batched.load_log)) == 1  # one model for both sessions
    alone_a = await _answer(a, ref_a)
    alone_b = await _answer(b, ref_b)
    assert alone_a != alone_b  # different prompts, different answers: a mix-up would show
    taken = gate.jobs_taken()
    gate.close()
    together_a = asyncio.ensure_future(_answer(a, ref_a))
    assert await _until(gate.held.exists)  # A's first forward waits at the gate
    together_b = asyncio.ensure_future(_answer(b, ref_b))
    assert await _until(lambda: gate.jobs_taken() >= taken + 2)  # B reached the engine too
    gate.open()
    assert await asyncio.wait_for(together_a, WAIT_S) == alone_a
    assert await asyncio.wait_for(together_b, WAIT_S) == alone_b
    # they were decoded in one batch (the worker logs each job's largest batch)
    assert await _until(lambda: len(_batch_rows(batched)) >= 4), batched.log[-20:]
    assert _batch_rows(batched)[:2] == [1, 1] and sorted(_batch_rows(batched)[2:]) == [2, 2]


@pytest.mark.parametrize("batched", [{"CUDICE_TEST_FORWARD_DELAY_S": "0.02"}], indirect=True)
async def test_a_cancel_stops_only_that_session_s_row(
    batched: TeamServer, tmp_path: Path, ckpt: Path
) -> None:
    a, ref_a = await _session(batched, tmp_path, "a", ckpt, 400)  # long: still running when cancelled
    b, ref_b = await _session(batched, tmp_path, "b", ckpt, NEW_TOKENS)
    alone_b = await _answer(b, ref_b)
    slow = asyncio.ensure_future(_generate(a, ref_a))
    await a.wait_for("$/progress", lambda: _tokens_reported(a), WAIT_S)
    b.client.progress_reports.clear()
    fast = asyncio.ensure_future(_answer(b, ref_b))
    await b.wait_for("$/progress", lambda: _tokens_reported(b), WAIT_S)  # B's row decodes beside A's
    await a.command("cudice.cancel")
    got = await asyncio.wait_for(slow, WAIT_S)
    assert got["ok"] is False and got["reason"] == "cancelled", got
    assert await asyncio.wait_for(fast, WAIT_S) == alone_b
    assert not any("cancel" in m.message for m in b.client.messages), b.client.messages


@pytest.mark.parametrize("batched", [{"CUDICE_TEST_FORWARD_DELAY_S": "0.02"}], indirect=True)
async def test_a_disconnect_cancels_only_that_session_s_row(
    batched: TeamServer, tmp_path: Path, ckpt: Path
) -> None:
    a, ref_a = await _session(batched, tmp_path, "a", ckpt, NEW_TOKENS)
    c, ref_c = await _session(batched, tmp_path, "c", ckpt, 400)
    alone_a = await _answer(a, ref_a)
    done_before = len(_batch_rows(batched))
    leaving = asyncio.ensure_future(_generate(c, ref_c))
    await c.wait_for("$/progress", lambda: _tokens_reported(c), WAIT_S)
    a.client.progress_reports.clear()
    staying = asyncio.ensure_future(_answer(a, ref_a))
    await a.wait_for("$/progress", lambda: _tokens_reported(a), WAIT_S)  # both rows decode
    await batched.disconnect(c)
    leaving.cancel()
    assert await asyncio.wait_for(staying, WAIT_S) == alone_a
    # C's job ended cancelled, long before its 400 tokens, and wrote nothing
    assert await _until(lambda: any("cancelled" in line and "model job" in line for line in batched.log))
    assert await _until(lambda: len(_batch_rows(batched)) >= done_before + 2)
    assert (tmp_path / "c" / "relu_cuda.py").read_text() == (REPO / "examples" / "relu_cuda.py").read_text()


@pytest.mark.parametrize(
    "batched", [{"CUDICE_TEAM_MAX_BATCH": "1", "CUDICE_TEAM_MAX_QUEUE": "1"}], indirect=True
)
async def test_beyond_the_engine_s_capacity_a_generation_is_refused_with_a_message(
    batched: TeamServer, tmp_path: Path, ckpt: Path
) -> None:
    gate = Gate(tmp_path)
    a, ref_a = await _session(batched, tmp_path, "a", ckpt, NEW_TOKENS)
    b, ref_b = await _session(batched, tmp_path, "b", ckpt, NEW_TOKENS)
    c, ref_c = await _session(batched, tmp_path, "c", ckpt, NEW_TOKENS)
    gate.close()
    first = asyncio.ensure_future(_answer(a, ref_a))  # decoding (held at the gate)
    assert await _until(gate.held.exists)
    second = asyncio.ensure_future(_answer(b, ref_b))  # waiting in the engine's queue
    assert await _until(lambda: gate.jobs_taken() >= 2)
    refused = await _generate(c, ref_c)  # answered at once, while the gate still holds
    assert refused["ok"] is False and "the shared model is busy" in refused["reason"], refused
    assert "CUDICE_TEAM_MAX_BATCH" in refused["reason"]
    assert any("the shared model is busy" in m.message for m in c.client.messages), c.client.messages
    assert not first.done() and not second.done()
    gate.open()
    await asyncio.wait_for(first, WAIT_S)
    await asyncio.wait_for(second, WAIT_S)
    assert (await _generate(c, ref_c))["ok"] is True  # room again


async def test_the_worker_turns_the_engine_s_full_queue_into_model_busy(tmp_path: Path, ckpt: Path) -> None:
    gate = Gate(tmp_path)
    env = {
        **os.environ,
        **_engine_env(tmp_path),
        "PYTHONPATH": os.pathsep.join([str(E2E), str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    worker = ModelWorker(
        on_state=lambda state, message: None,
        on_notice=lambda message: None,
        env=env,
        batch=BatchOptions(max_batch=1, max_queue=1, num_pages=256),
    )
    settings = dataclasses.asdict(Settings(sampler_max_new_tokens=16))
    payload = {"reference_source": (REPO / "examples" / "relu.py").read_text(), "settings": settings}
    try:
        assert await worker.load(LoadRequest(str(ckpt), "cpu", "float32"))
        assert worker.batched and worker.capacity == 2
        gate.close()
        cancels = [asyncio.Event(), asyncio.Event()]
        running = asyncio.ensure_future(worker.run("generate", payload, cancel=cancels[0]))
        assert await _until(gate.held.exists)
        queued = asyncio.ensure_future(worker.run("generate", payload, cancel=cancels[1]))
        assert await _until(lambda: gate.jobs_taken() >= 2)
        with pytest.raises(ModelBusy, match=r"the shared model is busy.*queue is full"):
            await asyncio.wait_for(worker.run("generate", payload, cancel=asyncio.Event()), WAIT_S)
        for cancel in cancels:
            cancel.set()
        gate.open()
        results = await asyncio.wait_for(asyncio.gather(running, queued), WAIT_S)
        assert all(r.cancelled for r in results), results
    finally:
        gate.open()
        await worker.shutdown()


def test_batch_options_come_from_the_environment() -> None:
    assert BatchOptions.from_env({}) == BatchOptions()
    assert BatchOptions.from_env({"CUDICE_TEAM_BATCHING": "0"}) is None
    got = BatchOptions.from_env({"CUDICE_TEAM_MAX_BATCH": "2", "CUDICE_TEAM_KV_PAGES": "64"})
    assert got == BatchOptions(max_batch=2, num_pages=64) and got is not None and got.capacity == 66
    with pytest.raises(ValueError, match="CUDICE_TEAM_MAX_QUEUE='0' is not a positive integer"):
        BatchOptions.from_env({"CUDICE_TEAM_MAX_QUEUE": "0"})
