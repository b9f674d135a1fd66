"""What starting the server costs: `initialize` is answered with only pygls, lsprotocol and cudice's
settings loaded (docs/server.md: within 0.5 s of the process start), and the no-argument fast path of
`cudice-lsp` starts the same server as the click command line does."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from typing import Any

import pytest

# Loaded later (first use, or the preload after `initialized`), never before `initialize` is answered.
NOT_BEFORE_INITIALIZE = (
    "click",
    "rich",
    "watchdog",
    "torch",
    "cudice.verifier.source.result",
    "cudice.server.watch",
    "cudice.server.generation",
    "cudice.server.verification",
    "cudice.server.workers.model",
    "cudice.server.workers.quick",
    "cudice.server.workers.verify",
    "cudice.server.workers.protocol",
    "cudice.model.generation",
    "cudice.server.results",
    "cudice.verifier.source.document",
    "cudice.server.features.code_actions",
    "cudice.server.features.display",
    "cudice.server.lsp_cli",
)

_DRIVER = r"""
import io, json, sys
import cudice.server.__main__
from cudice.server.app import create_server

options = {"cudice": {"verify": {"trials": 7}}}
body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                   "params": {"capabilities": {}, "initializationOptions": options}})
stdin = io.BytesIO(b"Content-Length: %d\r\n\r\n" % len(body) + body.encode())
out = io.BytesIO()
out.close = lambda: None
server = create_server()
server.start_io(stdin, out)
answer = json.loads(out.getvalue().split(b"\r\n\r\n", 1)[1])
print(json.dumps({"answer": answer, "trials": server.settings.verify_trials,
                  "loaded": [m for m in json.loads(sys.argv[1]) if m in sys.modules]}))
"""


def test_initialize_is_answered_before_features_workers_and_click_load() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _DRIVER, json.dumps(NOT_BEFORE_INITIALIZE)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["answer"]["result"]["serverInfo"]["name"] == "cudice"
    assert "cudice.verify" in report["answer"]["result"]["capabilities"]["executeCommandProvider"]["commands"]
    assert report["trials"] == 7  # initializationOptions were applied
    assert report["loaded"] == []


INIT = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "initialize",
        "params": {
            "processId": None,
            "capabilities": {"general": {"positionEncodings": ["utf-32", "utf-8"]}},
        },
    }
).encode()


class _Std:
    def __init__(self, data: bytes = b"") -> None:
        self.buffer = io.BytesIO(data)


@pytest.mark.parametrize("argv", [[], ["--stdio"], ["--log-level", "debug"]])
def test_fast_path_starts_the_same_server_as_the_command_line(
    monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    import cudice.server.app as app
    from cudice.server.__main__ import main
    from cudice.server.lsp_cli import lsp_command

    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(app, "run", lambda **kw: calls.append(kw))
    stdout = _Std()
    monkeypatch.setattr(sys, "stdin", _Std(b"Content-Length: %d\r\n\r\n" % len(INIT) + INIT))
    monkeypatch.setattr(sys, "stdout", stdout)
    main(argv)  # the fast path: answers initialize itself, then hands the frame to the server
    early = calls[0].pop("early")
    assert early.body == INIT and early.answered_id == 7
    reply = json.loads(stdout.buffer.getvalue().split(b"\r\n\r\n", 1)[1])
    assert reply["id"] == 7 and reply["result"]["capabilities"]["positionEncoding"] == "utf-32"
    with pytest.raises(SystemExit) as done:
        lsp_command.main(args=argv, prog_name="cudice-lsp")  # click, as for any other arguments
    assert done.value.code == 0
    defaults = {"transport": "stdio", "host": "127.0.0.1", "port": 2087, "log_level": None}
    assert len(calls) == 2 and {**defaults, **calls[0]} == calls[1]


def test_the_prebuilt_initialize_reply_is_what_pygls_computes() -> None:
    from cudice.server.init_reply import RESULT
    from cudice.server.init_snapshot import computed_result

    assert computed_result() == RESULT, "run `python -m cudice.server.init_snapshot --write`"


_FAST_DRIVER = r"""
import io, json, sys
from cudice.server.fast_init import answer_initialize
body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                   "params": {"capabilities": {}}}).encode()
out = io.BytesIO()
answer_initialize(io.BytesIO(b"Content-Length: %d\r\n\r\n" % len(body) + body), out)
loaded = [m for m in ("pygls", "lsprotocol", "cattrs") if m in sys.modules]
print(json.dumps({"answered": b'"id": 1' in out.getvalue(), "loaded": loaded}))
"""


def test_the_fast_reply_needs_neither_pygls_nor_lsprotocol() -> None:
    out = subprocess.run([sys.executable, "-c", _FAST_DRIVER], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"answered": True, "loaded": []}


def test_other_arguments_still_go_through_click(monkeypatch: pytest.MonkeyPatch) -> None:
    import cudice.server.app as app
    from cudice.server.__main__ import main

    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(app, "run", lambda **kw: calls.append(kw))
    with pytest.raises(SystemExit):
        main(["--tcp", "--port", "3001", "--log-level", "debug"])
    assert calls == [{"transport": "tcp", "host": "127.0.0.1", "port": 3001, "log_level": "debug"}]
