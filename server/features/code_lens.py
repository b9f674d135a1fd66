"""The code lens over `class ModelNew`: the latest verdict (or its state) plus a re-verify command.
A verdict of an earlier text says so, as the hover does ("edited since: ✓ 2.31× … · re-verify").

Not covered: lenses on files without `class ModelNew` (references get the generate action).
"""

from __future__ import annotations

from cudice.server.features.display import lens_title
from cudice.server.protocol import CMD_VERIFY
from cudice.verifier.source.document import Document
from cudice.verifier.source.positions import LineIndex
from cudice.verifier.source.result import VerifyResult
from lsprotocol import types as lsp


def code_lenses(
    *,
    uri: str,
    doc: Document,
    index: LineIndex,
    result: VerifyResult | None,
    is_running: bool,
    is_stale: bool = False,
    required_speedup: float = 1.0,
) -> list[lsp.CodeLens]:
    """`index` is the document's line index in the client's position encoding; `is_stale`: `result`
    was computed for another text than the editor's (edited since, or its newer run was cancelled)."""
    cls = doc.model_new
    if cls is None:
        return []
    line = index.line_of(cls.span.start)
    rng = lsp.Range(lsp.Position(line, 0), lsp.Position(line, 0))
    if is_running:
        title = "⏳ cudice: verifying…"
    elif result is None:
        title = "cudice: not verified yet · verify"
    else:
        title = f"{'edited since: ' if is_stale else ''}{lens_title(result, required_speedup)} · re-verify"
    return [lsp.CodeLens(range=rng, command=lsp.Command(title=title, command=CMD_VERIFY, arguments=[uri]))]
