"""Showing a verification result for a document's current text, and watching its reference.

Role: what the verification flow (verification.py) and the handling of files that are not, or no
longer, candidates (candidacy.py) both do to a document: publish a result's diagnostics
(`publish`), only while the editor still has the text it was computed for (`current_version`),
show the findings a verdict locates in the reference in the reference's own buffer
(`note_reference_findings`, `show_reference_findings`), and watch the reference it was verified
against (`watch_reference`). It sits below both, so verification.py imports candidacy.py and no
import goes back.
Contract:
- a result computed for text the editor no longer has is never published (its lines would have
  moved); results for the current text go out with the editor's current document version, a
  closed document's with the version it was read at;
- a finding located on a line of the reference (`IN_REFERENCE_CODES`: its `get_inputs()` raised,
  verifier/run/reference_probe.py) stays on the candidate, named `relu.py:N: …`
  (features/diagnostics.py), and is also published on the reference's open buffer, at that line,
  while the buffer holds the reference text it was found in; the candidate's next verdict (or the
  reference's save) replaces or clears it. A document with diagnostics of its own (a candidate's
  verdict, a syntax error) never gets them;
- `compile_only_reason` says why no speedup is shown (compile-only setting, or no GPU): the
  diagnostics and the verification settings (verification.py) both read it.
Not covered: storing the verdict, lenses and `cudice/status` (verification.py's `_record`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from cudice.server.core import CudiceServer
from cudice.server.document_state import DocumentState, ReferenceFindings, ReferenceInfo, text_digest
from cudice.server.features.diagnostics import (
    ClientSupport,
    docs_base,
    result_diagnostics,
    same_file,
    to_lsp,
)
from cudice.verifier.run.gpu_probe import gpu_absent_reason
from cudice.verifier.source.result import Diagnostic, VerifyResult
from lsprotocol import types as lsp
from pygls.uris import to_fs_path

# the logger these lines had in verification.py: the client's log shows its name
log = logging.getLogger("cudice.server.verification")
# Findings the verifier locates on a line of the reference file: that file's buffer shows them too.
IN_REFERENCE_CODES = frozenset({"reference.get_inputs_failed"})


def compile_only_reason(ls: CudiceServer) -> str | None:
    """Why this run is compile-only (no speedup shown); None when it times the kernel."""
    if ls.settings.verify_compile_only:
        return "compile-only mode is on (cudice.verify.compileOnly)"
    return gpu_absent_reason()


def current_version(ls: CudiceServer, uri: str, source: str, version: int | None) -> tuple[bool, int | None]:
    """(is the result for `source` still current, the version to publish it with). A closed
    document is current; an open one only while the editor's text equals `source`."""
    doc = ls.workspace.text_documents.get(uri)
    if doc is None:
        return True, version
    return doc.source == source, doc.version


def publish(
    ls: CudiceServer, uri: str, path: str, source: str, version: int | None, result: VerifyResult
) -> None:
    """Publish `result`'s diagnostics for `uri`, unless the editor's text is no longer `source`."""
    is_current, version = current_version(ls, uri, source, version)
    if not is_current:
        log.debug("dropping %s diagnostics of %s: computed for an older text", result.stage.value, uri)
        return
    doc, index = ls.analyse(uri, source)
    diags = result_diagnostics(
        result,
        path=path,
        doc=doc,
        index=index,
        support=ClientSupport.of(ls.client_capabilities),
        compile_only_reason=compile_only_reason(ls),
    )
    ls.text_document_publish_diagnostics(
        lsp.PublishDiagnosticsParams(uri=uri, diagnostics=diags, version=version)
    )


def note_reference_findings(
    ls: CudiceServer, state: DocumentState, digest: str | None, diagnostics: Sequence[Diagnostic]
) -> None:
    """Keep the findings among `diagnostics` (the latest verdict of `state`'s document, found in the
    reference text of `digest`) that are located in its reference, and republish the open
    documents where that adds or removes one."""
    found = tuple(d for d in diagnostics if d.code in IN_REFERENCE_CODES and d.location is not None)
    before, state.reference_findings = state.reference_findings, ReferenceFindings(digest, found)
    if state.reference_findings == before:
        return
    paths = {d.location.path for d in (*before.diagnostics, *found) if d.location is not None}
    for uri in list(ls.workspace.text_documents):
        path = to_fs_path(uri)
        if uri != state.uri and path is not None and any(same_file(path, p) for p in paths):
            show_reference_findings(ls, uri, was_shown=True)


def show_reference_findings(ls: CudiceServer, uri: str, *, was_shown: bool = False) -> None:
    """Publish on the open document `uri` the findings other documents' verdicts located in it, those
    found in the text its buffer holds. Nothing when none is kept for it, unless `was_shown` (some
    were published: an empty list clears them), nor on a document with diagnostics of its own."""
    doc = ls.workspace.text_documents.get(uri)
    path = to_fs_path(uri)
    state = ls.documents.get(uri)
    if doc is None or path is None or (state is not None and state.flagged):
        return
    kept = [
        (other.reference_findings.digest, d)
        for other in ls.documents.values()
        if other.uri != uri
        for d in other.reference_findings.diagnostics
        if d.location is not None and same_file(d.location.path, path)
    ]
    if not (kept or was_shown) or ls.too_large(uri, doc.source):
        return
    doc_model, index = ls.analyse(uri, doc.source)
    if doc_model.is_candidate:  # its own verdict's diagnostics are what it shows
        return
    digest, support, base = text_digest(doc.source), ClientSupport.of(ls.client_capabilities), docs_base()
    found = dict.fromkeys(d for found_in, d in kept if found_in == digest)  # once each, in order
    diags = [to_lsp(d, path=path, index=index, doc=doc_model, support=support, base=base) for d in found]
    ls.text_document_publish_diagnostics(
        lsp.PublishDiagnosticsParams(uri=uri, diagnostics=diags, version=doc.version)
    )


def watch_reference(ls: CudiceServer, state: DocumentState, reference: ReferenceInfo | None) -> None:
    """Watch the reference `state`'s document was verified against (None: it names none now), and
    remember the digest of the text it was read with."""
    if reference is None or reference.path is None or ls.ref_watcher is None:
        state.watched_reference = None  # a reference the comment no longer names
        return
    state.watched_reference = reference.path
    state.reference_digest = reference.digest
    ls.ref_watcher.watch(reference.path)
