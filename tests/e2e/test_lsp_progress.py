"""Feedback on long work: work-done progress for model loads, generations (token count, tok/s,
a percentage of the token budget) and builds (the stage that runs now and the elapsed time,
re-sent while nothing else changes), and a `window/showMessage` when something is cancelled.

Scripted model and verifier (`lsp_fakes/`); waits are on notifications, bounded.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from lsp_support import Editor, Editors, copy_example
from lsprotocol import types as lsp

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    for name in ("relu.py", "relu_cuda.py"):
        copy_example(name, tmp_path / name)
    (tmp_path / "ckpt").mkdir()
    return tmp_path


def _reports(editor: Editor, title_part: str) -> list[object]:
    for reports in editor.client.progress_reports.values():
        if reports and isinstance(reports[0], lsp.WorkDoneProgressBegin) and title_part in reports[0].title:
            return list(reports)
    return []


async def _ended(editor: Editor, title_part: str, timeout: float = 60.0) -> list[object]:
    await editor.wait_for(
        "$/progress",
        lambda: any(isinstance(r, lsp.WorkDoneProgressEnd) for r in _reports(editor, title_part)),
        timeout,
    )
    return _reports(editor, title_part)


async def test_model_load_and_generation_report_tokens_rate_and_percentage(
    workspace: Path, editors: Editors
) -> None:
    (workspace / "relu_cuda.py").unlink()
    opts = {"cudice": {"model": {"path": str(workspace / "ckpt")}, "sampler": {"maxNewTokens": 40}}}
    editor = await editors.start(
        "visual-studio-code",
        workspace,
        init_options=opts,
        env={"CUDICE_FAKE_NUM_TOKENS": "40", "CUDICE_FAKE_TOKEN_DELAY_S": "0.02"},
    )
    load = await _ended(editor, "loading model")
    assert isinstance(load[0], lsp.WorkDoneProgressBegin) and load[-1].message  # says how it ended
    await editor.wait_model("ready")
    ref = editor.open(workspace / "relu.py")
    assert (await editor.command("cudice.generateKernel", ref, "Model"))["ok"] is True
    runs = await _ended(editor, "generating")
    begin, *reports, end = runs
    assert isinstance(begin, lsp.WorkDoneProgressBegin) and begin.percentage == 0
    steps = [
        r for r in reports if isinstance(r, lsp.WorkDoneProgressReport) and "tokens" in (r.message or "")
    ]
    assert steps and all("tok/s" in (r.message or "") for r in steps)
    percents = [r.percentage for r in steps if r.percentage is not None]
    assert percents == sorted(percents) and 0 <= percents[0] and percents[-1] <= 99
    assert percents[-1] >= 50  # 40 tokens of a 40-token budget
    assert isinstance(end, lsp.WorkDoneProgressEnd) and "tok/s" in (end.message or "")


async def test_a_build_reports_its_elapsed_time_and_a_cancel_is_announced(
    workspace: Path, editors: Editors
) -> None:
    editor = await editors.start("neovim@v0.11", workspace, env={"CUDICE_GPU": "0"})
    uri = editor.open(workspace / "relu_cuda.py")
    editor.change(uri, editor.buffers[uri][0] + "\n# VERIFY_DELAY=60\n")
    task = asyncio.ensure_future(editor.command("cudice.verify", uri))
    # nothing new happens for a minute: the elapsed time is re-sent meanwhile
    await editor.wait_for(
        "$/progress",
        lambda: any(
            isinstance(r, lsp.WorkDoneProgressReport) and re.search(r" · [1-9]\d* s$", r.message or "")
            for r in _reports(editor, "verifying")
        ),
        timeout=60,
    )
    messages = [r.message or "" for r in _reports(editor, "verifying")]
    assert any(m.startswith("static: checked · compiling…") for m in messages), messages  # what runs now
    assert (await editor.command("cudice.cancel", uri))["cancelled"] >= 1
    assert await asyncio.wait_for(task, 30) is None
    await editor.wait_for(
        "window/showMessage",
        lambda: any(
            "verification of relu_cuda.py was cancelled" in m.message for m in editor.client.messages
        ),
        timeout=30,
    )
    assert _reports(editor, "verifying")[-1].message == "cancelled"
