"""The remote-GPU-box setup: `cudice-lsp --tcp` on one side, Neovim connecting with setup({tcp=…}).

Starts the real server listening on a free loopback port, then a headless Neovim with the
editors/nvim plugin connects to it (no process started by the editor). Asserts on what Neovim
received: attach, the model state in the statusline, the generate action on `class Model`.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from nvim_tools import PLUGIN, ROOT, nvim_or_skip, run_lua

pytestmark = pytest.mark.e2e
HERE = Path(__file__).resolve().parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def tcp_server(tmp_path: Path) -> Iterator[int]:
    nvim_or_skip()
    port = _free_port()
    log = (tmp_path / "server.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "cudice.server", "--tcp", "--host", "127.0.0.1", "--port", str(port)],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "CUDICE_CACHE_DIR": str(tmp_path / "cache")},
    )
    try:
        # Wait for the server's own "listening" log line: a probe connection would take the
        # server's client slot (pygls serves the first connection).
        deadline = time.monotonic() + 30
        while "listening on" not in (tmp_path / "server.log").read_text():
            if proc.poll() is not None:
                pytest.fail(
                    f"cudice-lsp --tcp exited with {proc.returncode}: {(tmp_path / 'server.log').read_text()}"
                )
            if time.monotonic() > deadline:
                pytest.fail("cudice-lsp --tcp did not report listening within 30 s")
            time.sleep(0.2)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()


def test_neovim_connects_to_a_tcp_server(tcp_server: int, tmp_path: Path) -> None:
    work = tmp_path / "examples"
    shutil.copytree(ROOT / "examples", work)
    out = tmp_path / "out.json"
    env = {
        "CUDICE_PLUGIN": str(PLUGIN),
        "CUDICE_WORK": str(work),
        "CUDICE_OUT": str(out),
        "CUDICE_TCP": f"127.0.0.1:{tcp_server}",
        "XDG_STATE_HOME": str(tmp_path / "state"),
    }
    proc = run_lua(HERE / "nvim_tcp_driver.lua", env, timeout=200)
    assert out.exists(), f"driver wrote nothing; stderr: {proc.stderr[-2000:]}"
    data = json.loads(out.read_text())
    assert not data["errors"], data
    assert data["setup_ok"] is True and data["attached"] is True
    assert data["statusline"] == "cudice: no model", data
    assert "cudice.generateKernel" in data["code_action_commands"], data
