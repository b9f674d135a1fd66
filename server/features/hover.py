"""Hover on `class ModelNew`, on a kernel name or on the `load_inline(...)` call: the verdict card.

`hover_target` decides whether the cursor is on one of those; `hover_card` writes the card for the
document's state (verifying, not verified, a verdict, one for an older text), its verdict part
from `display.hover_markdown`. Hover elsewhere returns None (other language servers answer there).
Not covered: hover inside the CUDA code beyond kernel names (types, CUDA API docs: clangd's job).
"""

from __future__ import annotations

import re

from cudice.server.features.display import hover_markdown
from cudice.verifier.source.document import Document
from cudice.verifier.source.positions import Span
from cudice.verifier.source.result import VerifyResult

_IDENT = re.compile(r"\w+")


def _word_at(source: str, offset: int) -> Span | None:
    start = offset
    while start > 0 and (source[start - 1].isalnum() or source[start - 1] == "_"):
        start -= 1
    m = _IDENT.match(source, start)
    if m is None or m.end() < offset:
        return None
    return Span(m.start(), m.end())


def hover_target(doc: Document, offset: int) -> Span | None:
    """The span the hover is about, or None when `offset` is not on a cudice element."""
    source = doc.text
    cls = doc.model_new
    if cls is not None and cls.header.contains(offset):
        return cls.name_span
    for k in doc.kernels:
        if k.span.contains(offset):
            return k.span
    word = _word_at(source, offset)
    names = {k.name for k in doc.kernels}
    names.update(f for c in doc.load_inline_calls for f in c.functions or ())
    if word is not None and source[word.start : word.end] in names:
        return word
    for call in doc.load_inline_calls:
        if call.span.contains(offset):
            return call.span
    return None


def hover_card(
    source: str,
    result: VerifyResult | None,
    *,
    result_source: str | None = None,
    version: int | None = None,
    is_running: bool = False,
    compile_only_reason: str | None = None,
    required_speedup: float = 1.0,
) -> str:
    """The hover's Markdown for a document whose buffer holds `source`: `result` is the verdict shown
    (None: none yet), computed for `result_source` (None: unknown) at `version`; `is_running` says a
    verification of it is starting or running."""
    if is_running:
        text = "**cudice: verifying…**\n"
        if result is not None:
            text += "\nprevious result:\n\n" + hover_markdown(result)
        return text
    if result is None:
        return "**cudice: not verified yet** — save the file or run *cudice: verify*.\n"
    text = hover_markdown(
        result, compile_only_reason=compile_only_reason, version=version, required_speedup=required_speedup
    )
    if result_source is not None and result_source != source:
        text = "**edited since this result** — save to verify the new text.\n\n" + text
    return text
