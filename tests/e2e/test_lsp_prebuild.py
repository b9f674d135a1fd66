"""Building while editing (server/prebuild.py), through a real server and the scripted verifier:
on a GPU box a pause in typing sends the unsaved text to a compile-only build, the save that
follows verifies that same text in full, later edits replace the pending build, and without a GPU
nothing is built before the save. A spare verification worker waits for the save. Without a GPU,
opening a candidate starts the first compile error's preparation (server/workers/verify.py
`prepare_when_idle`) before any save."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from pathlib import Path

import pytest
from lsp_support import Editor, Editors, copy_example

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _calls(log: Path) -> list[dict[str, object]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


async def _until(log: Path, pred: object, timeout: float = 90.0) -> list[dict[str, object]]:
    """Wait (bounded) until the verifier's call log satisfies `pred`: the calls are in other processes."""
    deadline = time.monotonic() + timeout
    while True:
        calls = _calls(log)
        if pred(calls):  # type: ignore[operator]
            return calls
        assert time.monotonic() < deadline, f"verifier calls so far: {calls}"
        await asyncio.sleep(0.05)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    for name in ("relu.py", "relu_cuda.py"):
        copy_example(name, tmp_path / name)
    return tmp_path


async def _open_candidate(
    editors: Editors, workspace: Path, log: Path, *, gpu: str, quiet_s: str
) -> tuple[Editor, str]:
    """A server with the scripted verifier logging its calls to `log`, relu_cuda.py open in it."""
    env = {"CUDICE_GPU": gpu, "CUDICE_PREBUILD_QUIET_S": quiet_s, "CUDICE_FAKE_VERIFY_LOG": str(log)}
    editor = await editors.start("neovim@v0.11", workspace, env=env)
    return editor, editor.open(workspace / "relu_cuda.py")


async def test_a_pause_in_typing_builds_the_text_the_save_then_verifies(
    workspace: Path, editors: Editors, tmp_path: Path
) -> None:
    log = tmp_path / "calls.jsonl"
    editor, uri = await _open_candidate(editors, workspace, log, gpu="1", quiet_s="1.0")
    base = editor.buffers[uri][0]
    first, second = base + "\n# edit 1\n", base + "\n# edit 2\n"
    editor.change(uri, first)
    editor.change(uri, second)  # within the quiet time: only this text is built
    calls = await _until(log, lambda c: any(x["sha"] == _sha(second) for x in c))
    assert [(x["compile_only"], x["build_only"]) for x in calls] == [(False, True)]  # `second` built only
    editor.save(uri)
    status = await editor.wait_status(lambda s: s["uri"] == uri and s["lastVerdict"] == "correct")
    assert status["lastVerdict"] == "correct"
    calls = _calls(log)
    assert [(x["sha"], x["build_only"]) for x in calls] == [(_sha(second), True), (_sha(second), False)]


async def test_without_a_gpu_nothing_is_built_before_the_save(
    workspace: Path, editors: Editors, tmp_path: Path
) -> None:
    log = tmp_path / "calls.jsonl"
    editor, uri = await _open_candidate(editors, workspace, log, gpu="0", quiet_s="0.2")
    edited = editor.buffers[uri][0] + "\n# edit\n"
    editor.change(uri, edited)
    editor.save(uri)
    await editor.wait_status(lambda s: s["uri"] == uri and s["lastVerdict"] == "compiled")
    calls = [(x["sha"], x["compile_only"], x["build_only"]) for x in _calls(log)]
    assert calls == [(_sha(edited), True, False)]  # the save's compile-only run, nothing before it


PREP_VERIFIER = """
import json, os
from lsp_fakes.fake_verifier import quick_check, verify  # noqa: F401


def prepare_first_error(config, cancel=None):
    with open(os.environ["PREP_LOG"], "a") as f:
        f.write(json.dumps({"sha": "prepare", "pid": os.getpid()}) + "\\n")
    return True
"""


async def test_without_a_gpu_opening_a_candidate_prepares_the_first_error(
    workspace: Path, editors: Editors, tmp_path: Path
) -> None:
    log = tmp_path / "prep.jsonl"
    (tmp_path / "prep_verifier.py").write_text(PREP_VERIFIER)
    env = {
        "CUDICE_GPU": "0",
        "CUDICE_VERIFY_MODULE": "prep_verifier",
        "PREP_LOG": str(log),
        "PYTHONPATH": str(tmp_path),
    }
    editor = await editors.start("neovim@v0.11", workspace, env=env)
    editor.open(workspace / "relu.py")  # a reference: nothing to prepare for
    editor.open(workspace / "relu_cuda.py")  # a candidate, not saved, not edited
    calls = await _until(log, lambda c: len(c) >= 1)
    assert [x["sha"] for x in calls] == ["prepare"]
