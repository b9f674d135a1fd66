"""The verification worker: `python -m cudice.server.workers.verify_child`, one verification per process.

Reads one JSON request on stdin: {"path", "source", "config": {VerifyConfig fields}}. Writes JSON
lines on stdout (framing: `protocol.py`), after {"event": "started", "pid"}:
  {"event": "stage", "stage"}                    when the verifier names the stage it starts
  {"event": "partial", "result": VerifyResult}  after each finished stage (static, compile, ...)
  {"event": "final", "result": VerifyResult}
The fast clangd diagnostics come from the long-lived quick worker instead (quick_child.py).
The server kills this process and its family (its group, the compilers in their own sessions,
the verifier's sandbox: `procs.kill_family`) when a newer save supersedes the run, on a cancel
or at the timeout; if the server itself dies, this worker kills that family and exits (stdin
EOF, re-parenting or SIGTERM: `child.py`). Library prints go to stderr.

`CUDICE_VERIFY_MODULE` (default `cudice.verifier.api`) names the module with `verify`; tests point
it at a scripted verifier. Nothing here judges a kernel: the verifier does, in its own sandbox.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import sys
import threading
import traceback
from collections.abc import Iterator
from typing import Any

from cudice.server.workers import child
from cudice.server.workers.protocol import EventStream, requests
from cudice.verifier.result import Stage, Verdict, VerifyResult


def _config(raw: dict[str, Any]) -> Any:
    from cudice.verifier.config import VerifyConfig

    names = {f.name for f in dataclasses.fields(VerifyConfig)}
    return VerifyConfig(**{k: v for k, v in raw.items() if k in names})


def run(request: dict[str, Any], stream: EventStream) -> None:
    path, source = str(request["path"]), request.get("source")
    api = importlib.import_module(os.environ.get("CUDICE_VERIFY_MODULE", "cudice.verifier.api"))
    config = _config(request.get("config") or {})

    def on_stage(partial: Any, *_: Any) -> None:
        if isinstance(partial, VerifyResult):  # the verifier reports each finished stage's findings
            stream.emit("partial", result=partial.to_dict())
        else:
            stream.emit("stage", stage=str(getattr(partial, "value", partial)))

    final = api.verify(path, source=source, config=config, on_stage=on_stage)
    stream.emit("final", result=final.to_dict())


def _die_with_server(rest: Iterator[dict[str, Any]]) -> None:
    """The server keeps our stdin open while it waits; EOF means it is gone: take the build down too."""
    for _ in rest:
        pass
    child.exit_with_family(1)


def main() -> None:
    # nvcc and the sandbox run beside the model: no thread pools
    stream = child.start({"OMP_NUM_THREADS": "1"})
    incoming = requests(sys.stdin, "verification worker")
    request: dict[str, Any] = {}
    try:
        request = next(incoming, {})
        threading.Thread(target=_die_with_server, args=(incoming,), daemon=True).start()
        run(request, stream)
    except Exception as exc:  # the verifier's own failures become a CRASH record, never a hang
        traceback.print_exc(file=sys.stderr)
        crash = VerifyResult(
            verdict=Verdict.CRASH,
            stage=Stage.PARSE,
            path=str(request.get("path", "")),
            error=f"verifier failed: {type(exc).__name__}: {exc}",
        )
        stream.emit("final", result=crash.to_dict())


if __name__ == "__main__":
    main()
