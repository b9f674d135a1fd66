"""Build a candidate while it is edited, so that its save finds the compiled objects waiting.

On a GPU box a new kernel's verdict is mostly its build (nvcc's two front ends over torch's
headers: seconds) and the run; the build needs nothing but the text. After each change of an open
candidate, once typing has paused for `QUIET_S`, `schedule` sends the editor's current (unsaved)
text to a build-only worker (`VerifyJobs.prebuild`, `VerifyConfig.build_only`): parse, static
checks, compile and link, no run, nothing shown. A save of that same text then runs; its compile
stage finds the objects and the library in the content-addressed build cache, or waits on an
object's lock while the prebuild is still compiling it (verifier/build/objects.py). A change before
the build ends replaces it; a save of other text stops it.

Contract: the build only where the server wants a warm verifier (`CudiceServer.wants_warm_verifier`:
a GPU, verification on save, not compile-only); nothing runs for text whose verdict is cached, for
documents that are not candidates or are over the size limit, or while the save's verification of
that text runs (a save also drops the document's pending timer). The build runs the candidate's
compile only (trusted compilers in the verifier's worker), never its code.

Idle preparation: on every box, a pause in typing in a candidate also calls `jobs.prestart()`, which
starts the verify workers' one-time, low-priority preparation of the first compile error's lists
when no run or build is under way (server/workers/verify.py `prepare_when_idle`); opening a
candidate does the same (server/app.py: `prestart` on a GPU box, `prepare_when_idle` elsewhere). Any
run or build stops it.

Not covered: the reference's unsaved text (read from disk, as verification does); compile errors of
the unsaved text are not published (the quick check and the save's verification show them).
"""

from __future__ import annotations

import asyncio
import logging
import os

from cudice.server.core import CudiceServer
from cudice.server.workers.verify import VerifyRequest
from pygls.uris import to_fs_path

log = logging.getLogger(__name__)

QUIET_S = float(os.environ.get("CUDICE_PREBUILD_QUIET_S", "1.0"))


def schedule(ls: CudiceServer, uri: str) -> None:
    """(Re)start `uri`'s quiet timer; when it fires, its current text is built (a GPU box) or the
    idle verify workers prepare the first compile error (`prebuild`)."""
    cancel(ls, uri)
    if ls.released:
        return
    ls.document(uri).prebuild_timer = asyncio.get_running_loop().call_later(QUIET_S, _fire, ls, uri)


def cancel(ls: CudiceServer, uri: str) -> None:
    """Forget `uri`'s pending timer (it was saved: its verification builds it now)."""
    state = ls.documents.get(uri)
    if state is not None:
        state.cancel_prebuild_timer()


def cancel_all(ls: CudiceServer) -> None:
    for state in ls.documents.values():
        state.cancel_prebuild_timer()


def _fire(ls: CudiceServer, uri: str) -> None:
    ls.document(uri).prebuild_timer = None
    if not ls.released:
        ls.spawn(prebuild(ls, uri))


async def prebuild(ls: CudiceServer, uri: str) -> None:
    """Build `uri`'s current text, without running it, or without a warm verifier start the idle
    preparation (see the module docstring); logs what it did."""
    from cudice.server.document_state import read_reference
    from cudice.server.verification import key_for, verify_config

    doc = ls.workspace.text_documents.get(uri)  # open documents only: their text is the unsaved one
    path = to_fs_path(uri) if doc is not None else None
    if doc is None or path is None or ls.too_large(uri, doc.source):
        return
    if ls.jobs.running_source(uri) == doc.source:  # saved meanwhile: its verification builds it
        return
    analysis = ls.analysis(uri, doc.source)
    if not analysis.doc.is_candidate:
        return
    if not ls.wants_warm_verifier():  # no build ahead here; the idle workers prepare the first error
        await ls.jobs.prestart()
        return
    if ls.cache.get(key_for(ls, analysis.doc, read_reference(analysis.reference))) is not None:
        return
    request = VerifyRequest(
        uri, path, doc.source, doc.version, verify_config(ls), ls.settings.verify_timeout_seconds
    )
    log.info("building %s (version %s) before its save", os.path.basename(path), doc.version)
    result = await ls.jobs.prebuild(request)
    if result is not None:
        log.info(
            "built %s (version %s) before its save: %s after %s",
            os.path.basename(path),
            doc.version,
            result.verdict.value,
            result.stage.value,
        )
