"""Loading the model: at start, after a settings change, on the first generate, on a new checkpoint.

`start_model` loads the configured checkpoint at once, or with `cudice.model.loadOnStart` off only
records it (model state `idle`); `ensure_model` loads an idle model when a generate or infill
first needs it (one load however many ask); `load_model` is the load itself, with work-done
progress and a watch on the checkpoint folder that reloads it when training writes a new one.
The model itself lives in the model worker (`workers/model.py`); nothing here blocks the loop.
In multi-client mode the worker is shared and loaded once for all sessions (`team.load_shared_model`;
no checkpoint watch there).

Not covered: unloading an idle model to free memory.
"""

from __future__ import annotations

import asyncio
import logging
import os

from cudice.server.core import CudiceServer
from lsprotocol import types as lsp

log = logging.getLogger("cudice.server")


async def load_model(ls: CudiceServer, *, force: bool = False) -> None:
    from cudice.server.progress import WorkProgress
    from cudice.server.watch import checkpoint_signature

    request = ls.load_request()
    if ls.team is not None:
        await _load_shared(ls, force=force)
        return
    if request is None:
        await ls.model.load(None)
        return
    # Watch before loading: a checkpoint finished while this one loads is not missed.
    ls.ckpt_signature = checkpoint_signature(request.path)
    _watch_checkpoint(ls, request.path)
    progress = await WorkProgress.start(ls, "cudice: loading model", request.path, cancellable=False)
    progress.report(f"loading {os.path.basename(request.path.rstrip('/')) or request.path}", force=True)
    progress.tick()
    ok = await ls.model.load(request)
    progress.end(ls.model.message)
    if not ok:
        ls.notice(f"cudice: {ls.model.message}", lsp.MessageType.Error)


async def _load_shared(ls: CudiceServer, *, force: bool) -> None:
    """Multi-client mode: the team's one model, loaded by the first session that needs it."""
    from cudice.server.progress import WorkProgress
    from cudice.server.team import load_shared_model

    request = ls.load_request()
    model = ls.model
    if not force and model.state == "ready" and model.request is not None:
        await load_shared_model(ls, request)  # says which model is shared when it differs
        return
    progress = await WorkProgress.start(ls, "cudice: loading model", "shared model", cancellable=False)
    progress.tick()
    ok = await load_shared_model(ls, request, force=force)
    progress.end(model.message)
    if not ok and model.state == "error":
        ls.notice(f"cudice: {model.message}", lsp.MessageType.Error)


async def start_model(ls: CudiceServer) -> None:
    """At start and after a settings change: load the model now (`cudice.model.loadOnStart`),
    or only note which one the first generate or infill will load."""
    request = ls.load_request()
    is_loaded = ls.model.state in ("ready", "error") or ls.model.pid is not None
    if request is not None and not ls.settings.model_load_on_start and not is_loaded:
        ls.model.defer(request)
        return
    await load_model(ls)


async def ensure_model(ls: CudiceServer) -> str:
    """Load a deferred model (one load however many commands ask), wait while it loads; the state then.
    A model that turns idle while this waits (the start-up's `defer` came after the request; in
    multi-client mode another session's) is loaded then."""
    for _ in range(3):
        if ls.model.state == "idle":
            if ls.model_load is None or ls.model_load.done():
                ls.model_load = ls.spawn(load_model(ls))
            await asyncio.shield(ls.model_load)
        state = await ls.model.wait_until_loaded()
        if state != "idle":
            return state
    return ls.model.state


def _watch_checkpoint(ls: CudiceServer, path: str) -> None:
    from cudice.server.watch import PathWatcher

    if not os.path.isdir(path):
        return
    if ls.ckpt_watcher is None:
        ls.ckpt_watcher = PathWatcher(
            asyncio.get_running_loop(),
            lambda key: _checkpoint_changed(ls, key),
            debounce_s=float(os.environ.get("CUDICE_RELOAD_DEBOUNCE_S", "2.0")),
        )
    ls.ckpt_watcher.unwatch_all()
    ls.ckpt_watcher.watch(path)


async def _checkpoint_changed(ls: CudiceServer, path: str) -> None:
    from cudice.server.watch import checkpoint_signature

    if os.path.abspath(ls.settings.model_path or "") != path:
        return
    signature = checkpoint_signature(path)
    log.debug("checkpoint folder %s changed: signature %s (loaded: %s)", path, signature, ls.ckpt_signature)
    if signature is None or signature == ls.ckpt_signature:
        return  # half-written, or nothing new
    ls.notice(f"cudice: new checkpoint in {path}; reloading the model", lsp.MessageType.Info)
    await load_model(ls)
