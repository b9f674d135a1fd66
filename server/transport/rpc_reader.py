"""The server's JSON-RPC read loop: pygls' `run_async`, made robust against bad frames.

pygls 2.1.1's loop (`pygls/io_.py::run_async`) has three failure modes with a misbehaving client:
- a frame without a `Content-Length` header leaves its body glued to the next frame's header
  line, which then never matches, and so on for every later frame: the server goes deaf;
- a request whose params do not fit the method's type (a hover without `position`) is never
  answered: the client waits forever;
- every unreadable message becomes an "Error in server" popup (`report_server_error`).
Here a header is found anywhere at the end of a line (garbage before it is dropped, logged),
a request that cannot be read is answered with the JSON-RPC error for it (-32602 invalid
params, -32600 invalid request; a body that is not JSON has no id to answer: it is logged), and
nothing is shown to the user: the log has it.

Not covered: the `Content-Type` header (ignored, as pygls does); bodies over `MAX_BODY_BYTES`
are skipped and answered only by the log.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from typing import Any, Protocol

from lsprotocol.types import ResponseError
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams, JsonRpcInvalidRequest
from pygls.protocol import JsonRPCProtocol

log = logging.getLogger(__name__)

HEADER = re.compile(rb"Content-Length:\s*(\d+)\s*$", re.IGNORECASE)
MAX_BODY_BYTES = 256 * 1024 * 1024


class AsyncReader(Protocol):
    async def readline(self) -> bytes: ...

    async def readexactly(self, n: int) -> bytes: ...


def parse_header(line: bytes) -> int | None:
    """The Content-Length announced by a header line, also behind stray bytes; None if none."""
    found = HEADER.search(line)
    if found is None:
        return None
    if found.start() > 0:
        log.warning(
            "dropped %d stray bytes before a Content-Length header: %r",
            found.start(),
            line[: found.start()][:200],
        )
    return int(found.group(1))


def _answer_unreadable(protocol: JsonRPCProtocol, body: bytes, exc: Exception) -> None:
    """Answer a request that could not be read with the matching JSON-RPC error; log the rest."""
    try:
        raw: Any = json.loads(body)
    except ValueError:
        # JSON-RPC would answer with `"id": null`, but clients (pygls' among them) then fail to
        # read that answer: the log is the only place for it.
        log.warning("ignoring a message that is not JSON (%s): %r", exc, body[:200])
        return
    if not isinstance(raw, dict) or "method" not in raw:
        log.warning("ignoring a malformed message (%s): %r", exc, body[:200])
        if isinstance(raw, dict) and "id" in raw and "result" not in raw and "error" not in raw:
            protocol._send_response(raw["id"], error=JsonRpcInvalidRequest().to_response_error())
        return
    method = str(raw.get("method"))
    log.warning("cannot read %s (%s): %s", method, type(exc.__cause__ or exc).__name__, exc.__cause__ or exc)
    if "id" in raw:  # a request: the client waits for an answer
        error = exc if isinstance(exc, JsonRpcException) else JsonRpcInvalidParams()
        detail = str(exc.__cause__ or error.message or "invalid params").strip().splitlines()[0][:300]
        protocol._send_response(
            raw["id"],
            error=ResponseError(
                code=error.code, message=f"cudice cannot read the {method} request: {detail}"
            ),
        )


def _handle(protocol: JsonRPCProtocol, body: bytes) -> None:
    try:
        message = json.loads(body, object_hook=protocol.structure_message)
    except Exception as exc:  # unreadable: answer it if it is a request; never a popup
        _answer_unreadable(protocol, body, exc)
        return
    try:
        protocol.handle_message(message)
    except Exception:
        log.exception("failed to handle %s", getattr(message, "method", "a message"))


async def read_messages(
    stop_event: threading.Event,
    reader: AsyncReader,
    protocol: JsonRPCProtocol,
    first: list[bytes] | None = None,
) -> None:
    """Hand `first` (bodies read already, fast_init.py) and then the framed messages from
    `reader` to `protocol`, until EOF or `stop_event`."""
    for body in first or ():
        _handle(protocol, body)
    content_length: int | None = None
    while not stop_event.is_set():
        line = await reader.readline()
        if not line:
            return
        if line.strip():
            found = parse_header(line)
            if found is not None:
                content_length = found
            elif content_length is None:
                log.warning("ignoring a line outside any frame: %r", line[:200])
            continue
        if content_length is None:  # a blank line with no header before it
            continue
        length, content_length = content_length, None
        if length > MAX_BODY_BYTES:
            log.error("skipping a %d-byte message (over %d)", length, MAX_BODY_BYTES)
            while length > 0:
                length -= len(await reader.readexactly(min(length, 1 << 20)))
            continue
        body = await reader.readexactly(length)
        if not body:
            return
        _handle(protocol, body)
