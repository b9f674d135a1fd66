"""Map characters of a Python string literal's *value* back to their place in the `.py` file.

CUDA lives in Python string literals; nvcc reports positions in the generated `.cu` text.
`scan_literal()` walks the literal(s) exactly as Python's tokenizer would (prefixes, single and
triple quotes, escapes, line continuations, implicit concatenation of adjacent literals) and
records, for every character of the value, the file offset it came from. `SourceSpan` answers
"generated line/column → file line/column".

A line break written in a literal is "\\n" in its value whether the file has "\\n", "\\r\\n" or
"\\r" (as Python reads it), mapped to the break's first character. `SourceSpan.pieces` holds the
contents of each literal (inside its quotes), so a caller knows a single literal from a
concatenation and where an empty literal's contents would go.

Not covered: bytes literals (load_inline wants `str`), f-strings with `{expr}` fields (their
value is only known at run time; the caller marks such sources unmappable). Columns are counted
in characters (code points), not UTF-8 bytes or UTF-16 units; `positions.LineIndex` converts.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from cudice.verifier.source.positions import LineIndex, Span

_PREFIX = re.compile(r"[rRbBuUfF]{0,2}")
_SIMPLE_ESCAPES = {
    "\n": "",  # backslash-newline: line continuation, contributes nothing
    "\\": "\\",
    "'": "'",
    '"': '"',
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
}


class LiteralScanError(ValueError):
    """The text at the given offset is not a string literal this scanner understands."""


@dataclass(frozen=True, slots=True)
class SourceSpan:
    """A generated source text whose characters each know their offset in the `.py` file.

    `offsets[i]` is the file offset of `text[i]`; `offsets[len(text)]` is the offset just past
    the last literal's contents (so an "end of text" position maps too). `pieces` are the
    contents of each literal, inside its quotes, in file order.
    """

    text: str
    offsets: tuple[int, ...]
    file_index: LineIndex
    pieces: tuple[Span, ...] = ()

    def __post_init__(self) -> None:
        assert len(self.offsets) == len(self.text) + 1, "one offset per character plus the end"

    @property
    def num_lines(self) -> int:
        return self.text.count("\n") + 1

    @property
    def content(self) -> Span:
        """From the first literal's contents to the end of the last one's (the infill middle)."""
        if not self.pieces:
            return Span(self.offsets[0], self.offsets[-1])
        return Span(self.pieces[0].start, self.pieces[-1].end)

    def file_span(self, start: int, end: int) -> Span:
        """The file span of the generated text `text[start:end]` (end exclusive, `start < end`)."""
        return Span(self.offsets[start], self.offsets[end - 1] + 1)

    def to_file(self, line: int, column: int = 1) -> tuple[int, int]:
        """Map a 1-based (line, column) in `text` to a 1-based (line, column) in the file.

        Out-of-range lines and columns clamp to the text and to the end of that generated line.
        """
        pos = LineIndex.of(self.text).offset_at(line, column)
        return self.file_index.line_column(self.offsets[pos])

    def concat(self, other: SourceSpan) -> SourceSpan:
        """`self + other` (the `+` operator on two mappable literals)."""
        return SourceSpan(
            self.text + other.text,
            self.offsets[:-1] + other.offsets,
            self.file_index,
            self.pieces + other.pieces,
        )


def scan_literal(source: str, start: int, end: int, index: LineIndex | None = None) -> SourceSpan:
    """Decode the string literal(s) in `source[start:end]` (adjacent literals concatenate).

    Raises `LiteralScanError` for anything that is not plain string literals, comments and
    whitespace (e.g. an f-string with a replacement field, a bytes literal).
    """
    index = index or LineIndex.of(source)
    chars: list[str] = []
    offsets: list[int] = []
    pieces: list[Span] = []
    pos = start
    while True:
        pos = _skip_trivia(source, pos, end)
        if pos >= end:
            break
        pos = _scan_one(source, pos, end, chars, offsets, pieces)
    if not pieces:
        raise LiteralScanError(f"no string literal at offset {start}")
    offsets.append(pieces[-1].end)
    return SourceSpan("".join(chars), tuple(offsets), index, tuple(pieces))


def _skip_trivia(source: str, pos: int, end: int) -> int:
    while pos < end:
        ch = source[pos]
        if ch in " \t\r\n\f":
            pos += 1
        elif ch == "\\" and source.startswith(("\n", "\r"), pos + 1):
            pos += 3 if source.startswith("\r\n", pos + 1) else 2
        elif ch == "#":
            pos = _line_end(source, pos, end)
        elif ch in "()":  # a parenthesised literal
            pos += 1
        else:
            break
    return pos


def _line_end(source: str, pos: int, end: int) -> int:
    """Offset just past the line break that ends the line holding `pos` (or `end`)."""
    while pos < end and source[pos] not in "\r\n":
        pos += 1
    return min(pos + _newline_len(source, pos), end)


def _newline_len(source: str, i: int) -> int:
    """Length of the line break at `i` ("\\r\\n": 2, "\\n" or "\\r": 1), 0 when there is none."""
    if source.startswith("\r\n", i):
        return 2
    return 1 if source.startswith(("\n", "\r"), i) else 0


def _scan_one(
    source: str, pos: int, end: int, chars: list[str], offsets: list[int], pieces: list[Span]
) -> int:
    m = _PREFIX.match(source, pos)
    prefix = m.group(0).lower() if m else ""
    q = pos + len(prefix)
    if q >= end or source[q] not in "\"'":
        raise LiteralScanError(f"expected a string literal at offset {pos}, found {source[pos : pos + 10]!r}")
    if "b" in prefix:
        raise LiteralScanError("bytes literal: load_inline sources must be str")
    quote = source[q] * 3 if source.startswith(source[q] * 3, q) else source[q]
    is_raw, is_f = "r" in prefix, "f" in prefix
    i = q + len(quote)
    while True:
        if i >= end:
            raise LiteralScanError(f"unterminated string literal starting at offset {pos}")
        if source.startswith(quote, i):
            pieces.append(Span(q + len(quote), i))
            return i + len(quote)
        ch = source[i]
        if ch in "\r\n":  # a line break in a triple-quoted literal: "\\n" in the value, as Python reads it
            chars.append("\n")
            offsets.append(i)
            i += _newline_len(source, i)
        elif ch == "\\":
            i = _scan_escape(source, i, is_raw, chars, offsets)
        elif is_f and ch in "{}":
            if source.startswith(ch * 2, i):
                chars.append(ch)
                offsets.append(i)
                i += 2
            else:
                raise LiteralScanError(
                    "f-string with a replacement field: its value is only known at run time"
                )
        else:
            chars.append(ch)
            offsets.append(i)
            i += 1


def _scan_escape(source: str, i: int, is_raw: bool, chars: list[str], offsets: list[int]) -> int:
    nxt = source[i + 1] if i + 1 < len(source) else ""
    if nxt == "\r":  # backslash + line break: a continuation, or (raw) a backslash and a "\\n"
        if is_raw:
            chars.extend(("\\", "\n"))
            offsets.extend((i, i + 1))
        return i + 1 + _newline_len(source, i + 1)
    if is_raw:  # raw strings keep the backslash and the next character (even a quote)
        chars.extend(("\\", nxt))
        offsets.extend((i, i + 1))
        return i + 2
    if nxt in _SIMPLE_ESCAPES:
        value = _SIMPLE_ESCAPES[nxt]
        if value:
            chars.append(value)
            offsets.append(i)
        return i + 2
    if nxt in "01234567":
        m = re.match(r"[0-7]{1,3}", source[i + 1 : i + 4])
        assert m is not None
        chars.append(chr(int(m.group(0), 8)))
        offsets.append(i)
        return i + 1 + len(m.group(0))
    widths = {"x": 2, "u": 4, "U": 8}
    if nxt in widths:
        digits = source[i + 2 : i + 2 + widths[nxt]]
        chars.append(chr(int(digits, 16)))
        offsets.append(i)
        return i + 2 + widths[nxt]
    if nxt == "N" and source.startswith("{", i + 2):
        close = source.index("}", i + 3)
        chars.append(unicodedata.lookup(source[i + 3 : close]))
        offsets.append(i)
        return close + 1
    # Unknown escape: Python keeps the backslash and the character.
    chars.extend(("\\", nxt))
    offsets.extend((i, i + 1))
    return i + 2
