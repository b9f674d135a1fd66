"""Showing a verification result for a document's current text, and watching its reference.

Role: what the verification flow (verification.py) and the handling of files that are not, or no
longer, candidates (candidacy.py) both do to a document: publish a result's diagnostics
(`publish`), only while the editor still has the text it was computed for (`current_version`),
and watch the reference it was verified against (`watch_reference`). It sits below both, so
verification.py imports candidacy.py and no import goes back.
Contract:
- a result computed for text the editor no longer has is never published (its lines would have
  moved); results for the current text go out with the editor's current document version, a
  closed document's with the version it was read at;
- `compile_only_reason` says why no speedup is shown (compile-only setting, or no GPU): the
  diagnostics and the verification settings (verification.py) both read it.
Not covered: storing the verdict, lenses and `cudice/status` (verification.py's `_record`).
"""

from __future__ import annotations

import logging

from cudice.server.core import CudiceServer
from cudice.server.document_state import DocumentState, ReferenceInfo
from cudice.server.features.diagnostics import ClientSupport, result_diagnostics
from cudice.verifier.run.gpu_probe import gpu_absent_reason
from cudice.verifier.source.result import VerifyResult
from lsprotocol import types as lsp

# the logger these lines had in verification.py: the client's log shows its name
log = logging.getLogger("cudice.server.verification")


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


def watch_reference(ls: CudiceServer, state: DocumentState, reference: ReferenceInfo | None) -> None:
    """Watch the reference `state`'s document was verified against (None: it names none now), and
    remember the digest of the text it was read with."""
    if reference is None or reference.path is None or ls.ref_watcher is None:
        state.watched_reference = None  # a reference the comment no longer names
        return
    state.watched_reference = reference.path
    state.reference_digest = reference.digest
    ls.ref_watcher.watch(reference.path)
