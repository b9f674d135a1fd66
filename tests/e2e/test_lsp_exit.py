"""`exit` over stdio (`python -m cudice.server`, what `cudice-lsp` runs), spoken to frame by frame.
The LSP specification asks for exit code 0 when `shutdown` came before `exit`, else 1
(https://microsoft.github.io/language-server-protocol/specifications/lsp/3.17/specification/#exit).
A client may send `exit` right behind `shutdown`, without waiting for its reply: the server lets the
shutdown it is in the middle of (closing its workers) finish and exits with 0. An `exit` without
`shutdown` (an editor that skips it) exits with 1, and its workers are closed all the same. Ctrl-C (SIGINT)
exits with 130, as the TCP server does. In every case no traceback is printed and no process of the
server's family is left. Scripted model and
verifier (`lsp_fakes`).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from lsp_support import FAKES_ENV, FAMILY_VAR, HERE, wait_family_gone

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]
WAIT_S = 120.0  # bound on each step (a loaded 2-core box; the model worker starts and loads)
SHUTDOWN = {"id": 2, "method": "shutdown"}
EXIT = {"method": "exit"}


def _frame(message: dict[str, Any]) -> bytes:
    body = json.dumps({"jsonrpc": "2.0", **message}).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


async def _read(stdout: asyncio.StreamReader) -> dict[str, Any] | None:
    """The next message from the server; None at the end of its output."""
    length = None
    while True:
        line = await stdout.readline()
        if not line:
            return None
        if not line.strip():
            break
        name, _, value = line.decode("ascii").partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    assert length is not None, "a frame without Content-Length"
    found: dict[str, Any] = json.loads(await stdout.readexactly(length))
    return found


async def _until(stdout: asyncio.StreamReader, what: str, done: Any) -> None:
    seen: list[dict[str, Any]] = []

    async def loop() -> None:
        while True:
            message = await _read(stdout)
            assert message is not None, f"the server ended its output before {what}: {seen[-5:]}"
            if done(message):
                return
            seen.append(message)

    try:
        await asyncio.wait_for(loop(), WAIT_S)
    except asyncio.TimeoutError:
        raise AssertionError(f"no {what} within {WAIT_S:.0f} s; the last messages: {seen[-5:]}") from None


async def _end_with(
    tmp_path: Path, last: list[dict[str, Any]], signal_number: int | None = None, close: bool = False
) -> tuple[int, str, dict[int, str]]:
    """Start the server, wait until its model worker is ready, write the `last` frames in one go
    (or send it `signal_number`, or `close` its stdin); (its exit code, its stderr, the processes
    of its family left)."""
    tag = uuid.uuid4().hex
    env = {**os.environ, **FAKES_ENV, FAMILY_VAR: tag, "CUDICE_CACHE_DIR": str(tmp_path / "cache")}
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
    proc = await asyncio.create_subprocess_exec(
        *[sys.executable, "-m", "cudice.server"],
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=tmp_path,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    stderr = asyncio.ensure_future(proc.stderr.read())  # read all along: a full pipe would block it
    try:
        # Tests see no bundled model (tests/conftest.py), so without a path the model would be
        # `missing` and run no worker; the scripted engine loads any folder.
        (tmp_path / "ckpt").mkdir()
        options = {"cudice": {"model": {"path": str(tmp_path / "ckpt")}}}
        init = {"processId": os.getpid(), "rootUri": tmp_path.as_uri(), "capabilities": {}}
        init["initializationOptions"] = options
        proc.stdin.write(_frame({"id": 1, "method": "initialize", "params": init}))
        await _until(proc.stdout, "answering initialize", lambda m: m.get("id") == 1)
        proc.stdin.write(_frame({"method": "initialized", "params": {}}))
        await _until(  # the model worker runs: the end of the session has a process to close
            proc.stdout,
            "loading the model",
            lambda m: m.get("method") == "cudice/status" and m["params"]["model"] == "ready",
        )
        if signal_number is not None:
            proc.send_signal(signal_number)
        proc.stdin.write(b"".join(_frame(message) for message in last))
        await proc.stdin.drain()
        if close:
            proc.stdin.close()

        async def drain() -> None:
            while await _read(proc.stdout) is not None:  # type: ignore[arg-type]
                pass

        await asyncio.wait_for(drain(), WAIT_S)
        code = await asyncio.wait_for(proc.wait(), WAIT_S)
        errors = (await asyncio.wait_for(stderr, WAIT_S)).decode(errors="replace")
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    return code, errors, await wait_family_gone(tag, WAIT_S)


async def test_exit_sent_before_the_shutdown_reply_ends_the_server_cleanly(tmp_path: Path) -> None:
    code, errors, left = await _end_with(tmp_path, [SHUTDOWN, EXIT])
    assert code == 0, errors[-4000:]
    assert "Traceback" not in errors, errors[-4000:]
    assert left == {}  # its workers ended with its shutdown


async def test_exit_without_shutdown_ends_the_server_with_code_1(tmp_path: Path) -> None:
    code, errors, left = await _end_with(tmp_path, [EXIT])
    assert code == 1, errors[-4000:]
    assert "Traceback" not in errors, errors[-4000:]
    assert left == {}  # its workers ended with it


async def test_ctrl_c_ends_the_server_with_code_130_like_the_tcp_server(tmp_path: Path) -> None:
    code, errors, left = await _end_with(tmp_path, [], signal.SIGINT)
    assert code == 130, errors[-4000:]  # 128 + SIGINT, as a shell reports it and `--tcp` exits
    assert "Traceback" not in errors, errors[-4000:]
    assert left == {}


async def test_the_end_of_stdin_ends_the_server_cleanly_and_leaves_no_process(tmp_path: Path) -> None:
    code, errors, left = await _end_with(tmp_path, [], close=True)
    assert code == 0, errors[-4000:]  # no `exit` was sent; nothing asks for another code
    assert "Traceback" not in errors, errors[-4000:]
    assert left == {}
