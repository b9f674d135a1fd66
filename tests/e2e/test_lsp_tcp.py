"""`cudice-lsp --tcp`: the set-up for a server next to a remote GPU (docs/server.md)."""

from __future__ import annotations

import asyncio
import os
import socket
import sys

import pytest
from lsprotocol import types as lsp
from pygls.lsp.client import LanguageClient

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_tcp_server_answers_and_shuts_down() -> None:
    port = _free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "cudice.server", "--tcp", "--host", "127.0.0.1", "--port", str(port),
        "--log-level", "warning", env=dict(os.environ), stdout=asyncio.subprocess.PIPE)
    client = LanguageClient("tcp-test", "0")
    try:
        for _ in range(200):  # the server binds after its imports
            try:
                await client.start_tcp("127.0.0.1", port)
                break
            except OSError:
                await asyncio.sleep(0.05)
        result = await asyncio.wait_for(client.initialize_async(lsp.InitializeParams(
            capabilities=lsp.ClientCapabilities())), 30)
        assert result.server_info is not None and result.server_info.name == "cudice"
        assert result.capabilities.execute_command_provider is not None
        assert "cudice.verify" in result.capabilities.execute_command_provider.commands
        await client.shutdown_async(None)
        client.exit(None)
        assert await asyncio.wait_for(proc.wait(), 20) == 0
        assert proc.stdout is not None and await proc.stdout.read() == b""  # nothing on stdout in TCP mode
    finally:
        if proc.returncode is None:
            proc.kill()
        await client.stop()
