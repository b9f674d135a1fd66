"""The verification worker: `python -m cudice.server.workers.verify_child`, one verification per process.

Reads one JSON request on stdin: {"path", "source", "config": {VerifyConfig fields}}. Writes JSON
lines on stdout:
  {"event": "partial", "result": VerifyResult}  after each finished stage (static, compile, ...)
  {"event": "final", "result": VerifyResult}
The fast clangd diagnostics come from the long-lived quick worker instead (quick_worker.py).
The server kills this process and its family (its group, the compilers in their own sessions,
the verifier's sandbox: `procs.kill_family`) when a newer save supersedes the run, on a cancel
or at the timeout; if the server itself dies, this worker kills that family and exits (stdin
EOF or re-parenting, `procs.die_with_parent`). Library prints go to stderr.

`CUDICE_VERIFY_MODULE` (default `cudice.verifier.api`) names the module with `verify`; tests point it at a scripted verifier. Nothing here judges a kernel: the
verifier does, in its own sandbox.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import json
import os
import signal
import sys
import threading
import traceback
from typing import Any, TextIO

from cudice.server.workers.procs import FAMILY_ENV, die_with_parent, kill_family, lower_priority
from cudice.verifier.result import Stage, Verdict, VerifyResult


def _emit(out: TextIO, **event: Any) -> None:
    out.write(json.dumps(event) + "\n")
    out.flush()


def _config(raw: dict[str, Any]) -> Any:
    from cudice.verifier.config import VerifyConfig

    names = {f.name for f in dataclasses.fields(VerifyConfig)}
    return VerifyConfig(**{k: v for k, v in raw.items() if k in names})


def run(request: dict[str, Any], out: TextIO) -> None:
    path, source = str(request["path"]), request.get("source")
    api = importlib.import_module(os.environ.get("CUDICE_VERIFY_MODULE", "cudice.verifier.api"))
    config = _config(request.get("config") or {})

    def on_stage(partial: Any, *_: Any) -> None:
        if isinstance(partial, VerifyResult):  # the verifier reports each finished stage's findings
            _emit(out, event="partial", result=partial.to_dict())
        else:
            _emit(out, event="stage", stage=str(getattr(partial, "value", partial)))

    final = api.verify(path, source=source, config=config, on_stage=on_stage)
    _emit(out, event="final", result=final.to_dict())


def _die_with_server() -> None:
    """The server keeps our stdin open while it waits; EOF means it is gone: take the build down too."""
    sys.stdin.read()
    kill_family(os.getpid(), os.environ.get(FAMILY_ENV))
    with contextlib.suppress(OSError):
        os.killpg(os.getpgid(0), signal.SIGKILL)


def main() -> None:
    lower_priority()
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # nvcc and the sandbox run beside the model: no thread pools
    die_with_parent()
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    request: dict[str, Any] = {}
    try:
        request = json.loads(sys.stdin.readline() or "{}")
        threading.Thread(target=_die_with_server, daemon=True).start()
        run(request, out)
    except Exception as exc:  # the verifier's own failures become a CRASH record, never a hang
        traceback.print_exc(file=sys.stderr)
        crash = VerifyResult(verdict=Verdict.CRASH, stage=Stage.PARSE, path=str(request.get("path", "")),
                             error=f"verifier failed: {type(exc).__name__}: {exc}")
        _emit(out, event="final", result=crash.to_dict())


if __name__ == "__main__":
    main()
