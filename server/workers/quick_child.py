"""The quick-check worker: `python -m cudice.server.workers.quick_child`, long-lived, a warm clangd.

`cudice.verifier.api.quick_check` (parse + static checks + clangd compile diagnostics) answers in
~0.3 s when its `QuickChecker` keeps the torch-header preamble parsed between checks, and in
10-25 s when it starts a fresh clangd (docs/verifier.md). This process owns that checker for the
server's lifetime: it warms it at start, then answers requests one at a time.

Requests (stdin, JSON lines): {"id", "path", "source"} and optionally "config" (the `VerifyConfig`
fields the check runs with that differ from the defaults, `VerifyConfig.overrides()`, as the
verification worker gets them: the server sends the user's `cudice.verify.strictness` as
`static_policy`, so the first findings are those the verdict will carry; read with
`VerifyConfig.from_dict`, so a key that is no field fails the check with an "error" event naming
it and the valid ones) and "static" (the static stage's result the server computed for this save,
`protocol.handed_static`: the checks are not run again when it was computed for this text,
reference and policy). Any other top-level key fails the check with an "error" event naming it
(a policy goes in "config", never beside it). Events
(stdout): {"event": "started"}, {"event": "result", "id", "result": VerifyResult} |
{"event": "error", "id", "message"}, and
while a check runs, every `CUDICE_QUICK_HEARTBEAT_S` (2 s) {"event": "progress", "id", "cpu_s"}:
the CPU seconds used so far by this worker's checks and its process group (clangd building its
preamble), so the server can tell a slow check from a stuck one (quick.py). Stdin closing ends it
(clangd is shut down first); the set-up and the framing are `child.py` and `protocol.py`'s.
`CUDICE_VERIFY_MODULE` swaps the verifier module for tests (no QuickChecker there: None is passed).
Not covered: running checks in parallel (clangd serialises them anyway).
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
import time
import traceback
from typing import Any

from cudice.server.workers import child
from cudice.server.workers.procs import group_cpu_seconds
from cudice.server.workers.protocol import STATIC_FIELD, EventStream, handed_static, requests
from cudice.verifier.config import VerifyConfig


def _heartbeat(stream: EventStream, busy: list[Any], interval_s: float) -> None:
    """While a check runs (`busy[0]` is its id), say how much CPU the worker has used."""
    clock = (
        time.pthread_getcpuclockid(threading.main_thread().ident or 0)
        if hasattr(time, "pthread_getcpuclockid")
        else None
    )
    while True:
        time.sleep(interval_s)
        job_id = busy[0]
        if job_id is not None:
            stream.emit("progress", id=job_id, cpu_s=round(group_cpu_seconds(clock), 3))


REQUEST_KEYS = ("id", "path", "source", "config", STATIC_FIELD)


def request_config(req: dict[str, Any]) -> VerifyConfig:
    """The `VerifyConfig` a request asks for (module docstring): its "config" fields over the
    defaults; `ValueError` for a top-level key the request format lacks, a config key that is no
    field (named, with the valid ones) or an invalid value."""
    unknown = sorted(set(req) - set(REQUEST_KEYS))
    if unknown:
        raise ValueError(
            f"the quick-check request has unknown key(s) {', '.join(map(repr, unknown))}; "
            f'valid keys: {", ".join(REQUEST_KEYS)} (verifier settings go in "config")'
        )
    raw = req.get("config") or {}
    if not isinstance(raw, dict):
        raise ValueError(f"the request's config must be a JSON object of VerifyConfig fields, not {raw!r}")
    return VerifyConfig.from_dict(raw)


def answer(api: Any, req: dict[str, Any], checker: Any) -> Any:
    """The quick result for one request: `api.quick_check` under the request's config
    (`request_config`: the verifier's defaults when it names none), with the static result the
    request carries, if any."""
    kw: dict[str, Any] = {"config": request_config(req)}
    static = handed_static(api, req)
    if static is not None:
        kw["static"] = static
    return api.quick_check(str(req["path"]), str(req["source"]), checker, **kw)


def main() -> None:
    stream = child.start()
    api = importlib.import_module(os.environ.get("CUDICE_VERIFY_MODULE", "cudice.verifier.api"))
    checker: Any = None
    factory = getattr(api, "QuickChecker", None)
    if factory is not None:
        try:
            checker = factory()
            if getattr(checker, "available", True):
                threading.Thread(target=checker.warm, daemon=True).start()  # preamble in the background
        except Exception:
            traceback.print_exc(file=sys.stderr)
            checker = None
    busy: list[Any] = [None]
    threading.Thread(
        target=_heartbeat,
        daemon=True,
        args=(stream, busy, float(os.environ.get("CUDICE_QUICK_HEARTBEAT_S", "2"))),
    ).start()
    try:
        for req in requests(sys.stdin, "quick-check worker"):  # until the server closes stdin
            try:
                busy[0] = req.get("id")
                result = answer(api, req, checker)
                busy[0] = None
                stream.emit("result", id=req.get("id"), result=result.to_dict())
            except Exception as exc:
                busy[0] = None
                traceback.print_exc(file=sys.stderr)
                stream.emit("error", id=req.get("id"), message=f"{type(exc).__name__}: {exc}")
    finally:
        if checker is not None:
            checker.close()


if __name__ == "__main__":
    main()
