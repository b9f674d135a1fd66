"""Positions in a text: the one `Span` and the one `LineIndex` of cudice.

A `Span` is a half-open range of code-point offsets (`str` indices) into a document's text;
everything that names a place in a file (the document model, the verifier's diagnostics, the
language server's features) keeps offsets and converts through a `LineIndex` only at the edge.
`LineIndex.of(text, encoding)` converts offsets to and from

- 1-based (line, column) in code points: the verifier's `Location`s (`line_column`, `offset_at`,
  `location`);
- 0-based LSP positions, whose character unit is the encoding negotiated at `initialize`:
  UTF-16 code units (the LSP default, VS Code), UTF-8 bytes (Neovim 0.11 offers it first) or
  UTF-32 code points (`position`, `offset`);
- Python `ast` positions (1-based line, UTF-8 byte column: `byte_col_to_offset`, `node_span`).

Lines end at "\\n", "\\r\\n" or a lone "\\r", as in the LSP specification and as Python's own
tokenizer counts them, so a line number from `ast` and one sent to the editor agree. Every
conversion clamps out-of-range input to the text (a stale position never raises).

Not covered: grapheme clusters (a combining accent is its own code point, as in LSP); the
line numbering of generated C++ text is nvcc's, handled by `sourcemap.SourceSpan`.
"""

from __future__ import annotations

import ast
import bisect
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the language server imports this module before it may load the verifier's records
    from cudice.verifier.source.result import Location

ENCODINGS = ("utf-16", "utf-8", "utf-32")


@dataclass(frozen=True, slots=True)
class Span:
    """The code-point offsets [start, end) of a region of a text."""

    start: int
    end: int

    def contains(self, offset: int) -> bool:
        """Whether `offset` is in the span or at its end (a cursor just after a name is on it)."""
        return self.start <= offset <= self.end

    def text(self, source: str) -> str:
        return source[self.start : self.end]


def _unit_len(c: str, encoding: str) -> int:
    if encoding == "utf-8":
        return len(c.encode("utf-8", "surrogatepass"))
    if encoding == "utf-32":
        return 1
    return 2 if ord(c) > 0xFFFF else 1


@dataclass(frozen=True, slots=True)
class LineIndex:
    """Start offset of every line of `text`, for conversions in O(log lines)."""

    text: str
    starts: tuple[int, ...]
    encoding: str = "utf-16"

    @classmethod
    def of(cls, text: str, encoding: str = "utf-16") -> LineIndex:
        if encoding not in ENCODINGS:
            raise ValueError(
                f"position encoding {encoding!r} is not one of {', '.join(ENCODINGS)}; "
                "pass the encoding the client negotiated at initialize"
            )
        starts = [0]
        i, n = 0, len(text)
        while i < n:
            c = text[i]
            if c == "\r" and i + 1 < n and text[i + 1] == "\n":
                i += 1
            if c in "\r\n":
                starts.append(i + 1)
            i += 1
        return cls(text, tuple(starts), encoding)

    @property
    def num_lines(self) -> int:
        return len(self.starts)

    def line_of(self, offset: int) -> int:
        """0-based line containing `offset` (clamped to the text)."""
        offset = max(0, min(offset, len(self.text)))
        return bisect.bisect_right(self.starts, offset) - 1

    def line_text(self, line: int) -> str:
        """The 0-based line's text without its line ending."""
        start = self.starts[line]
        end = self.starts[line + 1] if line + 1 < len(self.starts) else len(self.text)
        return self.text[start:end].rstrip("\r\n")

    def units(self, text: str) -> int:
        """Length of `text` in this index's LSP position unit."""
        if self.encoding == "utf-32":
            return len(text)
        return sum(_unit_len(c, self.encoding) for c in text)

    # -- LSP positions (0-based line, character in the negotiated unit) ------------------------
    def position(self, offset: int) -> tuple[int, int]:
        """(line, character) of a code-point offset."""
        offset = max(0, min(offset, len(self.text)))
        line = self.line_of(offset)
        return line, self.units(self.text[self.starts[line] : offset])

    def offset(self, line: int, character: int) -> int:
        """Code-point offset of an LSP position; positions past a line's end clamp to its end."""
        if line < 0:
            return 0
        if line >= len(self.starts):
            return len(self.text)
        text = self.line_text(line)
        units = 0
        for i, c in enumerate(text):
            if units >= character:
                return self.starts[line] + i
            units += _unit_len(c, self.encoding)
        return self.starts[line] + len(text)

    # -- verifier positions (1-based line, 1-based column in code points) ----------------------
    def line_column(self, offset: int) -> tuple[int, int]:
        """1-based (line, column) of a code-point offset (clamped to the text)."""
        offset = max(0, min(offset, len(self.text)))
        line = self.line_of(offset)
        return line + 1, offset - self.starts[line] + 1

    def offset_at(self, line: int, column: int) -> int:
        """Code-point offset of a 1-based (line, column); clamps to the text and to the line's end."""
        line = min(max(line, 1), len(self.starts)) - 1
        column = min(max(column, 1), len(self.line_text(line)) + 1)
        return self.starts[line] + column - 1

    def location(self, span: Span, path: str) -> Location:
        """The verifier `Location` of `span` in the file at `path`."""
        from cudice.verifier.source.result import Location

        line, column = self.line_column(span.start)
        end_line, end_column = self.line_column(span.end)
        return Location(path, line, column, end_line, end_column)

    # -- Python `ast` positions (1-based line, UTF-8 byte column) ------------------------------
    def byte_col_to_offset(self, lineno: int, byte_col: int) -> int:
        """Code-point offset of an `ast` location."""
        line = lineno - 1
        if line >= len(self.starts):
            return len(self.text)
        text = self.line_text(max(line, 0))
        prefix = text.encode("utf-8", "surrogatepass")[:byte_col].decode("utf-8", errors="ignore")
        return self.starts[max(line, 0)] + len(prefix)

    def node_span(self, node: ast.expr | ast.stmt | ast.keyword) -> Span:
        """The span of an `ast` expression, statement or keyword argument as written in the text."""
        start = self.byte_col_to_offset(node.lineno, node.col_offset)
        end_col = node.end_col_offset if node.end_col_offset is not None else node.col_offset
        return Span(start, self.byte_col_to_offset(node.end_lineno or node.lineno, end_col))
