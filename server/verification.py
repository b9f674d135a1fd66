"""The verification flow: on save or by command, verify a candidate and show the result everywhere.

1. Read the document into the verifier's document model. A file that is not a candidate (no
   `ModelNew`, no `load_inline`) is not verified (candidacy.py: what it had as one is dropped,
   a KernelBench file that does not parse shows its syntax error instead).
2. Resolve its reference as the verifier does (a `# cudice: reference=` comment anywhere in the
   file, unless the file holds its own `Model` + `get_inputs`), watch it, and key the result by
   the candidate's text, the reference's resolved path and text, and the settings.
3. A cached result for the same key is shown at once (unless the user asked to re-verify).
4. Otherwise run the static checks once, here (`static_stage`, in a thread), and hand their
   result to the full verification in a worker and to the quick check (warm clangd) beside it,
   which take it instead of running the checks again (each checks that it was computed for the
   text, path, reference file and strictness it verifies, and runs them itself otherwise): static
   and quick-check compile findings are published first, then the build's, then the final result; a
   newer save of the same document supersedes (kills) this run.
5. Publish versioned diagnostics (publishing.py), store the result, refresh code lenses, send
   `cudice/status`. A result computed for text the editor no longer has is never published or
   shown (its lines would have moved): it is only cached. Results for the current text go out
   with the current document version, so Neovim, which ignores the version field, never gets a
   stale one either. A finding located in the reference (its `get_inputs()` raised) is shown in
   the reference's open buffer too (`note_reference_findings`); a saved reference drops the ones
   found in another text of it.

A document closed while its run starts never runs it (app.py's didClose cancels one already
running); reopened meanwhile, it is verified again once that run has ended (`verify_reopened`).
Non-candidates and edited buffers: candidacy.py.

Without a GPU (or with `cudice.verify.compileOnly`) the run is compile-only and the user is
told why no speedup is shown. Not covered: verifying unsaved buffer text of the *reference*
(the reference is read from disk); isolating the static checks from the server process (they
only read the text and the reference file, as the parse does; an exception in them leaves the
run to the workers); the build of unsaved text (server/prebuild.py) runs its own static stage.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cudice.server.candidacy import not_a_candidate
from cudice.server.core import CudiceServer
from cudice.server.document_state import (
    DocumentState,
    Latest,
    ReferenceInfo,
    named_reference,
    read_reference,
)
from cudice.server.progress import WorkProgress
from cudice.server.publishing import (
    compile_only_reason,
    current_version,
    note_reference_findings,
    publish,
    show_reference_findings,
    watch_reference,
)
from cudice.server.results import result_key
from cudice.server.team import claim_work, release_work
from cudice.server.workers.verify import VerifyRequest
from cudice.verifier.config import VerifyConfig
from cudice.verifier.source.document import Document
from cudice.verifier.source.result import Stage, Verdict, VerifyResult
from lsprotocol import types as lsp
from pygls.uris import to_fs_path

if TYPE_CHECKING:
    from cudice.verifier.api import StaticResult

log = logging.getLogger(__name__)
# Bound on a reopened document's wait for its runs to end (`verify_reopened`): a cancelled run ends
# within seconds of its worker's kill, a newer save's run within its own time-outs (VerifyConfig).
REOPEN_WAIT_S = 3600.0
# What runs after each stage, for the progress message: a build takes minutes on a small CPU, and
# "static: checked · 184 s" would read as if the static checks took that long.
_NEXT_STEP = {
    Stage.PARSE: "static checks",
    Stage.STATIC: "compiling",
    Stage.COMPILE: "loading the kernel",
    Stage.LOAD: "checking correctness",
    Stage.CORRECTNESS: "timing",
}


def reference_path(doc: Document) -> str | None:
    """The reference file a candidate names in its `# cudice: reference=` comment, resolved as the
    verifier resolves it; None when the file is its own reference or names none."""
    return named_reference(doc)


def verify_settings(ls: CudiceServer) -> dict[str, Any]:
    """The verification settings, as `VerifyConfig` fields; part of every result's cache key."""
    s = ls.settings
    return {
        "num_trials": s.verify_trials,
        "atol": s.verify_atol,
        "rtol": s.verify_rtol,
        "timeout_s": s.verify_timeout_seconds,
        "required_speedup": max(s.verify_required_speedup, 1e-9),
        "compile_only": compile_only_reason(ls) is not None,
        "static_policy": s.verify_strictness,
    }


def verify_config(ls: CudiceServer) -> VerifyConfig:
    """What a verification worker runs with: `verify_settings` as a checked `VerifyConfig`."""
    return VerifyConfig.from_dict(verify_settings(ls))


def result_key_of(ls: CudiceServer, doc: Document) -> str:
    """The result-cache key of `doc` as it stands (its text, reference, settings and path)."""
    return key_for(ls, doc, read_reference(named_reference(doc)))


def key_for(ls: CudiceServer, doc: Document, reference: ReferenceInfo) -> str:
    """The result-cache key of `doc` verified against `reference` as it was read."""
    # The path is part of the key: a verdict's diagnostics carry the file they were computed
    # for, so a copy of the file (same content, other path) must not show the original's.
    settings = {**verify_settings(ls), "path": os.path.realpath(doc.path)}
    return result_key(doc.text, reference.path, reference.text, settings)


def _record(
    ls: CudiceServer, state: DocumentState, version: int | None, key: str, result: VerifyResult, source: str
) -> bool:
    """Show `result` in hover, lens and status; False (nothing shown) when the editor's text moved on."""
    uri = state.uri
    is_current, version = current_version(ls, uri, source, version)
    if not is_current:  # an older text's verdict must not replace what hover, lens and status show
        return False
    state.latest = Latest(version, key, result, source)
    state.edited = state.flagged = False
    ls.last_verdict, ls.last_uri = result.verdict.value, uri
    ls.send_status(f"{os.path.basename(result.path) or uri}: {result.verdict.value}", uri)
    ls.refresh_lenses()
    return True


def show_cached(ls: CudiceServer, uri: str) -> bool:
    """On open: show the cached result of an unchanged file at once. True if there was one."""
    doc = ls.read_document(uri)
    if doc is None:
        return False
    source, version, path = doc
    if path is None or ls.too_large(uri, source):
        return False
    analysis = ls.analysis(uri, source)
    if not analysis.doc.is_candidate:
        return False
    reference = read_reference(analysis.reference)
    key = key_for(ls, analysis.doc, reference)
    cached = ls.cache.get(key)
    if cached is None:
        return False
    _show_cached_result(ls, ls.document(uri), path, source, version, key, cached, reference.digest)
    return True


def _show_cached_result(
    ls: CudiceServer, state: DocumentState, path: str, source: str, version: int | None, key: str,
    cached: VerifyResult, reference_digest: str | None,
) -> None:  # fmt: skip
    """A cached verdict for this text: its diagnostics, hover, lens and status, and the reference's
    findings it carries noted for the reference's own buffer."""
    publish(ls, state.uri, path, source, version, cached)
    _record(ls, state, version, key, cached, source)
    note_reference_findings(ls, state, reference_digest, cached.diagnostics)


async def verify_document(ls: CudiceServer, uri: str, *, force: bool = False) -> VerifyResult | None:
    """Verify `uri` (steps 1-5 above). None when it is not a candidate or a newer run superseded it."""
    doc = ls.read_document(uri)
    source, version, path = doc if doc is not None else ("", None, None)
    if doc is None or path is None:
        if force:
            ls.notice(f"cudice: cannot verify {uri}: it is not a readable file on disk")
        return None
    if ls.too_large(uri, source):
        return None
    analysis = ls.analysis(uri, source)
    doc_model = analysis.doc
    if not doc_model.is_candidate:
        shown = not_a_candidate(ls, uri, path, source, version, doc_model)
        show_reference_findings(ls, uri)  # a saved reference: findings in another text of it go
        if force and not shown:
            ls.notice(
                f"cudice: {os.path.basename(path)} has no `class ModelNew` or `load_inline` call, "
                "so there is nothing to verify",
                lsp.MessageType.Info,
            )
        return None
    state = ls.document(uri)
    reference = read_reference(analysis.reference)  # read once: the result's key and the watcher's digest
    watch_reference(ls, state, reference)
    key = key_for(ls, doc_model, reference)
    cached = None if force else ls.cache.get(key)
    if cached is not None:
        ls.jobs.cancel(uri)  # a build of older text still running would only be dropped
        _show_cached_result(ls, state, path, source, version, key, cached, reference.digest)
        return cached

    if not force and state.building and state.running_key == key:
        # the same text, against the same reference text and settings, is being verified already
        # (e.g. the run on open, then the save that follows it): its verdict is this one's
        log.info("%s: the same inputs are being verified already; not started again", uri)
        return None
    refused = claim_work(ls, "verify", uri)  # multi-client: a bound on this editor's pending work
    if refused is not None:
        ls.notice(f"cudice: {os.path.basename(path)} not verified: {refused}")
        return None
    state.start_building()
    state.running_key = key
    building = [True]

    def done_building() -> None:  # before the verdict's status goes out, and at the latest on exit
        if building[0]:
            building[0] = False
            state.end_building()

    try:
        result = await _verify_fresh(ls, state, doc_model, path, source, version, key, done_building)
    finally:
        release_work(ls, "verify", uri)
        if state.running_key == key and state.building <= (1 if building[0] else 0):
            state.running_key = None
        if building[0]:  # ended without a verdict (cancelled, superseded, failed): the status says so
            done_building()
            ls.send_status(f"verification of {os.path.basename(path)} stopped", uri)
        ls.refresh_lenses()
    if result is not None:  # about the reference's text, also when the candidate's moved on
        note_reference_findings(ls, state, reference.digest, result.diagnostics)
    return result


async def verify_reopened(ls: CudiceServer, uri: str) -> None:
    """Verify `uri` again once the run its close cancelled has ended: the editor reopened it
    meanwhile (Neovim reloads a buffer, `:edit`, as didClose + didOpen), so its verdict is wanted
    after all. A newer run (a save) that starts meanwhile is waited for too; its verdict is then in
    the result cache, which `verify_document` reads first. The runs' end wakes the wait
    (`DocumentState.wait_not_building`); `REOPEN_WAIT_S` only bounds it."""
    try:
        await asyncio.wait_for(ls.document(uri).wait_not_building(), REOPEN_WAIT_S)
    except asyncio.TimeoutError:
        log.warning("%s: still verified %.0f s after it was reopened; not verified again", uri, REOPEN_WAIT_S)
        return
    if not ls.released and uri in ls.workspace.text_documents:
        await verify_document(ls, uri)


async def static_stage(doc: Document, config: VerifyConfig) -> StaticResult | None:
    """The static stage of a saved text (`api.static_checks`), run once here for both workers of the
    save, in a thread (cheap beside a build; the first save also imports the checks). None when it
    failed or the reference changed meanwhile: each worker then runs the checks itself, as it would
    without it."""

    def run() -> StaticResult | None:
        from cudice.verifier.api import static_checks

        return static_checks(doc, config)

    try:
        return await asyncio.to_thread(run)
    except Exception:
        log.exception("static checks of %s failed in the server; the workers run them", doc.path)
        return None


async def _verify_fresh(
    ls: CudiceServer,
    state: DocumentState,
    doc: Document,
    path: str,
    source: str,
    version: int | None,
    key: str,
    done_building: Callable[[], None],
) -> VerifyResult | None:
    uri, name = state.uri, os.path.basename(path)
    num_closes = state.closes
    # until its job exists (`ls.jobs.run` registers it), `cudice.cancel` sets this instead
    pending = state.pending_cancel = asyncio.Event()
    ls.send_status(f"verifying {name}", uri)
    ls.refresh_lenses()
    progress = await WorkProgress.start(ls, f"cudice: verifying {name}", "static checks and compile")
    if state.closes != num_closes:  # closed before its run started: nobody waits for it
        _drop_pending(state, pending)
        progress.end("cancelled")
        return None
    progress.report("static checks and compile", force=True)
    progress.tick()  # a build takes minutes on a small CPU: the elapsed time shows it is alive
    config = verify_config(ls)
    static = await static_stage(doc, config)  # once, for the quick check and the verification
    _drop_pending(state, pending)  # from here on the job is registered before any await
    if state.closes != num_closes or state.running_key != key:  # closed, or a newer save took over
        progress.end("cancelled" if state.closes != num_closes else "superseded by a newer run")
        return None
    if pending.is_set() or progress.cancelled.is_set():  # cancelled before its job existed
        _end_cancelled(ls, progress, name)
        return None
    cancel_watch = ls.spawn(_cancel_on(progress, ls, uri))
    request = VerifyRequest(
        uri, path, source, version, config, ls.settings.verify_timeout_seconds, static=static
    )
    # Quick findings first: the warm clangd (quick worker) answers long before the full build (nvcc;
    # docs/benchmarks.md). Once the full run has compile results they are the authority.
    shown = {"quick": False, "authoritative": False, "final": False}

    quick_found: list[VerifyResult] = []

    def on_partial(partial: VerifyResult) -> None:
        if shown["final"]:
            return
        is_last = partial.stage is Stage.COMPILE and request.config.compile_only
        is_ok = partial.verdict in (Verdict.CHECKED, Verdict.COMPILED)
        then = _NEXT_STEP.get(partial.stage) if is_ok and not is_last else None
        progress.report(
            f"{partial.stage.value}: {partial.verdict.value}" + (f" · {then}…" if then else ""), force=True
        )
        if partial.stage in (Stage.PARSE, Stage.STATIC) and not partial.diagnostics:
            # nothing to add: publishing it would blank the findings on screen (those of the quick
            # check, or the previous verdict's) until the quick check or the build replace them
            return
        shown["authoritative"] = partial.stage not in (Stage.PARSE, Stage.STATIC)
        if (
            not shown["authoritative"] and quick_found
        ):  # keep the quick check's compile findings beside the static ones
            partial = dataclasses.replace(
                partial, diagnostics=partial.diagnostics + quick_found[0].diagnostics
            )
        publish(ls, uri, path, source, version, partial)

    async def quick() -> None:
        found = await ls.quick.check(
            path,
            source,
            timeout_s=ls.settings.verify_quick_check_timeout_seconds,
            static_policy=ls.settings.verify_strictness,
            static=static,
        )
        if found is not None and not (shown["final"] or shown["authoritative"]):
            shown["quick"] = True
            quick_found.append(found)
            publish(ls, uri, path, source, version, found)
            progress.report(f"quick check: {found.verdict.value} · full build running…", force=True)

    quick_task = ls.spawn(quick())
    try:
        result = await ls.jobs.run(
            request, on_partial=on_partial, on_stage=lambda st: progress.report(st, force=True)
        )
    finally:
        shown["final"] = True
        cancel_watch.cancel()
        quick_task.cancel()
    if result is None:
        if ls.jobs.is_running(uri):
            progress.end("superseded by a newer run")
        else:
            _end_cancelled(ls, progress, name)
        return None
    progress.end(result.verdict.value)
    done_building()
    if result.verdict.value not in ("crash", "timeout"):  # transient failures are not cached
        ls.cache.put(key, result)
    publish(ls, uri, path, source, version, result)
    if not _record(ls, state, version, key, result, source):  # the statusline must stop saying "verifying"
        ls.send_status(f"{name}: {result.verdict.value} for an older text, not shown (save to verify)", uri)
    return result


def _end_cancelled(ls: CudiceServer, progress: WorkProgress, name: str) -> None:
    progress.end("cancelled")
    if not ls.released:
        ls.notice(f"cudice: verification of {name} was cancelled", lsp.MessageType.Info)


def _drop_pending(state: DocumentState, pending: asyncio.Event) -> None:
    if state.pending_cancel is pending:  # a newer save's is its own
        state.pending_cancel = None


async def _cancel_on(progress: WorkProgress, ls: CudiceServer, uri: str) -> None:
    await progress.cancelled.wait()
    ls.jobs.cancel(uri)


async def reference_changed(ls: CudiceServer, ref: str) -> None:
    """A reference file changed on disk: re-verify the open candidates that use it, those whose last
    verification read another text of it (a touch, a chmod or a save of the same text changes no
    verdict, and re-verifying would supersede a build already running on the same inputs)."""
    digest = read_reference(ref).digest
    for uri in sorted(u for u, state in ls.documents.items() if state.watched_reference == ref):
        if uri not in ls.workspace.text_documents:
            continue
        if digest is not None and ls.documents[uri].reference_digest == digest:
            ls.window_log_message(
                lsp.LogMessageParams(
                    lsp.MessageType.Log,
                    f"cudice: {os.path.basename(ref)} changed on disk, but not its text: "
                    f"{os.path.basename(to_fs_path(uri) or uri)} is not re-verified",
                )
            )
            continue
        log.info("reference %s changed: re-verifying %s", ref, uri)
        ls.spawn(verify_document(ls, uri, force=True))


def verify_open_documents(ls: CudiceServer, uris: list[str] | None = None) -> int:
    """Verify the open candidates (all, or `uris`) that were saved since this server started but
    without a `didSave` reaching it (the client was not attached yet), show no result, and whose
    buffer is what is on disk. Called after start-up and on open. Returns how many."""
    num = 0
    for uri in list(ls.workspace.text_documents) if uris is None else uris:
        doc = ls.read_document(uri)
        state = ls.documents.get(uri)
        is_known = state is not None and (state.latest is not None or state.saved)
        if doc is None or doc[2] is None or is_known or ls.is_building(uri):
            continue
        try:
            if os.path.getmtime(doc[2]) < ls.started_at:
                continue  # not saved while the server started: verified on its next save
            with open(doc[2], encoding="utf-8", errors="surrogateescape") as f:
                on_disk = f.read()
        except OSError:
            continue
        if on_disk == doc[0] and not ls.too_large(uri, doc[0]) and ls.analyse(uri, doc[0])[0].is_candidate:
            ls.spawn(verify_document(ls, uri))
            num += 1
    return num
