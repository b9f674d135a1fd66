"""Bad input never breaks the server: broken frames, unreadable requests, a reference that is not
UTF-8, a 2 MB file, a save that happened before the editor attached.

The frame-level checks drive `python -m cudice.server` over raw pipes (a real client library
would refuse to send such frames); the others use the pytest-lsp editor of `lsp_support.py`
with the scripted verifier. Every wait is on a message, bounded.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from lsp_support import FAKES_ENV, HERE, Editors, copy_example
from lsprotocol import types as lsp

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]
WAIT_S = 60.0


def _frame(payload: dict[str, Any] | bytes) -> bytes:
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


class RawClient:
    """A JSON-RPC peer on the server's stdio that can send anything."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.received: list[dict[str, Any]] = []

    def send(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)

    async def read_one(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        length = 0
        while (line := await self.proc.stdout.readline()).strip():
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        msg: dict[str, Any] = json.loads(await self.proc.stdout.readexactly(length))
        self.received.append(msg)
        return msg

    async def response(self, msg_id: int) -> dict[str, Any]:
        async def find() -> dict[str, Any]:
            while True:
                msg = await self.read_one()
                if msg.get("id") == msg_id and "method" not in msg:
                    return msg

        return await asyncio.wait_for(find(), WAIT_S)


async def test_broken_frames_and_unreadable_requests_are_answered_or_ignored(tmp_path: Path) -> None:
    env = {
        **os.environ,
        **FAKES_ENV,
        "CUDICE_CACHE_DIR": str(tmp_path / "cache"),
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "cudice.server",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        env=env,
    )
    client = RawClient(proc)
    try:
        client.send(
            _frame(
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "initialize",
                    "params": {"processId": None, "rootUri": tmp_path.as_uri(), "capabilities": {}},
                }
            )
        )
        assert "capabilities" in (await client.response(1))["result"]
        client.send(_frame({"jsonrpc": "2.0", "method": "initialized", "params": {}}))
        # a frame without Content-Length (its body has no newline: it glues onto the next header)
        client.send(b'Content-Type: application/vscode-jsonrpc\r\n\r\n{"jsonrpc": "2.0", "method": "x"}')
        client.send(
            _frame({"jsonrpc": "2.0", "id": 2, "method": "cudice/nothing", "params": {}})
        )  # unknown: an error
        assert (await client.response(2))["error"]["code"] == -32601
        client.send(_frame(b"{not json"))  # not JSON at all
        client.send(
            _frame({"jsonrpc": "2.0", "id": 3, "method": "textDocument/hover", "params": {"nope": 1}})
        )
        bad = await client.response(3)
        assert bad["error"]["code"] == -32602 and "textDocument/hover" in bad["error"]["message"]
        client.send(
            _frame(
                {
                    "jsonrpc": "2.0",
                    "id": 4,
                    "method": "textDocument/hover",
                    "params": {
                        "textDocument": {"uri": (tmp_path / "x.py").as_uri()},
                        "position": {"line": 0, "character": 0},
                    },
                }
            )
        )
        assert (await client.response(4))["result"] is None  # still serving
        client.send(_frame({"jsonrpc": "2.0", "id": 5, "method": "shutdown"}))
        assert "error" not in await client.response(5)
        popups = [
            m
            for m in client.received
            if m.get("method") == "window/showMessage" and "Error in server" in m["params"]["message"]
        ]
        assert popups == []
        client.send(_frame({"jsonrpc": "2.0", "method": "exit"}))
        assert await asyncio.wait_for(proc.wait(), WAIT_S) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    for name in ("relu.py", "relu_cuda.py"):
        copy_example(name, tmp_path / name)
    return tmp_path


async def test_a_reference_that_is_not_utf8_gives_no_internal_error(
    workspace: Path, editors: Editors
) -> None:
    ref = workspace / "relu.py"
    ref.write_bytes(ref.read_bytes() + b"\n# \xff\xfe broken bytes " + b"x" * 5000 + b"\n")
    editor = await editors.start("neovim@v0.11", workspace)
    uri = editor.open(workspace / "relu_cuda.py")
    editor.save(uri)
    await editor.wait_status(lambda s: s["uri"] == uri and s["lastVerdict"] is not None, timeout=WAIT_S)
    assert not [m for m in editor.client.messages if "internal error" in m.message]
    assert all(len(m.message) < 1000 for m in editor.client.messages)


async def test_a_huge_file_is_left_alone_and_said_so_once(workspace: Path, editors: Editors) -> None:
    big = workspace / "big_cuda.py"
    big.write_text((workspace / "relu_cuda.py").read_text() + "\n" + "x = 1  # padding\n" * 120_000)  # ~2 MB
    editor = await editors.start("visual-studio-code", workspace)
    uri = editor.open(big)
    line = next(i for i, t in enumerate(editor.buffers[uri][0].splitlines()) if "class ModelNew" in t)
    for _ in range(3):  # each request after an edit would parse 2 MB again
        editor.change(uri, editor.buffers[uri][0] + "# edit\n")
        hover = await editor.client.text_document_hover_async(
            lsp.HoverParams(lsp.TextDocumentIdentifier(uri), lsp.Position(line, 8))
        )
        assert hover is None
        assert await editor.code_actions(uri, line, 8) == []
    notes = [m for m in editor.client.messages if "big_cuda.py" in m.message and "KiB" in m.message]
    assert len(notes) == 1, editor.client.messages
    small = editor.open(workspace / "relu_cuda.py")  # other files are served as usual
    lenses = await editor.client.text_document_code_lens_async(
        lsp.CodeLensParams(lsp.TextDocumentIdentifier(small))
    )
    assert lenses


async def test_a_save_made_before_the_editor_attached_is_verified(workspace: Path, editors: Editors) -> None:
    editor = await editors.start("neovim@v0.11", workspace)
    path = workspace / "relu_cuda.py"
    path.write_text(path.read_text() + "\n# saved while the client was attaching\n")  # no didSave follows
    uri = editor.open(path)
    await editor.wait_status(lambda s: s["uri"] == uri and s["lastVerdict"] is not None, timeout=WAIT_S)
    other = editor.open(workspace / "relu.py")  # not saved since the server started: not verified
    assert not [s for s in editor.statuses if s["uri"] == other]
