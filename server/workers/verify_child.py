"""The verification worker: `python -m cudice.server.workers.verify_child`, one verification per process.

Reads one JSON request on stdin: {"path", "source", "config": {VerifyConfig fields}} (the fields
that differ from the defaults, `VerifyConfig.overrides`; a key that is no field ends the run with
a `crash` record naming it and the valid ones, `VerifyConfig.from_dict`), and optionally "static":
the static stage's result the server computed for this save (`protocol.handed_static`), which the
verifier takes instead of running the checks again when its key is that of the inputs verified
here (text, path, reference file, strictness), and ignores otherwise. Writes JSON
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

First-error preparation: a request {"prepare": "first_error", "config": {...}} instead of a
verification makes this worker compute, at the lowest CPU priority (nice 19, inherited by nvcc),
the lists a slim build's first compile-error verdict reads (`api.prepare_first_error`: nvcc
preprocessor runs and a scan, once per build cache, cached there), then write
{"event": "prepared", "finished": bool} and exit. Closing its stdin cancels it: the preprocessors
are killed as a group, nothing half-done is cached, and the worker exits within a moment (after
the scan pass under way, if any). A verifier module without `prepare_first_error` (a scripted
one) reports `finished` at once. The server starts this when its verify workers are idle
(server/workers/verify.py).

Warm spare: with `CUDICE_VERIFY_WARM=1` in its environment and a GPU here, the worker starts the
run stage's judge (judge.py, with its two runner processes: Python, torch and CUDA contexts, seconds
each) *before* it reads its request, so the server can start this process ahead of the next save
(server/workers/verify.py) and the run stage begins warm. The judge still serves this one request
only and dies with this process's family.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import threading
import traceback
from collections.abc import Iterator
from typing import Any

from cudice.server.workers import child
from cudice.server.workers.protocol import EventStream, handed_static, requests
from cudice.verifier.config import VerifyConfig
from cudice.verifier.source.result import Stage, Verdict, VerifyResult

WARM_ENV = "CUDICE_VERIFY_WARM"
DEFAULT_MODULE = "cudice.verifier.api"


def warm_runner() -> Any:
    """A judge started now for the request still to come (`PersistentRunner`, no second spare after
    it), or None: not asked for (`WARM_ENV`), a scripted verifier (`CUDICE_VERIFY_MODULE`), or no GPU
    here (the run stage would not start)."""
    scripted = os.environ.get("CUDICE_VERIFY_MODULE", DEFAULT_MODULE) != DEFAULT_MODULE
    if os.environ.get(WARM_ENV) != "1" or scripted:
        return None  # not asked for, or a scripted verifier (tests) that runs no judge
    from cudice.verifier.api import gpu_available

    if not gpu_available():
        return None
    from cudice.verifier.run.warm import judge_ahead

    return judge_ahead(VerifyConfig())  # the server's settings leave the cache and memory limit as these


def run(request: dict[str, Any], stream: EventStream, runner: Any = None) -> None:
    path, source = str(request["path"]), request.get("source")
    api = importlib.import_module(os.environ.get("CUDICE_VERIFY_MODULE", DEFAULT_MODULE))
    config = VerifyConfig.from_dict(request.get("config") or {})  # an unknown key fails the run, named

    def on_stage(partial: Any, *_: Any) -> None:
        if isinstance(partial, VerifyResult):  # the verifier reports each finished stage's findings
            stream.emit("partial", result=partial.to_dict())
        else:
            stream.emit("stage", stage=str(getattr(partial, "value", partial)))

    extra: dict[str, Any] = {"run_child": runner} if runner is not None else {}
    static = handed_static(api, request)
    if static is not None:
        extra["static"] = static
    final = api.verify(path, source=source, config=config, on_stage=on_stage, **extra)
    stream.emit("final", result=final.to_dict())


PREPARE_FIRST_ERROR = "first_error"  # the value of a request's "prepare" key


def prepare(request: dict[str, Any], stream: EventStream, rest: Iterator[dict[str, Any]]) -> None:
    """Run the first-error preparation (module docstring) until it ends or stdin closes."""
    if request.get("prepare") != PREPARE_FIRST_ERROR:
        raise ValueError(
            f"unknown preparation {request.get('prepare')!r}: the only one is {PREPARE_FIRST_ERROR!r}"
        )
    api = importlib.import_module(os.environ.get("CUDICE_VERIFY_MODULE", DEFAULT_MODULE))
    config = VerifyConfig.from_dict(request.get("config") or {})
    cancel = threading.Event()

    def cancel_on_eof() -> None:  # the server wants the CPU back (a job arrived) or is gone
        for _ in rest:
            pass
        cancel.set()

    threading.Thread(target=cancel_on_eof, daemon=True).start()
    with contextlib.suppress(OSError):
        os.nice(19)  # capped at the lowest priority; threads and compilers started from here inherit it
    run_it = getattr(api, "prepare_first_error", None)
    finished = True if run_it is None else bool(run_it(config, cancel))
    stream.emit("prepared", finished=finished)


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
    runner = None
    try:
        runner = warm_runner()
        request = next(incoming, {})
        if not request:  # a spare the server let go (stdin closed before any request)
            return
        if "prepare" in request:
            prepare(request, stream, incoming)
            return
        threading.Thread(target=_die_with_server, args=(incoming,), daemon=True).start()
        run(request, stream, runner)
    except Exception as exc:  # the verifier's own failures become a CRASH record, never a hang
        traceback.print_exc(file=sys.stderr)
        crash = VerifyResult(
            verdict=Verdict.CRASH,
            stage=Stage.PARSE,
            path=str(request.get("path", "")),
            error=f"verifier failed: {type(exc).__name__}: {exc}",
        )
        stream.emit("final", result=crash.to_dict())
    finally:
        if runner is not None:
            runner.close()


if __name__ == "__main__":
    main()
