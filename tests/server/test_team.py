"""`cudice-lsp --tcp --multi` (server/team.py): several editors on one server process at once.

End to end on the CPU: a real server process, real TCP sockets, the e2e tests' LSP client and
editor model (tests/e2e/lsp_support.py) with a recorded Neovim's capabilities, the scripted verifier
(tests/e2e/lsp_fakes) and a scripted engine that logs its loads (team_fakes/team_engine.py).

1. isolation: two clients open the same URI with different text; each gets only its own diagnostics;
2. a client that disconnects has its verification killed, while the other client's completes;
3. the per-client bound on pending work refuses the excess with a message, not the other client;
4. the model is loaded once for two sessions, and a waiting generation of a client that leaves is
   cancelled (and writes nothing). The scripted engine cannot batch, so here the shared worker
   runs jobs one at a time (its fallback); batching is tested in test_team_batching.py.

Waits are on notifications and process states with generous deadlines (a loaded 2-core box).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from lsprotocol import types as lsp

HERE = Path(__file__).resolve().parent
E2E = HERE.parent / "e2e"
REPO = HERE.parent.parent
sys.path.insert(0, str(E2E))

from lsp_support import Editor, _fix_code_action_union, _to_dict  # noqa: E402
from proc_state import alive  # noqa: E402
from pytest_lsp import client_capabilities  # noqa: E402
from pytest_lsp.client import make_test_lsp_client  # noqa: E402

pytestmark = [pytest.mark.timeout(300)]

WAIT_S = 120.0  # any one event, on a loaded box


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _until(pred: Callable[[], bool], timeout_s: float = WAIT_S) -> bool:
    deadline = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


def _jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@dataclass
class TeamServer:
    proc: asyncio.subprocess.Process
    port: int
    tmp: Path
    log: list[str] = field(default_factory=list)
    clients: list[Editor] = field(default_factory=list)

    @property
    def verify_log(self) -> Path:
        return self.tmp / "verify.jsonl"

    @property
    def load_log(self) -> Path:
        return self.tmp / "loads.jsonl"

    async def connect(self, root: Path, init_options: Any = None) -> Editor:
        """An initialized editor (Neovim 0.11's capabilities) connected over TCP."""
        client = make_test_lsp_client()
        _fix_code_action_union(client)
        editor = Editor(client)
        editor.message_request_answer = "Overwrite"

        @client.feature(lsp.WORKSPACE_APPLY_EDIT)
        def apply_edit(params: lsp.ApplyWorkspaceEditParams) -> lsp.ApplyWorkspaceEditResult:
            return editor._apply(params)

        @client.feature(lsp.WINDOW_SHOW_MESSAGE_REQUEST)
        def message_request(params: lsp.ShowMessageRequestParams) -> lsp.MessageActionItem | None:
            editor.message_requests.append(params)
            return lsp.MessageActionItem(title=editor.message_request_answer or "")

        @client.feature(lsp.WORKSPACE_CODE_LENS_REFRESH)
        def lens_refresh(params: None) -> None:
            editor.lens_refreshes += 1

        @client.feature("cudice/status")
        def status(params: Any) -> None:
            editor.statuses.append(_to_dict(params))

        await client.start_tcp("127.0.0.1", self.port)
        result = await asyncio.wait_for(
            client.initialize_session(
                lsp.InitializeParams(
                    capabilities=client_capabilities("neovim@v0.11"),
                    initialization_options=init_options,
                    root_uri=root.as_uri(),
                    workspace_folders=[lsp.WorkspaceFolder(uri=root.as_uri(), name="ws")],
                )
            ),
            WAIT_S,
        )
        assert result.server_info is not None and result.server_info.name == "cudice"
        editor.position_encoding = str(result.capabilities.position_encoding or "utf-16")
        self.clients.append(editor)
        return editor

    async def disconnect(self, editor: Editor) -> None:
        """The editor vanishes (a crash, a dropped tunnel): its socket closes, no `shutdown`."""
        writer = editor.client.protocol.writer
        assert isinstance(writer, asyncio.StreamWriter)
        writer.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(editor.client.stop(), 30)
        if editor in self.clients:
            self.clients.remove(editor)


def _open(editor: Editor, uri: str, text: str) -> None:
    """Open `uri` in `editor` with `text` (whatever is on disk: an unsaved buffer)."""
    editor.buffers[uri] = [text, 1]
    editor.client.text_document_did_open(
        lsp.DidOpenTextDocumentParams(
            lsp.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)
        )
    )


def _save(editor: Editor, uri: str) -> None:
    """`didSave` without writing the file: the server verifies the session's buffer."""
    editor.client.text_document_did_save(lsp.DidSaveTextDocumentParams(lsp.TextDocumentIdentifier(uri=uri)))


async def _start(tmp: Path, *extra: str, env_extra: dict[str, str] | None = None) -> TeamServer:
    port = _free_port()
    env = {
        **os.environ,
        "CUDICE_ENGINE_MODULE": "team_fakes.team_engine",
        "CUDICE_VERIFY_MODULE": "lsp_fakes.fake_verifier",
        "CUDICE_CACHE_DIR": str(tmp / "cache"),
        "CUDICE_FAKE_VERIFY_LOG": str(tmp / "verify.jsonl"),
        "CUDICE_TEAM_LOAD_LOG": str(tmp / "loads.jsonl"),
        "CUDICE_GPU": "0",
        "PYTHONPATH": os.pathsep.join([str(E2E), str(HERE), os.environ.get("PYTHONPATH", "")]),
        **(env_extra or {}),
    }
    argv = [sys.executable, "-m", "cudice.server", "--tcp", "--multi", "--host", "127.0.0.1"]
    argv += ["--port", str(port), "--log-level", "info", *extra]
    proc = await asyncio.create_subprocess_exec(*argv, env=env, stderr=asyncio.subprocess.PIPE)
    server = TeamServer(proc, port, tmp)
    assert proc.stderr is not None
    while True:
        line = await asyncio.wait_for(proc.stderr.readline(), WAIT_S)
        assert line, "the server exited before listening"
        server.log.append(line.decode(errors="replace"))
        if b"listening on" in line:
            break

    async def drain(stream: asyncio.StreamReader) -> None:
        while line := await stream.readline():
            server.log.append(line.decode(errors="replace"))

    asyncio.get_running_loop().create_task(drain(proc.stderr))
    return server


@pytest.fixture
async def team(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[TeamServer]:
    extra = getattr(request, "param", ())
    server = await _start(tmp_path, *extra)
    try:
        yield server
    finally:
        await _stop(server)


async def _stop(server: TeamServer) -> None:
    """Every client says goodbye, then SIGTERM ends the server; it must exit with 0."""
    for editor in list(server.clients):
        with contextlib.suppress(Exception):
            await asyncio.wait_for(editor.client.shutdown_async(None), 20)
            editor.client.exit(None)
        await server.disconnect(editor)
    if server.proc.returncode is None:
        server.proc.send_signal(signal.SIGTERM)  # the team server runs until it is stopped
        code: int | None = None
        try:
            code = await asyncio.wait_for(server.proc.wait(), 60)
        except asyncio.TimeoutError:
            server.proc.kill()
            await server.proc.wait()
        assert code == 0, "".join(server.log[-40:])


def _workspace(tmp: Path, name: str) -> Path:
    root = tmp / name
    root.mkdir()
    for example in ("relu.py", "relu_cuda.py"):
        dest = root / example
        dest.write_text((REPO / "examples" / example).read_text())
        past = time.time() - 3600  # not "saved while the server started" (verified on open)
        os.utime(dest, (past, past))
    return root


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


async def test_two_clients_with_the_same_uri_see_only_their_own_diagnostics(
    team: TeamServer, tmp_path: Path
) -> None:
    root = _workspace(tmp_path, "ws")
    uri = (root / "relu_cuda.py").as_uri()  # the same file, as both users name it
    broken = (REPO / "examples" / "relu_broken.py").read_text()
    assert "vv >" in broken
    clean = (root / "relu_cuda.py").read_text()
    a = await team.connect(root)
    b = await team.connect(root)
    _open(a, uri, broken)
    _open(b, uri, clean)
    _save(a, uri)
    _save(b, uri)
    a_diags = await a.wait_diagnostics(uri, lambda ds: any(d.code == "compile.error" for d in ds), WAIT_S)
    a_status = await a.wait_status(lambda s: s["uri"] == uri and s["lastVerdict"] is not None, WAIT_S)
    b_status = await b.wait_status(lambda s: s["uri"] == uri and s["lastVerdict"] is not None, WAIT_S)
    assert a_status["lastVerdict"] == "compile_error"
    assert b_status["lastVerdict"] == "compiled", b_status  # compile-only: no GPU here
    assert any("vv" in d.message for d in a_diags)
    b_diags = list(b.client.diagnostics.get(uri, []))
    assert not any(d.severity == lsp.DiagnosticSeverity.Error for d in b_diags), b_diags
    # Never, at any point, a message about A's text in B's notifications (nor B's verdict in A's).
    assert all(s["lastVerdict"] != "compile_error" for s in b.statuses)
    assert all(s["lastVerdict"] != "compiled" for s in a.statuses)
    # Both texts were verified, each once: the shared pool's keys did not cancel one another.
    started = _jsonl(team.verify_log)
    assert sorted(e["sha"] for e in started) == sorted([_sha(broken), _sha(clean)])
    # Hover answers from the session's own verdict.
    hover_a = await a.client.text_document_hover_async(
        lsp.HoverParams(lsp.TextDocumentIdentifier(uri=uri), lsp.Position(13, 10))
    )
    assert hover_a is None or "compile" in str(hover_a.contents).lower()


async def test_a_disconnected_client_s_verification_is_killed_and_the_other_completes(
    team: TeamServer, tmp_path: Path
) -> None:
    root = _workspace(tmp_path, "ws")
    clean = (root / "relu_cuda.py").read_text()
    slow = clean + "\n# SLOW_VERIFY\n"  # the fake verifier sleeps 300 s
    delayed = clean + "\n# VERIFY_DELAY=4\n"
    uri = (root / "relu_cuda.py").as_uri()  # the same URI again: keys are per session
    a = await team.connect(root)
    b = await team.connect(root)
    _open(a, uri, slow)
    _open(b, uri, delayed)
    _save(a, uri)
    assert await _until(lambda: any(e["sha"] == _sha(slow) for e in _jsonl(team.verify_log)))
    _save(b, uri)
    assert await _until(lambda: any(e["sha"] == _sha(delayed) for e in _jsonl(team.verify_log)))
    a_pid = next(e["pid"] for e in _jsonl(team.verify_log) if e["sha"] == _sha(slow))
    b_pid = next(e["pid"] for e in _jsonl(team.verify_log) if e["sha"] == _sha(delayed))
    assert alive(a_pid) and alive(b_pid)
    await team.disconnect(a)
    assert await _until(lambda: not alive(a_pid)), "the vanished client's verification was not killed"
    status = await b.wait_status(lambda s: s["uri"] == uri and s["lastVerdict"] is not None, WAIT_S)
    assert status["lastVerdict"] == "compiled"
    assert not any("cancelled" in m.message for m in b.client.messages), b.client.messages
    assert len([e for e in _jsonl(team.verify_log) if e["sha"] == _sha(delayed)]) == 1  # never restarted


@pytest.mark.parametrize("team", [("--max-pending", "1")], indirect=True)
async def test_the_per_client_bound_refuses_excess_work_of_that_client_only(
    team: TeamServer, tmp_path: Path
) -> None:
    root = _workspace(tmp_path, "ws")
    clean = (root / "relu_cuda.py").read_text()
    (root / "relu.py").write_text((root / "relu.py").read_text() + "\n# SLOW_GENERATE\n")
    ref_uri = (root / "relu.py").as_uri()
    cand_uri = (root / "relu_cuda.py").as_uri()
    options = {"model": {"path": str(tmp_path / "ckpt")}}
    a = await team.connect(root, options)
    b = await team.connect(root, options)
    await a.wait_model("ready", WAIT_S)
    _open(a, ref_uri, (root / "relu.py").read_text())
    _open(a, cand_uri, clean)
    generating = asyncio.ensure_future(a.command("cudice.generateKernel", ref_uri, "Model"))
    # running once the engine reports tokens
    await a.wait_for("$/progress", lambda: bool(a.client.progress_reports) and _tokens_reported(a), WAIT_S)
    _save(a, cand_uri)  # A's second piece of work: over its bound of 1
    await a.wait_for(
        "window/showMessage",
        lambda: any("too much work queued" in m.message for m in a.client.messages),
        WAIT_S,
    )
    second = await asyncio.wait_for(a.command("cudice.generateKernel", ref_uri, "Model"), WAIT_S)
    assert second["ok"] is False and "at most 1" in second["reason"], second
    assert not any(e["sha"] == _sha(clean) for e in _jsonl(team.verify_log))  # refused, never started
    # B is not held back by A's queue: its verification runs while A's generation goes on.
    _open(b, cand_uri, clean)
    _save(b, cand_uri)
    status = await b.wait_status(lambda s: s["uri"] == cand_uri and s["lastVerdict"] is not None, WAIT_S)
    assert status["lastVerdict"] == "compiled"
    assert not generating.done()
    assert not any("too much work" in m.message for m in b.client.messages)
    # A cancels its generation: its bound frees, and its next save is verified.
    await a.command("cudice.cancel")
    result = await asyncio.wait_for(generating, WAIT_S)
    assert result["ok"] is False and result["reason"] == "cancelled", result
    a.client.messages.clear()
    _save(a, cand_uri)
    a_status = await a.wait_status(lambda s: s["uri"] == cand_uri and s["lastVerdict"] is not None, WAIT_S)
    assert a_status["lastVerdict"] == "compiled"
    assert not any("too much work" in m.message for m in a.client.messages)


def _tokens_reported(editor: Editor) -> bool:
    return any(
        "tokens" in str(getattr(p, "message", "") or "")
        for reports in editor.client.progress_reports.values()
        for p in reports
    )


async def test_one_model_load_serves_two_sessions_and_a_leaving_client_s_queued_generation_is_cancelled(
    team: TeamServer, tmp_path: Path
) -> None:
    root_a = _workspace(tmp_path, "a")
    root_b = _workspace(tmp_path, "b")
    root_c = _workspace(tmp_path, "c")
    (root_a / "relu.py").write_text((root_a / "relu.py").read_text() + "\n# SLOW_GENERATE\n")
    options = {"model": {"path": str(tmp_path / "ckpt")}}
    a = await team.connect(root_a, options)
    await a.wait_model("ready", WAIT_S)
    b = await team.connect(root_b, options)
    await b.wait_model("ready", WAIT_S)
    assert len(_jsonl(team.load_log)) == 1, _jsonl(team.load_log)  # one load for both sessions
    # A generates for a long time; C's generation waits behind it (serial fallback); C leaves.
    ref_a, ref_b = (root_a / "relu.py").as_uri(), (root_b / "relu.py").as_uri()
    for editor, ref in ((a, ref_a), (b, ref_b)):
        _open(editor, ref, Path(ref.removeprefix("file://")).read_text())
    slow = asyncio.ensure_future(a.command("cudice.generateKernel", ref_a, "Model"))
    await a.wait_for("$/progress", lambda: _tokens_reported(a), WAIT_S)
    c = await team.connect(root_c, options)
    ref_c = (root_c / "relu.py").as_uri()
    _open(c, ref_c, (root_c / "relu.py").read_text())
    queued = asyncio.ensure_future(c.command("cudice.generateKernel", ref_c, "Model"))
    await c.wait_for("$/progress", lambda: bool(c.client.progress_reports), WAIT_S)  # its progress began
    await team.disconnect(c)
    with contextlib.suppress(BaseException):
        queued.cancel()
    # B's generation queues too; A cancels; B's then runs (C's wrote nothing).
    fast = asyncio.ensure_future(b.command("cudice.generateKernel", ref_b, "Model"))
    await a.command("cudice.cancel")
    assert (await asyncio.wait_for(slow, WAIT_S))["reason"] == "cancelled"
    got = await asyncio.wait_for(fast, WAIT_S)
    assert got["ok"] is True, got
    assert len(_jsonl(team.load_log)) == 1  # still the one load
    assert not any("loads the shared model" in line and "load 2" in line for line in team.log)
    assert (root_b / "relu_cuda.py").read_text() != (REPO / "examples" / "relu_cuda.py").read_text()
    assert (root_c / "relu_cuda.py").read_text() == (REPO / "examples" / "relu_cuda.py").read_text()
