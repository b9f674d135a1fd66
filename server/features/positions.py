"""Offsets (code points into a str) <-> LSP positions (0-based line, character in the negotiated unit).

Plain functions over a text, so features can convert without a pygls `TextDocument` (files
that are not open, tests). Lines end at "\\n", "\\r\\n" or "\\r", as in the LSP spec. The
character unit is the position encoding pygls negotiated at `initialize`: UTF-16 code units (the
LSP default, VS Code), UTF-8 bytes (Neovim 0.11 offers it first) or UTF-32 code points.
Not covered: grapheme clusters (a combining accent counts as its own code point, as in LSP).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

ENCODINGS = ("utf-16", "utf-8", "utf-32")


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
        starts = [0]
        i, n = 0, len(text)
        while i < n:
            c = text[i]
            if c == "\r" and i + 1 < n and text[i + 1] == "\n":
                i += 1
            if c in "\r\n":
                starts.append(i + 1)
            i += 1
        if encoding not in ENCODINGS:
            raise ValueError(f"position encoding {encoding!r} is not one of {', '.join(ENCODINGS)}")
        return cls(text, tuple(starts), encoding)

    @property
    def num_lines(self) -> int:
        return len(self.starts)

    def line_of(self, offset: int) -> int:
        """0-based line containing `offset` (clamped to the text)."""
        offset = max(0, min(offset, len(self.text)))
        return bisect.bisect_right(self.starts, offset) - 1

    def line_text(self, line: int) -> str:
        """The line's text without its line ending."""
        start = self.starts[line]
        end = self.starts[line + 1] if line + 1 < len(self.starts) else len(self.text)
        return self.text[start:end].rstrip("\r\n")

    def units(self, text: str) -> int:
        """Length of `text` in this index's position unit."""
        if self.encoding == "utf-32":
            return len(text)
        return sum(_unit_len(c, self.encoding) for c in text)

    def position(self, offset: int) -> tuple[int, int]:
        """(line, character) of a code-point offset."""
        offset = max(0, min(offset, len(self.text)))
        line = self.line_of(offset)
        return line, self.units(self.text[self.starts[line]:offset])

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

    def byte_col_to_offset(self, lineno: int, byte_col: int) -> int:
        """Offset of Python's `ast` location (1-based line, UTF-8 byte column)."""
        line = lineno - 1
        if line >= len(self.starts):
            return len(self.text)
        text = self.line_text(line)
        prefix = text.encode("utf-8")[:byte_col].decode("utf-8", errors="ignore")
        return self.starts[line] + len(prefix)
