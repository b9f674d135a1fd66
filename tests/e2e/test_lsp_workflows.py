"""End-to-end: the real server over stdio, replayed Neovim 0.11 and VS Code capabilities.

Model and verifier run in the real worker processes with scripted stand-ins (lsp_fakes), so
progress, cancellation, crashes and races are deterministic. Waits are on notifications.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from lsp_support import CLIENTS, Editor, Editors, copy_example
from lsprotocol import types as lsp

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

SCAFFOLD = '''# cudice: reference=relu.py
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

relu_source = """
#include <torch/extension.h>

__global__ void relu_kernel(const float* x, float* out, int n) {
}
"""

relu_cpp_source = "torch::Tensor relu_cuda(torch::Tensor x);"

relu = load_inline(name="relu_s", cpp_sources=relu_cpp_source, cuda_sources=relu_source,
                   functions=["relu_cuda"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x):
        return relu.relu_cuda(x)
'''


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    for name in ("relu.py", "relu_broken.py", "relu_cuda.py"):
        copy_example(name, tmp_path / name)
    (tmp_path / "scaffold_cuda.py").write_text(SCAFFOLD)
    (tmp_path / "ckpt").mkdir()
    return tmp_path


def _model_opts(ws: Path, **extra: object) -> dict[str, object]:
    return {"cudice": {"model": {"path": str(ws / "ckpt")}, **extra}}


def _progress(editor: Editor, title_part: str) -> list[object]:
    for reports in editor.client.progress_reports.values():
        if reports and isinstance(reports[0], lsp.WorkDoneProgressBegin) and title_part in reports[0].title:
            return list(reports)
    return []


async def _wait_progress(editor: Editor, title_part: str, kind: type, timeout: float = 30.0) -> list[object]:
    await editor.wait_for(
        "$/progress", lambda: any(isinstance(r, kind) for r in _progress(editor, title_part)), timeout
    )
    return _progress(editor, title_part)


def _token(editor: Editor, title_part: str) -> str:
    for token, reports in editor.client.progress_reports.items():
        if reports and isinstance(reports[0], lsp.WorkDoneProgressBegin) and title_part in reports[0].title:
            return str(token)
    raise AssertionError(f"no progress titled {title_part!r}")


@pytest.mark.parametrize("client", CLIENTS)
async def test_actions_are_disabled_with_a_reason_while_no_model(
    workspace: Path, client: str, editors: Editors
) -> None:
    editor = await editors.start(client, workspace)
    status = await editor.wait_model("missing")
    assert "cudice.model.path" in status["message"]
    ref = editor.open(workspace / "relu.py")
    actions = await editor.code_actions(ref, 10, 8)  # inside class Model
    assert [a.command.command for a in actions if a.command] == ["cudice.generateKernel"]
    action = actions[0]
    if client == "visual-studio-code":  # disabledSupport
        assert action.disabled is not None and "cudice.model.path" in action.disabled.reason
    else:
        assert action.disabled is None and "unavailable" in action.title
    result = await editor.command("cudice.generateKernel", ref, "Model")
    assert result["ok"] is False and "cudice.model.path" in result["reason"]
    assert not (workspace / "relu_cuda.py").read_text().startswith("# generated")


@pytest.mark.parametrize("client", CLIENTS)
async def test_compile_error_lands_on_line_14_with_code_and_version(
    workspace: Path, client: str, editors: Editors
) -> None:
    editor = await editors.start(client, workspace)
    uri = editor.open(workspace / "relu_broken.py")
    editor.save(uri)
    diags = await editor.wait_diagnostics(uri, lambda d: bool(d))
    d = diags[0]
    assert d.range.start.line == 13 and d.source == "cudice" and d.code == "compile.error"
    assert d.severity == lsp.DiagnosticSeverity.Error
    if client == "visual-studio-code":
        assert d.code_description is not None and d.code_description.href.endswith("#compile.error")
    await editor.wait_status(lambda s: s["lastVerdict"] == "compile_error" and s["uri"] == uri)


@pytest.mark.parametrize("client", CLIENTS)
async def test_columns_follow_the_negotiated_position_encoding(
    workspace: Path, client: str, editors: Editors
) -> None:
    path = workspace / "relu_broken.py"
    prefix = "        out[i] = /* ä😀 */ "
    path.write_text(path.read_text().replace("        out[i] = ", prefix))
    editor = await editors.start(client, workspace)
    # Neovim 0.11 offers utf-8 first and pygls takes it; VS Code 1.65 knows only utf-16
    assert editor.position_encoding == ("utf-8" if client.startswith("neovim") else "utf-16")
    uri = editor.open(path)
    editor.save(uri)
    (d, *_) = await editor.wait_diagnostics(uri, lambda d: bool(d))
    unit = {"utf-8": len(prefix.encode()), "utf-16": len(prefix.encode("utf-16-le")) // 2}
    assert (d.range.start.line, d.range.start.character) == (13, unit[editor.position_encoding])
    assert d.range.end.character == d.range.start.character + 2


@pytest.mark.parametrize("client", CLIENTS)
async def test_generate_writes_shows_and_verifies_the_candidate(
    workspace: Path, client: str, editors: Editors
) -> None:
    (workspace / "relu_cuda.py").unlink()
    editor = await editors.start(client, workspace, init_options=_model_opts(workspace))
    await editor.wait_model("ready")
    ref = editor.open(workspace / "relu.py")
    actions = await editor.code_actions(ref, 10, 8)
    assert actions[0].disabled is None and actions[0].command is not None
    result = await editor.command(actions[0].command.command, *actions[0].command.arguments)
    assert result["ok"] is True, result
    out = workspace / "relu_cuda.py"
    text = out.read_text()
    assert text.startswith("# cudice: reference=relu.py\n") and "class ModelNew" in text
    assert [d.uri for d in editor.client.shown_documents] == [out.as_uri()]
    reports = _progress(editor, "generating")
    assert isinstance(reports[0], lsp.WorkDoneProgressBegin) and reports[0].cancellable
    assert isinstance(reports[-1], lsp.WorkDoneProgressEnd) and "tok/s" in (reports[-1].message or "")
    middle = [r for r in reports if isinstance(r, lsp.WorkDoneProgressReport)]
    assert middle and "tokens/forward" in (middle[-1].message or "")
    # the new file is verified: its result arrives as status
    await editor.wait_status(lambda s: s["uri"] == out.as_uri() and s["lastVerdict"] is not None)


async def test_a_generate_asked_for_while_the_model_loads_waits_for_it(
    workspace: Path, editors: Editors
) -> None:
    (workspace / "relu_cuda.py").unlink()
    editor = await editors.start(
        "neovim@v0.11", workspace, init_options=_model_opts(workspace), env={"CUDICE_FAKE_LOAD_S": "10"}
    )
    await editor.wait_model("loading")
    ref = editor.open(workspace / "relu.py")
    (action,) = await editor.code_actions(ref, 10, 8)
    assert action.disabled is None and action.title.endswith("(once the model has loaded)")
    assert action.command is not None
    result = await editor.command(action.command.command, *action.command.arguments)
    assert result["ok"] is True, result  # not "cannot generate yet: loading …"
    assert "class ModelNew" in (workspace / "relu_cuda.py").read_text()


async def test_generate_asks_before_overwriting(workspace: Path, editors: Editors) -> None:
    editor = await editors.start("visual-studio-code", workspace, init_options=_model_opts(workspace))
    await editor.wait_model("ready")
    before = (workspace / "relu_cuda.py").read_text()
    ref = editor.open(workspace / "relu.py")
    editor.message_request_answer = "Keep it"
    result = await editor.command("cudice.generateKernel", ref, "Model")
    assert result["ok"] is False and (workspace / "relu_cuda.py").read_text() == before
    assert "relu_cuda.py already exists" in editor.message_requests[0].message
    editor.message_request_answer = "Overwrite"
    result = await editor.command("cudice.generateKernel", ref, {"line": 10, "character": 8})
    assert result["ok"] is True and (workspace / "relu_cuda.py").read_text() != before


@pytest.mark.parametrize("client", CLIENTS)
async def test_infill_replaces_only_the_middle(workspace: Path, client: str, editors: Editors) -> None:
    editor = await editors.start(client, workspace, init_options=_model_opts(workspace))
    await editor.wait_model("ready")
    uri = editor.open(workspace / "scaffold_cuda.py")
    before = editor.buffers[uri][0]
    body_line = before.splitlines().index("__global__ void relu_kernel(const float* x, float* out, int n) {")
    actions = await editor.code_actions(uri, body_line + 1, 0)  # the empty body
    infill = [a for a in actions if a.command and a.command.command == "cudice.infillKernel"]
    assert infill and infill[0].title == "Infill kernel body"
    args = infill[0].command.arguments
    span = args[1]
    result = await editor.command("cudice.infillKernel", *args)
    assert result["ok"] is True, result
    after = editor.buffers[uri][0]
    assert after[: span["start"]] == before[: span["start"]]  # prefix byte-identical
    assert after.endswith(before[span["end"] :])  # suffix byte-identical
    assert after[span["start"] : len(after) - (len(before) - span["end"])] == result["middle"]
    assert editor.buffers[uri][1] == 2
    assert isinstance(_progress(editor, "infilling")[-1], lsp.WorkDoneProgressEnd)


async def test_stale_version_edit_is_refused(workspace: Path, editors: Editors) -> None:
    env = {"CUDICE_FAKE_TOKEN_DELAY_S": "0.05", "CUDICE_FAKE_NUM_TOKENS": "100"}
    editor = await editors.start("neovim@v0.11", workspace, init_options=_model_opts(workspace), env=env)
    await editor.wait_model("ready")
    uri = editor.open(workspace / "scaffold_cuda.py")
    start = editor.buffers[uri][0].index("{\n}") + 1
    task = asyncio.ensure_future(
        editor.command("cudice.infillKernel", uri, {"start": start, "end": start + 1}, 1)
    )
    await _wait_progress(editor, "infilling", lsp.WorkDoneProgressReport)
    edited = editor.buffers[uri][0] + "\n# typed while the model worked\n"
    editor.change(uri, edited)
    result = await task
    assert result["ok"] is False and result["stale"] is True
    assert editor.buffers[uri][0] == edited and not editor.applied_edits
    assert any("changed while" in m.message for m in editor.client.messages)
    # an action offered for an old version is refused at once
    result = await editor.command("cudice.infillKernel", uri, {"start": start, "end": start + 1}, 1)
    assert result["ok"] is False and result["stale"] is True


async def test_cancel_stops_generation_and_a_hung_worker_is_killed(workspace: Path, editors: Editors) -> None:
    env = {"CUDICE_FAKE_TOKEN_DELAY_S": "0.05", "CUDICE_FAKE_NUM_TOKENS": "2000"}
    (workspace / "relu_cuda.py").unlink()
    editor = await editors.start(
        "visual-studio-code", workspace, init_options=_model_opts(workspace), env=env
    )
    await editor.wait_model("ready")
    ref = editor.open(workspace / "relu.py")
    task = asyncio.ensure_future(editor.command("cudice.generateKernel", ref, "Model"))
    await _wait_progress(editor, "generating", lsp.WorkDoneProgressReport)
    editor.client.window_work_done_progress_cancel(
        lsp.WorkDoneProgressCancelParams(_token(editor, "generating"))
    )
    result = await asyncio.wait_for(task, 45)  # well before the scripted 100 s generation would end
    assert result["ok"] is False and result["reason"] == "cancelled"
    assert not (workspace / "relu_cuda.py").exists()
    assert _progress(editor, "generating")[-1].message == "cancelled"
    # a worker that ignores the cancel is killed after the grace period and the model reloaded
    hung = workspace / "hung.py"
    hung.write_text((workspace / "relu.py").read_text() + "\n# CUDICE_TEST_HANG\n")
    uri = editor.open(hung)
    editor.client.progress_reports.clear()
    task = asyncio.ensure_future(editor.command("cudice.generateKernel", uri, "Model"))
    await _wait_progress(editor, "generating", lsp.WorkDoneProgressReport)
    num_before = len(editor.statuses)
    assert (await editor.command("cudice.cancel", uri))["cancelled"] == 1
    result = await asyncio.wait_for(task, 45)  # the 3 s grace, a kill, and a loaded box; not 100 s
    assert result["ok"] is False and result["reason"] == "cancelled"
    await editor.wait_for(
        "cudice/status",
        lambda: [s["model"] for s in editor.statuses[num_before:]][-2:] == ["loading", "ready"],
    )


async def test_worker_crash_is_survived_and_the_user_told(workspace: Path, editors: Editors) -> None:
    editor = await editors.start("neovim@v0.11", workspace, init_options=_model_opts(workspace))
    await editor.wait_model("ready")
    crash = workspace / "crash.py"
    crash.write_text((workspace / "relu.py").read_text() + "\n# CUDICE_TEST_CRASH\n")
    uri = editor.open(crash)
    num_before = len(editor.statuses)
    result = await editor.command("cudice.generateKernel", uri, "Model")
    assert result["ok"] is False and "died" in result["reason"]
    await editor.wait_for(
        "window/showMessage",
        lambda: any("Restarting the model worker" in m.message for m in editor.client.messages),
    )
    await editor.wait_for(
        "cudice/status",
        lambda: [s["model"] for s in editor.statuses[num_before:]][-2:] == ["loading", "ready"],
    )
    ref = editor.open(workspace / "relu.py")
    editor.message_request_answer = "Overwrite"
    assert (await editor.command("cudice.generateKernel", ref, "Model"))["ok"] is True


async def test_bad_checkpoint_is_an_error_state_and_a_config_change_reloads(
    workspace: Path, editors: Editors
) -> None:
    broken = workspace / "broken_ckpt"
    broken.mkdir()
    editor = await editors.start(
        "visual-studio-code",
        workspace,
        init_options={"cudice": {"model": {"path": str(broken)}}},
        configuration={"model": {"path": str(broken)}},
    )
    status = await editor.wait_model("error")
    assert "broken_ckpt" in status["message"] and "not a checkpoint" in status["message"]
    # The error message follows the status notification: wait for it, do not race it.
    await editor.wait_for(
        "window/showMessage", lambda: any(m.type == lsp.MessageType.Error for m in editor.client.messages), 10
    )
    ref = editor.open(workspace / "relu.py")
    (action,) = await editor.code_actions(ref, 10, 8)
    assert action.disabled is not None and "failed to load" in action.disabled.reason
    editor.client.set_configuration({"model": {"path": str(workspace / "ckpt")}}, section="cudice")
    editor.client.workspace_did_change_configuration(lsp.DidChangeConfigurationParams(settings=None))
    await editor.wait_model("ready")
    (action,) = await editor.code_actions(ref, 10, 8)
    assert action.disabled is None


async def test_shutdown_answers_within_the_clients_two_seconds_while_both_workers_are_busy(
    workspace: Path, editors: Editors
) -> None:
    """Clients wait about 2 s for `shutdown`. Both long-lived workers here ignore the cue to exit
    (a generation that ignores stop, a clangd check that is stuck), so each needs its 1 s grace and a
    kill: closed one after the other that is over 2 s, closed together about 1 s."""
    editor = await editors.start(
        "visual-studio-code",
        workspace,
        init_options=_model_opts(workspace),
        env={"CUDICE_FAKE_TOKEN_DELAY_S": "0.2", "CUDICE_FAKE_NUM_TOKENS": "500"},
    )
    await editor.wait_model("ready")
    hung = workspace / "hung.py"
    hung.write_text((workspace / "relu.py").read_text() + "\n# CUDICE_TEST_HANG\n")
    generation = asyncio.ensure_future(editor.command("cudice.generateKernel", editor.open(hung), "Model"))
    await _wait_progress(editor, "generating", lsp.WorkDoneProgressReport)
    stuck = workspace / "stuck_cuda.py"
    stuck.write_text((workspace / "relu_cuda.py").read_text() + "\n# QUICK_STALL=60 SLOW_VERIFY\n")
    editor.save(editor.open(stuck))
    await _wait_progress(editor, "verifying", lsp.WorkDoneProgressBegin)
    t0 = time.monotonic()
    await asyncio.wait_for(editor.shutdown(), 10)  # teardown then sends `exit`, pass or fail
    took = time.monotonic() - t0
    generation.cancel()
    assert took < 1.9, f"shutdown took {took:.2f} s; clients give it about 2 s"
