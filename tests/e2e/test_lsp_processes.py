"""No orphans: after a cancel, a superseding save, a timeout, a quit (`shutdown` + `exit`), an
editor that vanishes (the server's stdin closes, nothing else) and a SIGKILL of the server, the
process table holds none of the server's descendants (compilers in their own sessions included).

The scripted verifier (`lsp_fakes/fake_verifier.py`, marker `SPAWN_COMPILER`) starts a "compiler"
through the real `verifier.build.objects.run_process` (a new session with a forked grandchild) and a
"clangd" child of the quick worker. Every process the server starts inherits the environment
variable `CUDICE_TEST_FAMILY=<tag>`, which is how the test finds them after they were re-parented.
Waits poll the process table against generous deadlines (a loaded 2-core box).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from lsp_support import Editor, Editors, copy_example, family_processes
from lsprotocol import types as lsp

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]
DEADLINE_S = 120.0
ORPHAN_S = 30.0  # a dead server's descendants go within this: workers poll their parent every 0.5 s
COMPILERS = ("sleep 301", "sleep 302")  # the scripted build's compiler and its forked grandchild


async def _until(what: str, done: Callable[[], bool], timeout_s: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s:.0f} s: {what}")
        await asyncio.sleep(0.1)


def _running(tag: str, *names: str) -> list[str]:
    """Tagged processes whose command line is one of `names` or ends with one of them."""
    return [
        cmd for cmd in family_processes(tag).values() if any(cmd == n or cmd.endswith(" " + n) for n in names)
    ]


@pytest.fixture
def candidate(tmp_path: Path) -> Path:
    for name in ("relu.py", "relu_cuda.py"):
        copy_example(name, tmp_path / name)
    path = tmp_path / "relu_cuda.py"
    path.write_text(path.read_text() + "\n# SPAWN_COMPILER\n")
    return path


async def test_cancel_and_a_killed_server_leave_no_descendants(candidate: Path, editors: Editors) -> None:
    tag = uuid.uuid4().hex
    editor = await editors.start(
        "neovim@v0.11", candidate.parent, env={"CUDICE_TEST_FAMILY": tag, "CUDICE_GPU": "0"}
    )
    uri = editor.open(candidate)
    editor.save(uri)  # right after initialize: races the quick worker's start-up
    await _until(
        "the compiler, its grandchild and the quick check's child run",
        lambda: len(_running(tag, "sleep 301", "sleep 302", "sleep 303")) == 3,
    )
    assert len(_running(tag, "-m cudice.server.workers.quick_child")) == 1, family_processes(tag)

    # 1. a cancel kills the build's whole family, compilers in their own session included
    assert (await editor.command("cudice.cancel", uri))["cancelled"] >= 1
    await _until(
        "the cancelled build's compilers are gone",
        lambda: not _running(tag, "sleep 301", "sleep 302", "-m cudice.server.workers.verify_child"),
    )

    # 2. a newer save supersedes the running build: the old compilers go too
    editor.save(uri)
    await _until(
        "the second build's compilers run", lambda: len(_running(tag, "sleep 301", "sleep 302")) == 2
    )
    first = {
        p
        for p, c in family_processes(tag).items()
        if c in ("sleep 301", "sleep 302") or "workers.verify_child" in c
    }
    editor.change(uri, editor.buffers[uri][0] + "\n# edited\n")
    editor.save(uri)
    await _until(
        "the superseded build is gone and the newer one runs",
        lambda: len(_running(tag, "sleep 301", "sleep 302")) == 2 and not first & set(family_processes(tag)),
    )

    # 3. SIGKILL of the server: workers, clangd stand-in and compilers all die on their own, promptly
    server = editor.client._server
    assert server is not None
    os.kill(server.pid, signal.SIGKILL)
    await _until("every descendant of the killed server is gone", lambda: not family_processes(tag), ORPHAN_S)
    await editors.stop(editor)
    assert not family_processes(tag)


async def test_clangd_warms_only_once_a_candidate_is_open(candidate: Path, editors: Editors) -> None:
    tag = uuid.uuid4().hex
    editor = await editors.start("visual-studio-code", candidate.parent, env={"CUDICE_TEST_FAMILY": tag})
    editor.open(candidate.parent / "relu.py")  # a reference, not a candidate
    await editor.wait_status(lambda s: s["model"] == "missing")  # start-up is done
    hover = await editor.client.text_document_hover_async(
        lsp.HoverParams(
            lsp.TextDocumentIdentifier((candidate.parent / "relu.py").as_uri()), lsp.Position(0, 0)
        )
    )
    assert hover is None  # the server answered: had it started clangd, it would be running by now
    assert not _running(tag, "-m cudice.server.workers.quick_child")
    editor.open(candidate)
    await _until(
        "the quick worker starts for the open candidate",
        lambda: len(_running(tag, "-m cudice.server.workers.quick_child")) == 1,
    )


async def _compilers_run(tag: str, editor: Editor, uri: str) -> None:
    editor.save(uri)
    await _until("the build's compilers run", lambda: len(_running(tag, *COMPILERS)) == 2)


@pytest.mark.slow  # the timeout alone is 32 s (twice 1 s + the 30 s margin)
async def test_a_timeout_a_quit_and_a_vanished_editor_leave_no_descendants(
    candidate: Path, editors: Editors
) -> None:
    # 1. a build past its time limit (twice 1 s of verification + the server's 30 s margin) is killed
    #    with its compilers, and the user gets the `timeout` verdict
    tag = uuid.uuid4().hex
    editor = await editors.start(
        "neovim@v0.11",
        candidate.parent,
        env={"CUDICE_TEST_FAMILY": tag, "CUDICE_GPU": "0"},
        init_options={"cudice": {"verify": {"timeoutSeconds": 1}}},
    )
    uri = editor.open(candidate)
    await _compilers_run(tag, editor, uri)
    await editor.wait_status(lambda s: s["uri"] == uri and s["lastVerdict"] == "timeout", timeout=DEADLINE_S)
    assert not _running(tag, *COMPILERS, "-m cudice.server.workers.verify_child"), family_processes(tag)
    diags = await editor.wait_diagnostics(uri, lambda d: any(x.code == "server.verify_failed" for x in d))
    assert any("timeout" in d.message and "cudice.verify.timeoutSeconds" in d.message for d in diags), diags

    # 2. quitting while a build runs: `shutdown` + `exit` take the whole family down
    await _compilers_run(tag, editor, uri)
    await editors.stop(editor)  # raises when the server or any descendant outlives it
    assert not family_processes(tag)

    # 3. the editor vanishes (its end of the server's stdin closes, no `shutdown`, no `exit`)
    tag = uuid.uuid4().hex
    editor = await editors.start(
        "visual-studio-code", candidate.parent, env={"CUDICE_TEST_FAMILY": tag, "CUDICE_GPU": "0"}
    )
    uri = editor.open(candidate)
    await _compilers_run(tag, editor, uri)
    server = editor.client._server
    assert server is not None and server.stdin is not None
    server.stdin.close()
    await asyncio.wait_for(server.wait(), DEADLINE_S)
    await _until(
        "every descendant of the abandoned server is gone", lambda: not family_processes(tag), ORPHAN_S
    )
    await editors.stop(editor)
