"""Neovim attaches where VS Code activates, loads the model on the first generate, shows progress.

A real headless Neovim with editors/nvim and the real `cudice-lsp` (scripted model and verifier,
`lsp_fakes`): a plain Python file gets no client; a reference in a `.cudice` project and a
candidate of another project share one client; the model stays unloaded ("model not loaded")
until :CudiceGenerate, whose work-done progress reaches the statusline and Neovim's
`LspProgress` event (what progress plug-ins such as fidget.nvim read). The generated candidate's
verdict turns "(edited)" on an unsaved edit, and :CudiceStatus reads "cudice: ready · …".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from lsp_support import REPO
from nvim_support import scripted_nvim_env
from nvim_tools import run_lua

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]
HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    work = tmp_path_factory.mktemp("nvim_attach")
    (work / "plain").mkdir()
    (work / "plain" / "tool.py").write_text("import os\n\nprint(os.getcwd())\n")
    (work / "proj" / "ckpt").mkdir(parents=True)
    (work / "proj" / ".cudice").write_text("")
    (work / "proj" / "relu.py").write_text((REPO / "examples" / "relu.py").read_text())
    (work / "other").mkdir()
    (work / "other" / "k_cuda.py").write_text((REPO / "examples" / "relu_cuda.py").read_text())
    out = work / "out.json"
    env = scripted_nvim_env(work, out, work / "state", 40)  # 40 tokens: 4 s of progress to see
    proc = run_lua(HERE / "nvim_lazy_driver.lua", env, timeout=480)
    assert out.exists(), f"the driver wrote nothing (exit {proc.returncode}); stderr: {proc.stderr[-2000:]}"
    data: dict[str, Any] = json.loads(out.read_text())
    assert not data["errors"], data
    return data


def test_only_cudice_files_attach_and_share_one_client(session: dict[str, Any]) -> None:
    assert session["attached"] is True and session["plain_attached"] is False
    assert session["other_attached"] is True and session["num_clients"] == 1


def test_the_model_loads_on_the_first_generate(session: dict[str, Any]) -> None:
    assert session["statusline_idle"] == "cudice: model not loaded", session
    assert session["generated"] is True
    assert "cudice: loading model" in session["progress_titles"], session["progress_titles"]
    assert session["statusline_after"].startswith("cudice: ready"), session


def test_generate_progress_reaches_the_statusline_and_lsp_progress(session: dict[str, Any]) -> None:
    assert any(t.startswith("cudice: generating a CUDA kernel for Model") for t in session["progress_titles"])
    lines = session["progress_statuslines"]
    assert any("tokens" in s and "%)" in s for s in lines), lines


def test_the_statusline_marks_an_edited_verdict_and_status_reads_well(session: dict[str, Any]) -> None:
    assert session["statusline_verdict"] == "cudice: ready · compiled", session
    assert session["statusline_edited"] == "cudice: ready · compiled (edited)", session
    note = session["status_note"]
    assert note.startswith("cudice: ready · compiled (edited)") and "cudice: cudice:" not in note, note
