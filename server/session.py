"""A session's work as a whole: `cudice.cancel` and the end of a session.

`cancel_work(ls, uri)` cancels the verification and the generation of one document, or of every
document (`uri` None), and says how many it stopped. `release(ls)` stops what a client's session
started — runs, builds of unsaved text, generations, watchers, workers (in multi-client mode its
own runs and generations, not the shared model) — on `shutdown` (`start_release`), and in TCP mode
when a connection ends. It runs once per session (`start_release`): a later call (the end of a
TCP connection whose `shutdown` is still closing the workers) waits for the release in progress
instead of starting a second one. A client may send `exit` without waiting for the reply to
`shutdown`: over stdio the server then lets that release end (`finish_release`, bounded by
`EXIT_WAIT_S`) before its event loop ends, which would cancel it mid-way; an `exit` without
`shutdown` releases the session the same way before the process ends. From `exit` on, the process
has `EXIT_HARD_S` to end (`arm_exit_watchdog`): past it, the stacks of all its threads go to stderr
and it ends with the status it would have had, so a thread still blocked in a read, a compile or
an import cannot keep alive a server the editor told to go.

Not covered: background tasks (a verification flow ends on its own once its run is killed:
cancelling one mid-run here stalled the workers' shutdown).
"""

from __future__ import annotations

import asyncio
import faulthandler
import logging
import os
import sys
import threading
import time

from cudice.server.core import CudiceServer

log = logging.getLogger("cudice.server")
# Bound on `exit` waiting for the release `shutdown` started: each worker gets 1 s to exit before it
# is killed (workers/protocol.py `close`), so it ends in seconds even on a loaded box.
EXIT_WAIT_S = 10.0
# Bound on the whole exit, from `exit` to the end of the process: the release above, the event
# loop's end (it joins the threads of its executor) and the interpreter's (it joins the rest).
EXIT_HARD_S = 15.0


def cancel_work(ls: CudiceServer, uri: str | None) -> int:
    """Cancel `uri`'s verification and generation (every document's when None); how many."""
    if uri is None:
        generating = [u for u, state in ls.documents.items() if state.generation_cancel is not None]
        starting = [u for u, state in ls.documents.items() if state.pending_cancel is not None]
        uris = list(dict.fromkeys([*generating, *ls.jobs.running_uris(), *starting]))
    else:
        uris = [uri]
    num = 0
    for each in uris:
        num += ls.jobs.cancel(each)
        state = ls.documents.get(each)
        if state is not None and state.pending_cancel is not None and not state.pending_cancel.is_set():
            state.pending_cancel.set()  # a save's verification before its job exists (static stage)
            num += 1
        if state is not None and state.generation_cancel is not None:
            state.generation_cancel.set()
            num += 1
    return num


async def release(ls: CudiceServer) -> None:
    """Stop what a client's session started: runs, generations, watchers, workers (in multi-client
    mode its own runs and generations, not the shared model); background tasks end on their own.
    Called on `shutdown` and in TCP mode when a connection ends; once per session: a later call
    waits for the release in progress (`start_release`)."""
    await start_release(ls)


def start_release(ls: CudiceServer) -> asyncio.Task[None]:
    """Start the session's release as a task, once; that task (`shutdown` awaits it, and `exit` or
    the end of a TCP connection waits for it)."""
    if ls.releasing is None:
        ls.releasing = asyncio.get_running_loop().create_task(_release(ls))
    return ls.releasing


async def _release(ls: CudiceServer) -> None:
    from cudice.server import prebuild

    ls.released = True
    prebuild.cancel_all(ls)
    ls.jobs.cancel_all()
    for state in ls.documents.values():
        if state.generation_cancel is not None:
            state.generation_cancel.set()
    for w in (ls.ref_watcher, ls.ckpt_watcher):
        if w is not None:
            w.stop()
    ls.ref_watcher = ls.ckpt_watcher = None
    if ls.team is not None:  # multi-client: the model is shared; only this session's work stops
        from cudice.server.team import detach

        detach(ls)
        if "quick" in ls.__dict__:
            await ls.quick.shutdown()
        return
    # Both workers at once: clients give `shutdown` about 2 s before they log a time-out.
    await asyncio.gather(ls.model.shutdown(), ls.quick.shutdown())


def arm_exit_watchdog(code: int, timeout_s: float | None = None) -> None:
    """End this process with status `code` `timeout_s` (`EXIT_HARD_S`) from now if it is still running, after
    writing the stacks of all its threads to stderr (the editor's server log: what held it). For
    the server process only (app.py `run`): nothing disarms it."""

    bound = EXIT_HARD_S if timeout_s is None else timeout_s

    def watch() -> None:
        time.sleep(bound)
        try:  # stderr may have gone with the editor: the exit must not depend on it
            err = sys.__stderr__
            if err is not None:
                err.write(
                    f"cudice: the server was still running {bound:.0f} s after `exit` (or the end of "
                    "its input); its threads were at:\n"
                )
                faulthandler.dump_traceback(file=err, all_threads=True)
                err.flush()
        except Exception:
            pass
        finally:
            os._exit(code)

    # A daemon thread: it runs on while the interpreter joins the other threads at its end.
    threading.Thread(target=watch, name="cudice-exit-watchdog", daemon=True).start()


async def finish_release(ls: CudiceServer, timeout_s: float = EXIT_WAIT_S) -> None:
    """On `exit`: wait, at most `timeout_s`, for the release a `shutdown` started to end (a failed
    one is the `shutdown` reply's to report), or, without `shutdown`, release the session now:
    its workers are closed before the process ends, not left to notice their parent is gone."""
    done, _ = await asyncio.wait({start_release(ls)}, timeout=timeout_s)
    if not done:
        log.warning("closing the workers took over %.0f s after `exit`; exiting anyway", timeout_s)
