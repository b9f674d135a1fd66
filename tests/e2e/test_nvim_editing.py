"""What a Neovim user sees while editing, through the commands they type (real headless Neovim,
editors/nvim, the real `cudice-lsp`; scripted model and verifier, `lsp_fakes`):

- a candidate overwritten so it has no `ModelNew` loses its statusline verdict and its old
  diagnostics on `:w`, and on `:CudiceVerify`;
- `:CudiceGenerate` on a reference with a syntax error says why in a message, in words
  (no raw position dict such as `{'character': ...}`);
- `:'<,'>CudiceInfill` over whole lines from the `__global__` signature keeps that line, and its
  progress reaches the statusline;
- `:bdelete` of a buffer whose verification runs cancels it: the verification worker is killed and
  its work-done progress ends "cancelled";
- `:edit` of a buffer whose verification runs (Neovim reloads it: didClose, then didOpen) cancels
  that run and verifies it again, so a verdict still comes;
- the server's info lines never land in Neovim's lsp.log as `[ERROR]` (Neovim labels every stderr
  line of a server so), also those logged before `initialized` (a setting rejected at `initialize`).

The driver is nvim_editing_driver.lua; one Neovim session serves every test of the module.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from lsp_support import REPO
from nvim_support import scripted_nvim_env
from nvim_tools import run_lua

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]
HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    work = tmp_path_factory.mktemp("nvim_editing")
    proj = work / "proj"
    (proj / "ckpt").mkdir(parents=True)
    (proj / ".cudice").write_text("")
    reference = (REPO / "examples" / "relu.py").read_text()
    candidate = (REPO / "examples" / "relu_cuda.py").read_text()
    files = {
        "relu.py": reference,
        "a_cuda.py": candidate,
        "b_cuda.py": candidate,
        "c_cuda.py": candidate,
        "slow_cuda.py": candidate + "\n# SLOW_VERIFY\n",  # the scripted run sleeps 300 s
        "e_cuda.py": candidate + "\n# VERIFY_DELAY=3\n",  # running for 3 s: reloaded meanwhile
        "broken.py": reference.replace("def forward(self, x", "def forward(self x", 1),
    }
    past = time.time() - 3600  # not "saved while the server started" (lsp_support.copy_example)
    for name, text in files.items():
        (proj / name).write_text(text)
        os.utime(proj / name, (past, past))
    out = work / "out.json"
    state = work / "state"
    # 30 tokens: 3 s of infill progress to see
    env = scripted_nvim_env(work, out, state, 30, {"CUDICE_FAKE_VERIFY_LOG": str(work / "verify.log")})
    proc = run_lua(HERE / "nvim_editing_driver.lua", env, timeout=840)
    assert out.exists(), f"the driver wrote nothing (exit {proc.returncode}); stderr: {proc.stderr[-2000:]}"
    data: dict[str, Any] = json.loads(out.read_text())
    log = state / "nvim" / "lsp.log"
    data["lsp_log"] = log.read_text(errors="replace") if log.exists() else ""
    data["broken_line"] = next(i for i, t in enumerate(files["broken.py"].splitlines(), 1) if "(self x" in t)
    assert "setup" not in data["errors"], data["errors"]
    return data


def _ran(session: dict[str, Any], point: str) -> None:
    assert point not in session["errors"], session["errors"][point]


@pytest.mark.parametrize("how", ["a_save", "a_verify"])
def test_an_overwritten_candidate_loses_its_verdict_and_diagnostics(
    session: dict[str, Any], how: str
) -> None:
    _ran(session, "a")
    rec = session[how]
    assert rec["verdict"].endswith("· compiled") and rec["codes_before"], rec
    assert rec["cleared"] is True, rec
    assert rec["codes_after"] == [] and " · " not in rec["statusline_after"], rec


def test_generate_on_a_reference_with_a_syntax_error_says_why(session: dict[str, Any]) -> None:
    _ran(session, "b")
    assert "parse.syntax_error" in session["b_codes"], session["b_codes"]
    msgs = session["b_messages"] + [n["msg"] for n in session["b_notes"]]
    assert any(
        "cannot generate for broken.py" in m and f"syntax error on line {session['broken_line']}" in m
        for m in msgs
    ), msgs
    assert not any("{'" in m or '{"' in m for m in msgs), msgs
    assert session["b_generated"] is False


def test_infill_of_whole_lines_keeps_the_signature_and_shows_progress(session: dict[str, Any]) -> None:
    _ran(session, "c")
    assert session["c_done"] is True, session["c_after"]
    after = session["c_after"]
    assert session["c_signature"].startswith("__global__ void relu_kernel(")
    assert session["c_signature"] in after, after
    assert "// written by the fake engine" in after, after
    lines = session["infill_statuslines"]
    assert any("infilling the kernel body" in s and "tokens" in s for s in lines), lines


def test_bdelete_cancels_the_running_verification(session: dict[str, Any]) -> None:
    _ran(session, "d")
    assert session["d_alive_before"] is True, session
    assert session["d_gone"] is True, f"verification worker {session['d_pid']} still running after :bdelete"
    assert session["d_progress_ends"] == ["cancelled"], session["d_progress_ends"]
    assert session["d_verifying_after"] is False, session


def test_the_servers_info_lines_are_not_errors_in_lsp_log(session: dict[str, Any]) -> None:
    log = session["lsp_log"]
    rejected = "cudice.sampler.maxNewTokens"
    seen = [line for line in log.splitlines() if rejected in line]
    assert seen, f"the rejected setting's warning is not in lsp.log:\n{log[-3000:]}"
    errors = [line for line in log.splitlines() if line.startswith("[ERROR]")]
    infos = [line for line in errors if " INFO " in line or " WARNING " in line or rejected in line]
    assert not infos, "server info lines logged as [ERROR]:\n" + "\n".join(infos)
    assert any(line.startswith("[INFO]") for line in seen), seen


def test_a_buffer_reloaded_while_verified_still_gets_its_verdict(session: dict[str, Any]) -> None:
    _ran(session, "e")
    assert session["e_same_buffer"] is True
    assert session["e_statusline"].endswith("· compiled"), session["e_statusline"]
    assert session["e_progress_ends"] == ["cancelled", "compiled"], session["e_progress_ends"]
