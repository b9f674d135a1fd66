"""The `editors` fixture (conftest.py) cleans up after failed tests and reports what it cleaned.

A pytest run in a child process executes a small test module against a copy of this folder's
conftest.py: tests that fail inside an editor session (plain, after sending `shutdown` themselves,
while a build runs "compilers" in their own session, after SIGKILLing the server) and one that
passes but leaves a process of the server's family behind. Each inner test records its server's
pid and family tag; once the inner run is over, this test asserts that it failed the way the inner
tests did (not at start-up), that the leaked process was killed and reported as a teardown error,
and that no process of any recorded family is left. Scripted stand-ins (`lsp_fakes/`) do the work.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from lsp_support import HERE, REPO, family_processes

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(600)]

INNER = """
import asyncio
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import lsp_support
from lsp_support import family_processes

RECORD = Path(os.environ["CUDICE_TEARDOWN_RECORD"])
EXAMPLES = Path(os.environ["CUDICE_TEARDOWN_EXAMPLES"])


def _record(name, editor):
    with RECORD.open("a") as f:
        f.write(json.dumps({"test": name, "pid": editor.client._server.pid, "family": editor.family}) + "\\n")


async def test_fails_mid_session(editors, tmp_path):
    editor = await editors.start("neovim@v0.11", tmp_path)
    _record("mid_session", editor)
    raise AssertionError("deliberate failure: mid_session")


async def test_fails_after_its_own_shutdown(editors, tmp_path):
    editor = await editors.start("visual-studio-code", tmp_path)
    _record("own_shutdown", editor)
    await asyncio.wait_for(editor.shutdown(), 30)
    raise AssertionError("deliberate failure: own_shutdown")


async def test_fails_while_compilers_run(editors, tmp_path):
    for name in ("relu.py", "relu_cuda.py"):
        shutil.copy(EXAMPLES / name, tmp_path / name)
    path = tmp_path / "relu_cuda.py"
    path.write_text(path.read_text() + "\\n# SPAWN_COMPILER\\n")
    editor = await editors.start("neovim@v0.11", tmp_path, env={"CUDICE_GPU": "0"})
    _record("compilers", editor)
    editor.save(editor.open(path))
    deadline = time.monotonic() + 120
    while {"sleep 301", "sleep 302"} - set(family_processes(editor.family).values()):
        assert time.monotonic() < deadline, "the scripted compilers never started"
        await asyncio.sleep(0.1)
    raise AssertionError("deliberate failure: compilers")


async def test_fails_after_killing_the_server(editors, tmp_path):
    editor = await editors.start("visual-studio-code", tmp_path)
    _record("killed", editor)
    os.kill(editor.client._server.pid, signal.SIGKILL)
    raise AssertionError("deliberate failure: killed")


async def test_passes_but_leaks_a_process(editors, tmp_path):
    lsp_support.FAMILY_S = 3.0  # this child process only: the leak is known, do not wait a minute for it
    editor = await editors.start("visual-studio-code", tmp_path)
    _record("leak", editor)
    subprocess.Popen(["sleep", "307"], env={**os.environ, lsp_support.FAMILY_VAR: editor.family},
                     start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
"""

INI = """[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
timeout = 300
"""


def test_failed_tests_leave_no_server_process_and_a_leak_is_reported(tmp_path: Path) -> None:
    inner = tmp_path / "inner"
    inner.mkdir()
    (inner / "pytest.ini").write_text(INI)
    (inner / "conftest.py").write_text((HERE / "conftest.py").read_text())
    (inner / "test_inner.py").write_text(INNER)
    record = tmp_path / "record.jsonl"
    env = {
        **os.environ,
        "CUDICE_TEARDOWN_RECORD": str(record),
        "CUDICE_TEARDOWN_EXAMPLES": str(REPO / "examples"),
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider", str(inner)],
        cwd=inner,
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 1, out  # tests failed (not an internal or usage error)
    summary = out.strip().splitlines()[-1]
    assert re.search(r"\b4 failed\b", summary) and re.search(r"\b1 passed\b", summary), summary
    assert re.search(r"\b1 error\b", summary), out  # only the leak fails at teardown
    for name in ("mid_session", "own_shutdown", "compilers", "killed"):
        assert f"deliberate failure: {name}" in out, out  # failed in the body, after start-up
    # Only the leak's teardown complains: one ERROR in the short summary (which pytest cuts to the
    # terminal's width, so its message is not read here) and one teardown assertion in the report.
    errors = re.findall(r"^ERROR (\S+)", out, re.MULTILINE)
    assert errors == ["test_inner.py::test_passes_but_leaks_a_process"], out
    (leak,) = re.findall(r"^E +AssertionError: editor teardown: .*", out, re.MULTILINE)
    assert "outlived the server" in leak and "'sleep 307'" in leak, leak

    records = [json.loads(line) for line in record.read_text().splitlines()]
    assert sorted(r["test"] for r in records) == [
        "compilers",
        "killed",
        "leak",
        "mid_session",
        "own_shutdown",
    ]
    for r in records:  # the server itself carries the tag too
        assert family_processes(r["family"]) == {}, (r, out)
