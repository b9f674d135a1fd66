"""`cudice-lsp --tcp`: the set-up for a server next to a remote GPU (docs/server.md).

Over real sockets: a client initializes and shuts the server down; port probes (connect, close)
and clients that vanish without `shutdown` leave the server serving the next client; a second
client while one is connected is refused with an error that says why.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import time
from collections.abc import AsyncIterator

import pytest
from lsp_support import FAKES_ENV
from lsprotocol import types as lsp
from pygls.lsp.client import LanguageClient

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _server_argv(port: int, log_level: str) -> list[str]:
    """`cudice-lsp --tcp` on 127.0.0.1:`port`, run from this interpreter."""
    tcp = ["--tcp", "--host", "127.0.0.1", "--port", str(port), "--log-level", log_level]
    return [sys.executable, "-m", "cudice.server", *tcp]


async def test_tcp_server_answers_and_shuts_down() -> None:
    port = _free_port()
    proc = await asyncio.create_subprocess_exec(
        *_server_argv(port, "warning"), env=dict(os.environ), stdout=asyncio.subprocess.PIPE
    )
    client = LanguageClient("tcp-test", "0")
    try:
        deadline = time.monotonic() + 60  # the server binds after its imports: slow on a loaded box
        while True:
            try:
                await client.start_tcp("127.0.0.1", port)
                break
            except OSError:
                assert time.monotonic() < deadline, "the server did not listen within 60 s"
                await asyncio.sleep(0.05)
        result = await asyncio.wait_for(
            client.initialize_async(lsp.InitializeParams(capabilities=lsp.ClientCapabilities())), 30
        )
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


async def _start_server(port: int, tmp: str) -> asyncio.subprocess.Process:
    """The server with its log on stderr; returns once it says it is listening (no probe)."""
    env = {
        **os.environ,
        **FAKES_ENV,
        "CUDICE_CACHE_DIR": os.path.join(tmp, "cache"),
        "PYTHONPATH": os.pathsep.join([os.path.dirname(__file__), os.environ.get("PYTHONPATH", "")]),
    }
    proc = await asyncio.create_subprocess_exec(
        *_server_argv(port, "info"), env=env, stderr=asyncio.subprocess.PIPE
    )
    assert proc.stderr is not None
    while b"listening on" not in (line := await asyncio.wait_for(proc.stderr.readline(), 30)):
        assert line, "the server exited before listening"
    asyncio.get_running_loop().create_task(_drain(proc.stderr))
    return proc


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.readline():
        pass


@pytest.fixture
async def server_port(tmp_path: object) -> AsyncIterator[tuple[int, asyncio.subprocess.Process]]:
    port = _free_port()
    proc = await _start_server(port, str(tmp_path))
    try:
        yield port, proc
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def _initialized_client(port: int) -> LanguageClient:
    client = LanguageClient("tcp-test", "0")
    await client.start_tcp("127.0.0.1", port)
    result = await asyncio.wait_for(
        client.initialize_async(lsp.InitializeParams(capabilities=lsp.ClientCapabilities())), 30
    )
    assert result.server_info is not None and result.server_info.name == "cudice"
    client.initialized(lsp.InitializedParams())
    return client


async def _raw_request(port: int, method: str, params: object) -> dict[str, object]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode()
    writer.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    await writer.drain()
    length = 0
    while (line := await asyncio.wait_for(reader.readline(), 20)).strip():
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    answer = json.loads(await reader.readexactly(length))
    writer.close()
    assert isinstance(answer, dict)
    return answer


async def test_port_probes_leave_the_server_serving(
    server_port: tuple[int, asyncio.subprocess.Process],
) -> None:
    port, proc = server_port
    for payload in (
        b"",
        b"GET / HTTP/1.0\r\n\r\n",
        b"Content-Length: 5\r\n\r\n{",
    ):  # probe, health check, torn
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(payload)
        await writer.drain()
        writer.close()
        await writer.wait_closed()
    await asyncio.sleep(0.3)
    assert proc.returncode is None, "a probe connection stopped the server"
    client = await _initialized_client(port)
    try:
        await asyncio.wait_for(client.shutdown_async(None), 10)
        client.exit(None)
        assert await asyncio.wait_for(proc.wait(), 20) == 0
    finally:
        await client.stop()


async def test_second_client_is_refused_and_the_next_one_served(
    server_port: tuple[int, asyncio.subprocess.Process],
) -> None:
    port, proc = server_port
    first = await _initialized_client(port)
    try:
        refused = await _raw_request(port, "initialize", {"capabilities": {}})
        error = refused.get("error")
        assert isinstance(error, dict) and "one client at a time" in str(error["message"]), refused
        # The connected client is not disturbed.
        got = await asyncio.wait_for(
            first.workspace_execute_command_async(
                lsp.ExecuteCommandParams(command="cudice.cancel", arguments=[])
            ),
            10,
        )
        assert got == {"cancelled": 0}
    finally:  # vanishes without shutdown/exit (a crashed editor, a dropped tunnel)
        writer = first.protocol.writer
        assert isinstance(writer, asyncio.StreamWriter)
        writer.close()  # pygls' client.stop() leaves its TCP socket open
        await first.stop()
    # The next client gets a fresh session: initialize works again and the server exits on its exit.
    # Reconnecting at once works: a newcomer waits for the dropped session's clean-up.
    answer = await _raw_request(port, "initialize", {"capabilities": {}})
    assert "result" in answer and answer["result"]["serverInfo"]["name"] == "cudice", answer  # type: ignore[index]
    assert proc.returncode is None
    third = await _initialized_client(port)
    try:
        await asyncio.wait_for(third.shutdown_async(None), 10)
        third.exit(None)
        assert await asyncio.wait_for(proc.wait(), 20) == 0
    finally:
        await third.stop()
