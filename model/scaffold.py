"""Split a KernelBench candidate into the infilling scaffold: prefix | CUDA source | suffix.

The split is DICE's stage-1 split (docs/model.md): the middle is the *contents* of the CUDA source
string passed to `load_inline(cuda_sources=...)`; the prefix ends with its opening quotes, the
suffix starts with its closing quotes. String offsets come from the verifier's document model
(`cudice.verifier.source.document.parse_document`), the one parser of KernelBench files in cudice.

Not covered: files whose CUDA source is computed (f-strings with fields, `.format`, calls): the
error says why, as the document model reports it.
"""

from __future__ import annotations

from dataclasses import dataclass

from cudice.verifier.source.document import parse_document


class ScaffoldError(ValueError):
    """The file has no CUDA source string that can be infilled; the message says why."""


@dataclass(frozen=True, slots=True)
class Scaffold:
    prefix: str
    middle: str
    suffix: str

    @property
    def text(self) -> str:
        return self.prefix + self.middle + self.suffix


def split_scaffold(source: str, path: str = "candidate.py", offset: int | None = None) -> Scaffold:
    """Split `source` at a `load_inline` CUDA source string.

    With `offset` (a character offset in `source`, e.g. the editor's cursor) the CUDA source
    containing it is used; otherwise the first `cuda_sources` string of the first call.
    """
    document = parse_document(source, path, require_candidate=False)
    if document.kind != "python":
        raise ScaffoldError(
            f"{path}: infilling works on Python KernelBench candidates, not {document.kind} files"
        )
    if not document.load_inline_calls:
        raise ScaffoldError(
            f"{path}: no `load_inline(...)` call, so there is no CUDA source string to fill; "
            'write the scaffold (imports, `xxx_source = """"""`, load_inline, ModelNew) first, '
            "or use end-to-end generation"
        )
    if offset is not None:
        chosen = document.cuda_string_at(offset)
        if chosen is None or chosen.index < 0:  # index -1: CUDA text that no load_inline call receives
            raise ScaffoldError(
                f"{path}: the position {offset} is not inside a CUDA source string of load_inline"
            )
    else:
        candidates = [s for call in document.load_inline_calls for s in call.cuda_sources]
        if not candidates:
            raise ScaffoldError(f"{path}: load_inline(...) has no cuda_sources argument to fill")
        chosen = candidates[0]
    if chosen.content is None:
        raise ScaffoldError(
            f"{path}: the CUDA source cannot be infilled because it is built dynamically "
            f"({chosen.reason}); write it as one plain string literal"
        )
    if chosen.text == "" and not chosen.is_single_literal:
        raise ScaffoldError(
            f"{path}: the empty CUDA source {source[chosen.expr.start : chosen.expr.end]!r} is not "
            'a single string literal; write it as `name = """"""`'
        )
    start, end = chosen.content.start, chosen.content.end
    return Scaffold(source[:start], source[start:end], source[end:])
