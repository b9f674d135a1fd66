"""A minimal LSP client for one persistent `clangd` process (JSON-RPC over its stdio).

Only what the quick check (`QuickChecker`) needs: initialize, didOpen/didChange/didClose, waiting for the
`textDocument/publishDiagnostics` of a given document version, shutdown. A reader thread
parses the framed messages; requests are answered through `threading.Event`s.

Not covered: clangd's features beyond diagnostics (completion, hover); restarting a crashed
clangd is the owner's job (`QuickChecker` does it on the next call).
"""

from __future__ import annotations

import json
import logging
import subprocess
import threading
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LspDiagnostic:
    line: int  # 0-based, as LSP sends them
    character: int  # code points (we ask for utf-32 positions)
    severity: int  # 1 error, 2 warning, 3 information, 4 hint
    message: str
    code: str


class ClangdClient:
    """One clangd process. Thread-safe; all calls block with a timeout."""

    def __init__(self, argv: list[str], root_uri: str) -> None:
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        self._write_lock = threading.Lock()
        self._cond = threading.Condition()
        self._next_id = 0
        self._responses: dict[int, Any] = {}
        self._diagnostics: dict[str, tuple[int | None, list[LspDiagnostic]]] = {}
        self._reader = threading.Thread(target=self._read_loop, name="clangd-reader", daemon=True)
        self._reader.start()
        caps = {
            "general": {"positionEncodings": ["utf-32", "utf-16"]},
            "textDocument": {"publishDiagnostics": {"versionSupport": True}},
        }
        self.request(
            "initialize", {"processId": None, "rootUri": root_uri, "capabilities": caps}, timeout_s=30
        )
        self.notify("initialized", {})

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    # -- protocol -------------------------------------------------------------------------------
    def _send(self, payload: dict[str, Any]) -> None:
        body = json.dumps(payload).encode()
        assert self.proc.stdin is not None
        with self._write_lock:
            self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
            self.proc.stdin.flush()

    def notify(self, method: str, params: dict[str, Any]) -> None:
        self._send({"jsonrpc": "2.0", "method": method, "params": params})

    def request(self, method: str, params: dict[str, Any], timeout_s: float) -> Any:
        with self._cond:
            self._next_id += 1
            rid = self._next_id
        self._send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        with self._cond:
            if not self._cond.wait_for(lambda: rid in self._responses or not self.alive, timeout=timeout_s):
                raise TimeoutError(f"clangd did not answer {method} within {timeout_s} s")
            if rid not in self._responses:
                raise RuntimeError("clangd exited")
            return self._responses.pop(rid)

    def _read_loop(self) -> None:
        out = self.proc.stdout
        assert out is not None
        while True:
            length = None
            while True:
                line = out.readline()
                if not line:
                    with self._cond:
                        self._cond.notify_all()
                    return
                line = line.strip()
                if not line:
                    break
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            if length is None:
                continue
            msg = json.loads(out.read(length))
            self._dispatch(msg)

    def _dispatch(self, msg: dict[str, Any]) -> None:
        if "id" in msg and "method" in msg:  # a request from clangd (e.g. workDoneProgress/create)
            self._send({"jsonrpc": "2.0", "id": msg["id"], "result": None})
            return
        with self._cond:
            if "id" in msg:
                self._responses[msg["id"]] = msg.get("result", msg.get("error"))
            elif msg.get("method") == "textDocument/publishDiagnostics":
                p = msg["params"]
                diags = [
                    LspDiagnostic(
                        d["range"]["start"]["line"],
                        d["range"]["start"]["character"],
                        d.get("severity", 1),
                        d["message"],
                        str(d.get("code", "")),
                    )
                    for d in p["diagnostics"]
                ]
                self._diagnostics[p["uri"]] = (p.get("version"), diags)
            self._cond.notify_all()

    # -- documents ------------------------------------------------------------------------------
    def open(self, uri: str, text: str, version: int, language: str = "cuda") -> None:
        self.notify(
            "textDocument/didOpen",
            {"textDocument": {"uri": uri, "languageId": language, "version": version, "text": text}},
        )

    def change(self, uri: str, text: str, version: int) -> None:
        self.notify(
            "textDocument/didChange",
            {
                "textDocument": {"uri": uri, "version": version},
                "contentChanges": [{"text": text}],
                "wantDiagnostics": True,
            },
        )

    def close(self, uri: str) -> None:
        self.notify("textDocument/didClose", {"textDocument": {"uri": uri}})

    def wait_diagnostics(self, uri: str, version: int, timeout_s: float) -> list[LspDiagnostic]:
        """The diagnostics clangd published for `uri` at `version` (raises TimeoutError)."""
        with self._cond:
            ok = self._cond.wait_for(
                lambda: self._diagnostics.get(uri, (None, []))[0] == version or not self.alive,
                timeout=timeout_s,
            )
            if not ok:
                raise TimeoutError(f"clangd gave no diagnostics for version {version} within {timeout_s} s")
            if not self.alive:
                raise RuntimeError("clangd exited")
            return list(self._diagnostics[uri][1])

    def shutdown(self) -> None:
        if not self.alive:
            return
        try:
            self.request("shutdown", {}, timeout_s=5)
            self.notify("exit", {})
            self.proc.wait(timeout=5)
        except (TimeoutError, RuntimeError, OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
