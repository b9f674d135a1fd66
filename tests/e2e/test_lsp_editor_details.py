"""Details of what an editor sees (scripted model and verifier, real server):

- a save never blanks the diagnostics on screen before the new ones arrive (no blink);
- the compile-only note sits on the `load_inline(...)` line, not on `class ModelNew` where the
  code lens is (a long message there pushed the lens off the screen in Neovim);
- a whole-line selection given to infill keeps the kernel's `__global__` line;
- the server's info log reaches the client as `window/logMessage` of type Info (Neovim labels
  every stderr line of a server `[ERROR]`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from lsp_support import Editors, copy_example
from lsprotocol import types as lsp

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


class RecordingDiagnostics(dict[str, Any]):
    """`client.diagnostics` that also keeps every publish, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.history: list[tuple[str, list[lsp.Diagnostic]]] = []

    def __setitem__(self, uri: str, diags: Any) -> None:
        self.history.append((uri, list(diags)))
        super().__setitem__(uri, diags)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    for name in ("relu.py", "relu_broken.py", "relu_cuda.py"):
        copy_example(name, tmp_path / name)
    return tmp_path


async def test_a_save_never_blanks_the_diagnostics_on_screen(workspace: Path, editors: Editors) -> None:
    editor = await editors.start("neovim@v0.11", workspace, env={"CUDICE_GPU": "0"})
    recorded = RecordingDiagnostics()
    editor.client.diagnostics = recorded
    uri = editor.open(workspace / "relu_broken.py")
    editor.save(uri)
    await editor.wait_status(lambda s: s["uri"] == uri and s["lastVerdict"] == "compile_error")
    start = len(recorded.history)
    for i in range(3):  # saves of new text: each runs the static stage, the fast check and the build
        editor.change(uri, editor.buffers[uri][0] + f"\n# edit {i} QUICK_STALL=2\n")  # static first
        num = len(editor.statuses)
        editor.save(uri)
        await editor.wait_for(
            "cudice/status",
            lambda n=num: any(  # type: ignore[misc]
                s["uri"] == uri
                and s["lastVerdict"] == "compile_error"
                and not (s["verifying"] or s["edited"])
                for s in editor.statuses[n:]
            ),
        )
    published = [d for u, d in recorded.history[start:] if u == uri]
    assert len(published) >= 3, published
    assert all(any(x.severity == lsp.DiagnosticSeverity.Error for x in d) for d in published), published


async def test_the_compile_only_note_is_on_the_load_inline_line(workspace: Path, editors: Editors) -> None:
    editor = await editors.start("neovim@v0.11", workspace, env={"CUDICE_GPU": "0"})
    uri = editor.open(workspace / "relu_cuda.py")
    editor.save(uri)
    diags = await editor.wait_diagnostics(uri, lambda d: any(x.code == "server.compile_only" for x in d))
    note = next(d for d in diags if d.code == "server.compile_only")
    lines = editor.buffers[uri][0].splitlines()
    assert "load_inline(" in lines[note.range.start.line], lines[note.range.start.line]
    assert "class ModelNew" not in lines[note.range.start.line]


async def test_infill_of_whole_selected_lines_keeps_the_kernel_signature(
    workspace: Path, editors: Editors
) -> None:
    (workspace / "ckpt").mkdir()
    editor = await editors.start(
        "neovim@v0.11", workspace, init_options={"cudice": {"model": {"path": str(workspace / "ckpt")}}}
    )
    await editor.wait_model("ready")
    uri = editor.open(workspace / "relu_cuda.py")
    before = editor.buffers[uri][0]
    lines = before.splitlines()
    first = next(i for i, t in enumerate(lines) if "__global__" in t)
    last = next(i for i in range(first, len(lines)) if lines[i].strip() == "}")
    # what `:'<,'>CudiceInfill` sends for a visual selection of the whole kernel
    rng = {"start": {"line": first, "character": 0}, "end": {"line": last, "character": len(lines[last])}}
    result = await editor.command("cudice.infillKernel", uri, rng)
    assert result["ok"] is True, result
    after = editor.buffers[uri][0]
    assert lines[first] in after.splitlines(), "the __global__ line was replaced"
    assert "written by the fake engine" in after
    assert after.count("{") >= before.count("{") - 1


async def test_info_log_lines_reach_the_client_as_info(workspace: Path, editors: Editors) -> None:
    editor = await editors.start("neovim@v0.11", workspace, env={"CUDICE_GPU": "0"})
    uri = editor.open(workspace / "relu_cuda.py")
    editor.save(uri)
    await editor.wait_status(lambda s: s["uri"] == uri and s["lastVerdict"] == "compiled")
    await editor.wait_for(
        "window/logMessage",
        lambda: any(
            m.type == lsp.MessageType.Info and "cudice" in m.message for m in editor.client.log_messages
        ),
    )
