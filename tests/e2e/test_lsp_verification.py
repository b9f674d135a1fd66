"""End-to-end verification behaviour: supersession, races, hover, lens, cache, watchers, bad input."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from lsp_support import Editor, Editors, copy_example
from lsprotocol import types as lsp

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    for name in ("relu.py", "relu_broken.py", "relu_cuda.py"):
        copy_example(name, tmp_path / name)
    return tmp_path


def _verify_progress(editor: Editor) -> list[list[object]]:
    return [
        r
        for r in editor.client.progress_reports.values()
        if r and isinstance(r[0], lsp.WorkDoneProgressBegin) and "verifying" in r[0].title
    ]


async def _hover(editor: Editor, uri: str, line: int, character: int) -> str | None:
    h = await editor.client.text_document_hover_async(
        lsp.HoverParams(lsp.TextDocumentIdentifier(uri=uri), lsp.Position(line, character))
    )
    if h is None:
        return None
    assert isinstance(h.contents, lsp.MarkupContent)
    return h.contents.value


async def _lens_titles(editor: Editor, uri: str) -> list[str]:
    lenses = await editor.client.text_document_code_lens_async(
        lsp.CodeLensParams(lsp.TextDocumentIdentifier(uri))
    )
    return [lens.command.title for lens in lenses or [] if lens.command]


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines()) if needle in line)


async def test_result_shows_in_hover_and_lens_and_is_cached_for_reopen(
    workspace: Path, editors: Editors
) -> None:
    editor = await editors.start(
        "visual-studio-code",
        workspace,
        env={"CUDICE_GPU": "1"},
        init_options={"cudice": {"verify": {"compileOnly": False}}},
    )
    uri = editor.open(workspace / "relu_cuda.py")
    text = editor.buffers[uri][0]
    assert await _lens_titles(editor, uri) == ["cudice: not verified yet · verify"]
    num_refresh = editor.lens_refreshes
    result = await editor.command("cudice.verify", uri)
    assert result["verdict"] == "correct" and result["speedup"] == pytest.approx(2.31)
    assert await _lens_titles(editor, uri) == ["✓ 2.31× vs PyTorch · H200 · re-verify"]
    assert editor.lens_refreshes > num_refresh
    card = await _hover(editor, uri, _line_of(text, "class ModelNew"), 8)
    assert card is not None
    for part in ("2.31×", "spread 2.14–2.47×", "NVIDIA H200", "5/5 trials", "ms", "measured:"):
        assert part in card, (part, card)
    kernel_line = _line_of(text, "__global__ void relu_kernel")
    assert "2.31×" in (
        await _hover(editor, uri, kernel_line, text.splitlines()[kernel_line].index("relu_kernel")) or ""
    )
    call_line = _line_of(text, "load_inline(")
    assert "2.31×" in (await _hover(editor, uri, call_line + 1, 6) or "")
    assert await _hover(editor, uri, 0, 0) is None  # elsewhere: nothing
    await editors.stop(editor)
    # a fresh server with the same cache shows the result on open, without running anything
    editor = await editors.start("neovim@v0.11", workspace, env={"CUDICE_GPU": "1"})
    uri = editor.open(workspace / "relu_cuda.py")
    await editor.wait_status(lambda s: s["uri"] == uri and s["lastVerdict"] == "correct", timeout=60)
    assert await _lens_titles(editor, uri) == ["✓ 2.31× vs PyTorch · H200 · re-verify"]
    assert _verify_progress(editor) == []


async def test_without_gpu_verification_is_compile_only_and_says_why(
    workspace: Path, editors: Editors
) -> None:
    editor = await editors.start("visual-studio-code", workspace, env={"CUDICE_GPU": "0"})
    uri = editor.open(workspace / "relu_cuda.py")
    editor.save(uri)
    diags = await editor.wait_diagnostics(uri, lambda d: any(x.code == "server.compile_only" for x in d))
    info = next(d for d in diags if d.code == "server.compile_only")
    assert info.severity == lsp.DiagnosticSeverity.Information and "CUDICE_GPU=0" in info.message
    text = editor.buffers[uri][0]
    card = await _hover(editor, uri, _line_of(text, "class ModelNew"), 8)
    assert card is not None and "no speedup shown" in card and "CUDICE_GPU=0" in card


async def test_a_stuck_fast_check_never_hides_the_builds_diagnostics(
    workspace: Path, editors: Editors
) -> None:
    editor = await editors.start("neovim@v0.11", workspace, env={"CUDICE_GPU": "0"})
    uri = editor.open(workspace / "relu_broken.py")
    editor.change(uri, editor.buffers[uri][0] + "\n# QUICK_STALL=60\n")  # clangd never answers
    editor.save(uri)
    diags = await editor.wait_diagnostics(
        uri, lambda d: any(x.code == "compile.error" for x in d), timeout=60
    )
    line = _line_of(editor.buffers[uri][0], "vv >")
    assert [d.range.start.line for d in diags if d.code == "compile.error"] == [line]
    await editor.wait_status(lambda s: s["uri"] == uri and s["lastVerdict"] == "compile_error", timeout=60)


async def test_newer_save_supersedes_the_older_run(workspace: Path, editors: Editors) -> None:
    editor = await editors.start("neovim@v0.11", workspace, env={"CUDICE_GPU": "1"})
    uri = editor.open(workspace / "relu_cuda.py")
    slow = editor.buffers[uri][0] + "\n# SLOW_VERIFY\n"
    editor.change(uri, slow)
    editor.save(uri)
    await editor.wait_for("$/progress", lambda: bool(_verify_progress(editor)))
    fast = slow.replace("# SLOW_VERIFY", "# fast now")
    editor.change(uri, fast)
    editor.save(uri)
    # well before the superseded run (300 s scripted) would end
    await editor.wait_status(lambda s: s["uri"] == uri and s["lastVerdict"] == "correct", timeout=120)
    runs = _verify_progress(editor)
    await editor.wait_for(
        "$/progress",
        lambda: all(isinstance(r[-1], lsp.WorkDoneProgressEnd) for r in _verify_progress(editor)),
    )
    ends = sorted(r[-1].message or "" for r in runs)
    assert ends == ["correct", "superseded by a newer run"]


async def test_cancelling_the_verification_progress_kills_the_run(workspace: Path, editors: Editors) -> None:
    editor = await editors.start("visual-studio-code", workspace, env={"CUDICE_GPU": "1"})
    uri = editor.open(workspace / "relu_cuda.py")
    editor.change(uri, editor.buffers[uri][0] + "\n# SLOW_VERIFY\n")
    task = asyncio.ensure_future(editor.command("cudice.verify", uri))
    await editor.wait_for("$/progress", lambda: bool(_verify_progress(editor)))
    token = next(
        t
        for t, r in editor.client.progress_reports.items()
        if r in _verify_progress(editor) and not isinstance(r[-1], lsp.WorkDoneProgressEnd)
    )
    editor.client.window_work_done_progress_cancel(lsp.WorkDoneProgressCancelParams(token))
    assert await asyncio.wait_for(task, 120) is None  # well before the scripted 300 s run would end
    (run,) = _verify_progress(editor)
    assert isinstance(run[-1], lsp.WorkDoneProgressEnd) and run[-1].message == "cancelled"
    assert await _lens_titles(editor, uri) == ["cudice: not verified yet · verify"]
    stopped = await editor.wait_status(lambda s: s["uri"] == uri and not s["verifying"])
    assert stopped["lastVerdict"] is None and "stopped" in stopped["message"]


async def test_results_for_an_older_text_are_never_shown(workspace: Path, editors: Editors) -> None:
    editor = await editors.start("neovim@v0.11", workspace)
    uri = editor.open(workspace / "relu_broken.py")
    editor.change(uri, editor.buffers[uri][0] + "\n# VERIFY_DELAY=3 QUICK_STALL=3\n")
    editor.save(uri)
    # the lens says so from the start, before the progress token exists
    assert await _lens_titles(editor, uri) == ["⏳ cudice: verifying…"]
    await editor.wait_for("$/progress", lambda: bool(_verify_progress(editor)))
    editor.change(uri, "# two new lines\n#\n" + editor.buffers[uri][0])  # line 14 is now line 16
    await editor.wait_for(
        "$/progress", lambda: isinstance(_verify_progress(editor)[0][-1], lsp.WorkDoneProgressEnd), timeout=60
    )
    assert _verify_progress(editor)[0][-1].message == "compile_error"
    # computed for the old text: neither published (it would sit on line 14) nor shown
    assert not any(editor.client.diagnostics.get(uri, []))
    assert await _lens_titles(editor, uri) == ["cudice: not verified yet · verify"]
    ended = await editor.wait_status(lambda s: s["uri"] == uri and not s["verifying"])  # a statusline stops
    assert "older text" in ended["message"]  # saying "verifying", and says why no verdict shows
    assert not any(s["uri"] == uri and s["lastVerdict"] for s in editor.statuses)
    editor.save(uri)  # the current text: its verdict lands on its own lines, with its version
    diags = await editor.wait_diagnostics(uri, lambda d: any(x.code == "compile.error" for x in d))
    assert [d.range.start.line for d in diags if d.code == "compile.error"] == [15]
    await editor.wait_status(lambda s: s["uri"] == uri and s["lastVerdict"] == "compile_error")
    assert await _lens_titles(editor, uri) == ["✗ compile error (1) · re-verify"]
    # newer text builds: the lens and hover say so, never the previous verdict as if it were current
    editor.change(uri, editor.buffers[uri][0].replace("VERIFY_DELAY=3", "VERIFY_DELAY=30"))
    editor.save(uri)
    assert await _lens_titles(editor, uri) == ["⏳ cudice: verifying…"]
    card = await _hover(editor, uri, _line_of(editor.buffers[uri][0], "class ModelNew"), 8)
    assert card is not None and card.startswith("**cudice: verifying…**") and "previous result" in card
    # cancelled: the previous verdict is back, marked as one of an earlier text
    num = len(editor.statuses)
    assert (await editor.command("cudice.cancel", uri))["cancelled"] == 1
    await editor.wait_for(
        "cudice/status", lambda: any(s["uri"] == uri and not s["verifying"] for s in editor.statuses[num:])
    )
    assert await _lens_titles(editor, uri) == ["edited since: ✗ compile error (1) · re-verify"]


async def test_status_carries_each_files_own_verdict(workspace: Path, editors: Editors) -> None:
    editor = await editors.start("neovim@v0.11", workspace, env={"CUDICE_GPU": "1"})
    broken = editor.open(workspace / "relu_broken.py")
    editor.save(broken)
    await editor.wait_status(lambda s: s["uri"] == broken and s["lastVerdict"] == "compile_error")
    good = editor.open(workspace / "relu_cuda.py")
    editor.save(good)
    await editor.wait_status(lambda s: s["uri"] == good and s["lastVerdict"] == "correct")
    for_good = [s for s in editor.statuses if s["uri"] == good]
    assert for_good[0]["verifying"] is True and for_good[0]["lastVerdict"] is None  # not broken's verdict
    # the verdict's own status no longer says "verifying" (a later run of the file may say it again:
    # on a loaded box more statuses can arrive before this line reads the list)
    verdict = next(s for s in for_good if s["lastVerdict"] == "correct")
    assert verdict["verifying"] is False


async def test_reference_change_reverifies_the_candidate(workspace: Path, editors: Editors) -> None:
    editor = await editors.start("neovim@v0.11", workspace)
    uri = editor.open(workspace / "relu_cuda.py")
    await editor.command("cudice.verify", uri)
    editor.client.progress_reports.clear()
    ref = workspace / "relu.py"
    ref.write_text(ref.read_text())  # saved again with the same text: nothing to re-verify
    await editor.wait_for(
        "window/logMessage",
        lambda: any("not its text" in m.message for m in editor.client.log_messages),
        timeout=60,
    )
    assert _verify_progress(editor) == []
    ref.write_text(ref.read_text().replace("dim = 16384", "dim = 4096"))
    await editor.wait_for(
        "$/progress",
        lambda: any(isinstance(r[-1], lsp.WorkDoneProgressEnd) for r in _verify_progress(editor)),
        timeout=60,
    )
    assert len(_verify_progress(editor)) == 1


async def test_malformed_requests_and_unknown_uris_never_crash(workspace: Path, editors: Editors) -> None:
    editor = await editors.start("visual-studio-code", workspace)
    ghost = (workspace / "ghost.py").as_uri()
    c = editor.client
    assert (
        await c.text_document_hover_async(
            lsp.HoverParams(lsp.TextDocumentIdentifier(ghost), lsp.Position(3, 3))
        )
        is None
    )
    assert await editor.code_actions(ghost, 0, 0) == []
    assert (
        await c.text_document_code_lens_async(lsp.CodeLensParams(lsp.TextDocumentIdentifier(ghost))) is None
    )
    c.text_document_did_save(lsp.DidSaveTextDocumentParams(lsp.TextDocumentIdentifier(ghost)))
    c.text_document_did_save(lsp.DidSaveTextDocumentParams(lsp.TextDocumentIdentifier("untitled:Untitled-1")))
    assert await editor.command("cudice.verify") is None
    assert await editor.command("cudice.verify", 42) is None
    assert (await editor.command("cudice.infillKernel", ghost, {"start": 5}))["ok"] is False
    assert (await editor.command("cudice.generateKernel"))["ok"] is False
    uri = editor.open(workspace / "relu_cuda.py")
    bad = await editor.command("cudice.infillKernel", uri, {"start": 10**9, "end": 10**9 + 1})
    assert bad["ok"] is False
    # a position far past the end of the file
    assert (
        await c.text_document_hover_async(
            lsp.HoverParams(lsp.TextDocumentIdentifier(uri), lsp.Position(9999, 9999))
        )
        is None
    )
    editor.change(uri, "class ModelNew(:\n  broken")  # a file that does not parse
    assert await _lens_titles(editor, uri) == []
    assert await editor.code_actions(uri, 0, 3) == []
    # raw messages a buggy client might send: wrong params, unknown method/command, broken JSON
    raw = [
        {"jsonrpc": "2.0", "id": "m1", "method": "textDocument/hover", "params": {"bogus": 1}},
        {"jsonrpc": "2.0", "id": "m2", "method": "textDocument/codeAction", "params": [1, 2]},
        {
            "jsonrpc": "2.0",
            "id": "m3",
            "method": "workspace/executeCommand",
            "params": {"command": "cudice.nope"},
        },
        {"jsonrpc": "2.0", "id": "m4", "method": "cudice/unknown", "params": {}},
    ]
    server = c._server
    assert server is not None and server.stdin is not None
    for body in [json.dumps(m).encode() for m in raw] + [b'{"jsonrpc": "2.0", "id": "m5", "method": ']:
        server.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    await server.stdin.drain()
    # still alive and answering
    editor.change(uri, (workspace / "relu_cuda.py").read_text())
    assert await _lens_titles(editor, uri) == ["cudice: not verified yet · verify"]


async def test_bad_settings_are_reported_once_and_defaults_used(workspace: Path, editors: Editors) -> None:
    editor = await editors.start(
        "visual-studio-code",
        workspace,
        init_options={"cudice": {"sampler": {"threshold": 7}}},
        configuration={"sampler": {"threshold": 7}, "verify": {"onSave": False}},
    )
    await editor.wait_model("missing")
    uri = editor.open(workspace / "relu_broken.py")
    editor.save(uri)  # onSave is off (from workspace/configuration): nothing runs
    editor.client.workspace_did_change_configuration(lsp.DidChangeConfigurationParams(settings=None))
    result = await editor.command("cudice.verify", uri)
    assert result["verdict"] == "compile_error"
    warnings = [m.message for m in editor.client.messages if "threshold" in m.message]
    assert len(warnings) == 1 and "using 0.9" in warnings[0]
    assert len(_verify_progress(editor)) == 1  # the save did not verify


async def test_new_checkpoint_is_hot_reloaded_and_half_written_ones_ignored(
    workspace: Path, editors: Editors
) -> None:
    ckpt = workspace / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text("{}")
    (ckpt / "model.safetensors").write_bytes(b"0")
    editor = await editors.start(
        "neovim@v0.11",
        workspace,
        env={"CUDICE_RELOAD_DEBOUNCE_S": "0.3"},
        init_options={"cudice": {"model": {"path": str(ckpt)}}},
    )
    await editor.wait_model("ready")
    num = len(editor.statuses)
    (ckpt / "model.safetensors.tmp").write_bytes(b"half")  # a trainer mid-write
    (ckpt / "cudice_checkpoint.json").write_text(json.dumps({"step": 1}))
    # A negative check needs a bounded wait: five debounce periods, long enough that a reload
    # of the incomplete checkpoint would have started (the watcher fires 0.3 s after quiet).
    await asyncio.sleep(1.5)
    assert [s["model"] for s in editor.statuses[num:]] in ([], ["ready"] * len(editor.statuses[num:]))
    assert not any("new checkpoint" in m.message for m in editor.client.messages)
    (ckpt / "model.safetensors.tmp").unlink()
    await editor.wait_for(
        "cudice/status", lambda: [s["model"] for s in editor.statuses[num:]][-2:] == ["loading", "ready"]
    )
    assert any("new checkpoint" in m.message for m in editor.client.messages)
