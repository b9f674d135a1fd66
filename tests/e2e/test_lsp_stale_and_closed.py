"""A verdict never outlives its file's candidacy, its text or its buffer (scripted verifier).

- a file that stops being a candidate (no `ModelNew`, no `load_inline`) loses its diagnostics,
  statusline verdict and lens on save and on `cudice.verify`;
- an unsaved edit marks the verdict `edited` in `cudice/status` and asks for fresh lenses;
- a reference with a Python syntax error gets a syntax diagnostic, a disabled Generate action
  that names the error, and a generate command that says why it cannot run;
- closing a buffer cancels its verification.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from lsp_support import REPO, Editor, Editors, copy_example
from lsprotocol import types as lsp

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    for name in ("relu.py", "relu_cuda.py"):
        copy_example(name, tmp_path / name)
    return tmp_path


async def _lens_titles(editor: Editor, uri: str) -> list[str]:
    lenses = await editor.client.text_document_code_lens_async(
        lsp.CodeLensParams(lsp.TextDocumentIdentifier(uri))
    )
    return [lens.command.title for lens in lenses or [] if lens.command]


async def _verified(editor: Editor, uri: str) -> None:
    await editor.wait_status(lambda s: s["uri"] == uri and s["lastVerdict"] == "compiled")
    await editor.wait_diagnostics(uri, lambda d: any(x.code == "server.compile_only" for x in d))


def _cleared(editor: Editor, uri: str, since: int) -> bool:
    return any(s["uri"] == uri and s["lastVerdict"] is None for s in editor.statuses[since:])


@pytest.mark.parametrize("how", ["save", "verify"])
async def test_a_file_that_stops_being_a_candidate_loses_its_verdict(
    workspace: Path, editors: Editors, how: str
) -> None:
    editor = await editors.start("neovim@v0.11", workspace, env={"CUDICE_GPU": "0"})
    uri = editor.open(workspace / "relu_cuda.py")
    editor.save(uri)
    await _verified(editor, uri)
    num = len(editor.statuses)
    editor.change(uri, "import torch\n\nprint(torch.ones(2))\n")  # overwritten: no ModelNew left
    if how == "save":
        editor.save(uri)
    else:
        Path(workspace / "relu_cuda.py").write_text(editor.buffers[uri][0])
        await editor.command("cudice.verify", uri)
    await editor.wait_diagnostics(uri, lambda d: d == [])
    await editor.wait_for("cudice/status", lambda: _cleared(editor, uri, num))
    assert await _lens_titles(editor, uri) == []
    assert not any(s["uri"] == uri and s["verifying"] for s in editor.statuses[num:])


async def test_an_unsaved_edit_marks_the_verdict_edited_and_refreshes_lenses(
    workspace: Path, editors: Editors
) -> None:
    editor = await editors.start("visual-studio-code", workspace, env={"CUDICE_GPU": "0"})
    uri = editor.open(workspace / "relu_cuda.py")
    text = editor.buffers[uri][0]
    editor.save(uri)
    await _verified(editor, uri)
    refreshes = editor.lens_refreshes
    editor.change(uri, text + "\n# a comment\n")
    edited = await editor.wait_status(lambda s: s["uri"] == uri and s.get("edited") is True)
    assert edited["lastVerdict"] == "compiled" and not edited["verifying"]
    assert (await _lens_titles(editor, uri))[0].startswith("edited since:")
    assert editor.lens_refreshes > refreshes
    editor.change(uri, text)  # undone: the verdict is the buffer's again
    await editor.wait_status(lambda s: s["uri"] == uri and s.get("edited") is False and s["lastVerdict"])


async def test_a_reference_with_a_syntax_error_says_so(workspace: Path, editors: Editors) -> None:
    editor = await editors.start("neovim@v0.11", workspace, env={"CUDICE_GPU": "0"})
    text = (REPO / "examples" / "relu.py").read_text()
    bad = text.replace("def forward(self, x", "def forward(self x", 1)
    line = next(i for i, t in enumerate(bad.splitlines()) if "def forward(self x" in t)
    (workspace / "relu.py").write_text(bad)
    uri = editor.open(workspace / "relu.py")  # shown on open, before any save
    diags = await editor.wait_diagnostics(uri, lambda d: any(x.code == "parse.syntax_error" for x in d))
    syntax = next(d for d in diags if d.code == "parse.syntax_error")
    assert syntax.range.start.line == line and syntax.severity == lsp.DiagnosticSeverity.Error
    class_line = next(i for i, t in enumerate(bad.splitlines()) if t.startswith("class Model"))
    (action,) = await editor.code_actions(uri, class_line, 0)
    assert f"unavailable: Python syntax error on line {line + 1}" in action.title  # Neovim: no `disabled`
    result = await editor.command("cudice.generateKernel", uri, {"line": class_line, "character": 0})
    assert result["ok"] is False
    assert f"syntax error on line {line + 1}" in result["reason"] and "{" not in result["reason"]
    editor.change(uri, text)  # fixed: the syntax diagnostic goes on the next save
    editor.save(uri)
    await editor.wait_diagnostics(uri, lambda d: d == [])


async def test_closing_a_buffer_cancels_its_verification(workspace: Path, editors: Editors) -> None:
    editor = await editors.start("neovim@v0.11", workspace, env={"CUDICE_GPU": "1"})
    uri = editor.open(workspace / "relu_cuda.py")
    editor.change(uri, editor.buffers[uri][0] + "\n# SLOW_VERIFY\n")  # the run would take 300 s
    editor.save(uri)
    await editor.wait_status(lambda s: s["uri"] == uri and s["verifying"])
    num = len(editor.statuses)
    editor.client.text_document_did_close(lsp.DidCloseTextDocumentParams(lsp.TextDocumentIdentifier(uri)))
    stopped = await editor.wait_status(
        lambda s: s["uri"] == uri and not s["verifying"] and s in editor.statuses[num:], timeout=60
    )
    assert "stopped" in stopped["message"]
    ended = [
        r[-1]
        for r in editor.client.progress_reports.values()
        if r and isinstance(r[0], lsp.WorkDoneProgressBegin) and "verifying" in r[0].title
    ]
    assert ended and isinstance(ended[-1], lsp.WorkDoneProgressEnd) and ended[-1].message == "cancelled"
