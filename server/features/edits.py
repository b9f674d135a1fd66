"""Plain helpers for the generate and infill commands: file names, the middle, the versioned edit.

- `candidate_path(reference)`: `relu.py` -> `relu_cuda.py` beside it.
- `candidate_text(text, reference_name)`: the generated file, with a `# cudice: reference=` line
  when the model's file names no reference of its own (no `Model` + `get_inputs`, no reference
  comment: the verifier's reference convention, read by the document model).
- `resolve_span(arg, source)`: the infill command's range argument (offsets or an LSP range)
  -> code-point offsets, or the reason it is unusable.
- `cursor_to_middle(...)`: a cursor or one-line range -> the middle the code action would use.
- `extract_middle(...)`: the infill's middle; the prefix and suffix stay byte-identical.
- `infill_edit(...)`: a `WorkspaceEdit` whose one `TextDocumentEdit` names the document version
  the middle was generated for, so a client rejects it if the buffer changed.
Not covered: creating the generated file through a `CreateFile` edit (the server writes it on
disk and opens it with `window/showDocument`, which every client supports).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from cudice.server.features.code_actions import infill_target
from cudice.verifier.source.document import Document, parse_document
from cudice.verifier.source.positions import LineIndex, Span
from lsprotocol import types as lsp

_FENCE = re.compile(r"```(?:python|py)?\n(.*?)```", re.DOTALL)


def candidate_path(reference: str | Path) -> Path:
    p = Path(reference)
    return p.with_name(f"{p.stem}_cuda{p.suffix or '.py'}")


def candidate_text(text: str, reference_name: str) -> str:
    """The file to write: the model's code (first fenced block if any) plus a reference comment."""
    m = _FENCE.search(text)
    code = m.group(1) if m else text
    code = code.strip("\n") + "\n"
    if parse_document(code, "generated.py", require_candidate=False).reference.origin == "none":
        code = f"# cudice: reference={reference_name}\n{code}"
    return code


def resolve_span(arg: Any, source: str, encoding: str = "utf-16") -> Span | str:
    """`{"start": int, "end": int}` (code points) or an LSP range -> Span; else a message why not."""
    if isinstance(arg, dict) and isinstance(arg.get("start"), int) and isinstance(arg.get("end"), int):
        start, end = int(arg["start"]), int(arg["end"])
    elif isinstance(arg, dict) and isinstance(arg.get("start"), dict) and isinstance(arg.get("end"), dict):
        index = LineIndex.of(source, encoding)
        try:
            start = index.offset(int(arg["start"]["line"]), int(arg["start"]["character"]))
            end = index.offset(int(arg["end"]["line"]), int(arg["end"]["character"]))
        except (KeyError, TypeError, ValueError):
            return f"range {arg!r} needs start/end with line and character"
    else:
        return (
            f"expected the CUDA string's range as {{'start': offset, 'end': offset}} or an LSP range, "
            f"got {arg!r}"
        )
    if not 0 <= start <= end <= len(source):
        return (
            f"range {start}..{end} is outside the document (length {len(source)}); ask for the action again"
        )
    return Span(start, end)


def cursor_to_middle(span: Span, doc: Document) -> Span | str:
    """A cursor (an empty or one-line range, as palette commands send) -> the middle the code action
    would infill; a multi-line selection is the middle itself, kept inside its CUDA string and,
    when it holds a kernel's signature or closing brace, inside that kernel's body (a selection of
    whole lines would otherwise replace the `__global__` line too)."""
    if "\n" in doc.text[span.start : span.end].rstrip("\n"):
        return clamp_selection(span, doc)
    target = infill_target(doc, span.start)
    if target is None:
        return "put the cursor inside the CUDA source string (or select the lines to rewrite)"
    return target


def clamp_selection(span: Span, doc: Document) -> Span:
    """`span` cut to the CUDA string it starts (or ends) in, then to the one kernel body it overlaps."""
    start, end = span.start, span.end
    string = doc.cuda_string_at(start) or doc.cuda_string_at(max(start, end - 1))
    if string is not None and string.content is not None:
        start, end = max(start, string.content.start), min(end, string.content.end)
    bodies = [k.body for k in doc.kernels if k.body is not None and k.body.start < end and start < k.body.end]
    if len(bodies) == 1:
        start, end = max(start, bodies[0].start), min(end, bodies[0].end)
    return Span(start, max(start, end))


def extract_middle(text: str, middle: str | None, prefix: str, suffix: str) -> str | None:
    """The middle the engine produced, or None when its output does not keep prefix and suffix."""
    if middle is not None:
        return middle
    if text.startswith(prefix) and text.endswith(suffix) and len(text) >= len(prefix) + len(suffix):
        return text[len(prefix) : len(text) - len(suffix)]
    return None


def infill_edit(
    uri: str,
    version: int | None,
    source: str,
    span: Span,
    middle: str,
    document_changes: bool = True,
    encoding: str = "utf-16",
) -> lsp.WorkspaceEdit:
    index = LineIndex.of(source, encoding)
    rng = lsp.Range(lsp.Position(*index.position(span.start)), lsp.Position(*index.position(span.end)))
    edit = lsp.TextEdit(range=rng, new_text=middle)
    if document_changes:
        doc = lsp.OptionalVersionedTextDocumentIdentifier(uri=uri, version=version)
        return lsp.WorkspaceEdit(document_changes=[lsp.TextDocumentEdit(text_document=doc, edits=[edit])])
    return lsp.WorkspaceEdit(changes={uri: [edit]})
