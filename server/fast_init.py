"""Answer `initialize` before pygls and lsprotocol are imported (their import is most of start-up).

A bare `cudice-lsp` (stdio) reads the client's first frame with the standard library only. If
it is `initialize`, the reply is written at once from a prebuilt result
(`init_reply.RESULT`: exactly what pygls computes for cudice's features, with the position
encoding chosen by pygls' rule, `pygls/capabilities.py::choose_position_encoding`). Then the
real server starts, handles the same `initialize` (so its state is the same as if it had
answered) and its own reply to that request id is dropped (`DropReply`). Anything else as a
first frame is handed to the server unchanged.

The snapshot itself is computed from the real server in `init_snapshot.py` (`python -m
cudice.server.init_snapshot --write` regenerates `init_reply.py`); this module imports no server
module but that data, so `app.py` and `core.py` import it without a cycle.
`tests/server/test_startup.py` fails when the snapshot drifts from what pygls would send.
Not covered: TCP (each connection is a new session with pygls already imported).
"""

from __future__ import annotations

import json
import re
from typing import Any, BinaryIO

HEADER = re.compile(rb"Content-Length:\s*(\d+)\s*$", re.IGNORECASE)
ENCODINGS = ("utf-8", "utf-16", "utf-32")  # what pygls supports; utf-16 when the client offers none of them


class EarlyFrame:
    """The first frame, already read from stdin, and the request id whose reply was sent (None
    when nothing was answered). A plain class: importing `dataclasses` would delay the first reply."""

    __slots__ = ("answered_id", "body")

    def __init__(self, body: bytes, answered_id: Any = None) -> None:
        self.body = body
        self.answered_id = answered_id


def read_frame(stdin: BinaryIO) -> bytes | None:
    """One framed body (headers up to the blank line, then Content-Length bytes); None at EOF."""
    length: int | None = None
    while True:
        line = stdin.readline()
        if not line:
            return None
        if line.strip():
            found = HEADER.search(line)
            if found is not None:
                length = int(found.group(1))
            continue
        if length is not None:
            return stdin.read(length)


def position_encoding(request: dict[str, Any]) -> str:
    """pygls' choice: the client's first offered encoding that pygls supports, else utf-16."""
    caps = (request.get("params") or {}).get("capabilities") or {}
    offered = (caps.get("general") or {}).get("positionEncodings")
    for enc in offered if isinstance(offered, list) else ():
        if enc in ENCODINGS:
            return str(enc)
    return "utf-16"


def reply(request: dict[str, Any]) -> dict[str, Any]:
    from cudice.server.init_reply import RESULT

    result = json.loads(json.dumps(RESULT))
    result["capabilities"]["positionEncoding"] = position_encoding(request)
    return {"jsonrpc": "2.0", "id": request["id"], "result": result}


def answer_initialize(stdin: BinaryIO, stdout: BinaryIO) -> EarlyFrame | None:
    """Read the first frame; answer it when it is `initialize`. None at EOF."""
    body = read_frame(stdin)
    if body is None:
        return None
    try:
        request = json.loads(body)
        is_initialize = (
            isinstance(request, dict) and request.get("method") == "initialize" and "id" in request
        )
    except ValueError:
        is_initialize = False
    if not is_initialize:
        return EarlyFrame(body)
    out = json.dumps(reply(request)).encode()
    stdout.write(b"Content-Length: %d\r\n\r\n" % len(out) + out)
    stdout.flush()
    return EarlyFrame(body, request["id"])


class DropReply:
    """A pygls writer that drops the one response to `msg_id` (already sent by `answer_initialize`)."""

    def __init__(self, writer: Any, msg_id: Any) -> None:
        self.writer = writer
        self.msg_id = msg_id
        self.dropped = False

    def close(self) -> Any:
        return self.writer.close()

    def write(self, data: bytes) -> Any:
        if not self.dropped:
            body = data.split(b"\r\n\r\n", 1)[-1]
            try:
                msg = json.loads(body)
            except ValueError:
                msg = None
            if isinstance(msg, dict) and msg.get("id") == self.msg_id and "method" not in msg:
                self.dropped = True
                return None
        return self.writer.write(data)
