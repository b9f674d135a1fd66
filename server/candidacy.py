"""What a file shows when it is not, or no longer, the text its verdict was computed for.

- A file that stops being a candidate (no `ModelNew`, no `load_inline`: overwritten, say) loses
  its run, verdict, lens and diagnostics on save and on `cudice.verify` (`not_a_candidate`), and
  so do its findings shown in its reference's buffer.
- A KernelBench file that does not parse (a reference with a syntax error) gets that error as a
  diagnostic, on open and on save (`show_syntax_error`, `not_a_candidate`); other Python files
  are left to the user's Python tools.
- An unsaved edit marks the shown verdict as edited: `cudice/status` carries `edited` and the
  lens turns to "edited since: …" (`note_edit`); an undo back to the verified text clears it.

Not covered: the verification flow itself (verification.py, which hands non-candidates here);
publishing a result and watching the reference (publishing.py, shared with verification.py).
"""

from __future__ import annotations

import os

from cudice.server.core import CudiceServer
from cudice.server.publishing import current_version, note_reference_findings, publish, watch_reference
from cudice.verifier.source.document import Document
from lsprotocol import types as lsp

# Words that make a file KernelBench material: its syntax errors are cudice's to report.
KERNELBENCH_WORDS = ("class ModelNew", "load_inline", "class Model(", "def get_inputs", "nn.Module")


def looks_like_kernelbench(source: str) -> bool:
    """Whether a file that cannot be parsed is meant as a KernelBench reference or candidate
    (cudice reports its syntax errors; other Python files are left to the user's Python tools)."""
    return any(word in source for word in KERNELBENCH_WORDS)


def not_a_candidate(
    ls: CudiceServer, uri: str, path: str, source: str, version: int | None, doc: Document
) -> bool:
    """A saved or verified file with nothing to verify: stop its run, drop the verdict, lens and
    diagnostics it had as a candidate, and show a KernelBench file's syntax errors. True when the
    syntax errors were shown."""
    syntax = doc.invalid_result() if looks_like_kernelbench(source) else None
    state = ls.document(uri)
    had = state.latest is not None or state.flagged or ls.is_building(uri)
    if not (had or syntax is not None):
        return False
    ls.jobs.cancel(uri)
    state.latest = None
    state.edited = False
    watch_reference(ls, state, None)
    note_reference_findings(ls, state, None, ())  # its reference's buffer drops them too
    name = os.path.basename(path)
    state.flagged = syntax is not None
    if syntax is not None:
        publish(ls, uri, path, source, version, syntax)
        ls.send_status(f"{name}: Python syntax error", uri)
    else:
        version = current_version(ls, uri, source, version)[1]
        ls.text_document_publish_diagnostics(
            lsp.PublishDiagnosticsParams(uri=uri, diagnostics=[], version=version)
        )
        ls.send_status(f"{name}: no `class ModelNew` or `load_inline` call: nothing to verify", uri)
    ls.refresh_lenses()
    return syntax is not None


def show_syntax_error(ls: CudiceServer, uri: str) -> None:
    """On open: a KernelBench file that does not parse gets its syntax error at once."""
    doc = ls.read_document(uri)
    if doc is None or doc[2] is None or ls.too_large(uri, doc[0]) or not looks_like_kernelbench(doc[0]):
        return
    doc_model = ls.analyse(uri, doc[0])[0]
    if not doc_model.is_candidate and doc_model.invalid_result() is not None:
        not_a_candidate(ls, uri, doc[2], doc[0], doc[1], doc_model)


def note_edit(ls: CudiceServer, uri: str) -> None:
    """After an unsaved edit: when the buffer's text stops (or starts again) being the text of the
    verdict shown, tell the statusline (`edited`) and ask for fresh lenses ("edited since: …")."""
    state = ls.documents.get(uri)
    latest = state.latest if state is not None else None
    text = ls.open_text(uri)
    if state is None or latest is None or latest.source is None or text is None:
        return
    is_edited = text != latest.source
    if is_edited == state.edited:
        return
    state.edited = is_edited
    ls.send_status(None, uri)
    ls.refresh_lenses()
