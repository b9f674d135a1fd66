"""Hover on `class ModelNew`, on a kernel name or on the `load_inline(...)` call: the verdict card.

`hover_target` decides whether the cursor is on one of those; the card itself comes from
`display.hover_markdown`. Hover elsewhere returns None (other language servers answer there).
Not covered: hover inside the CUDA code beyond kernel names (types, CUDA API docs: clangd's job).
"""

from __future__ import annotations

import re

from cudice.verifier.source.document import Document
from cudice.verifier.source.positions import Span

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
