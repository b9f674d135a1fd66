"""The one position mapping: offsets <-> LSP positions (every negotiable encoding), 1-based
verifier locations and `ast` positions, on every kind of line ending."""

from __future__ import annotations

import ast

import pytest
from cudice.verifier.source.positions import LineIndex, Span


def test_positions_count_utf16_units_and_all_line_endings() -> None:
    text = "a😀b\r\nxy\rz\n"
    index = LineIndex.of(text)
    assert index.num_lines == 4
    assert index.position(text.index("b")) == (0, 3)  # the emoji is two UTF-16 units
    assert index.offset(0, 3) == text.index("b")
    assert index.position(text.index("z")) == (2, 0)
    for offset in range(len(text) + 1):
        if text[offset - 1 : offset + 1] == "\r\n":
            continue  # between \r and \n is not a position
        assert index.offset(*index.position(offset)) == offset
    assert index.offset(99, 0) == len(text) and index.offset(0, 99) == text.index("\r")


def test_every_negotiable_position_encoding_round_trips() -> None:
    text = "aé😀b\n"
    b = text.index("b")
    assert LineIndex.of(text, "utf-8").position(b) == (0, 1 + 2 + 4)
    assert LineIndex.of(text, "utf-16").position(b) == (0, 1 + 1 + 2)
    assert LineIndex.of(text, "utf-32").position(b) == (0, 3)
    for enc in ("utf-8", "utf-16", "utf-32"):
        index = LineIndex.of(text, enc)
        assert all(index.offset(*index.position(o)) == o for o in range(len(text) + 1))
    with pytest.raises(ValueError, match="utf-7"):
        LineIndex.of(text, "utf-7")


def test_ast_byte_columns_map_to_code_points() -> None:
    text = "s = 'é'; t = 1\n"
    node = ast.parse(text).body[1]
    index = LineIndex.of(text)
    assert index.byte_col_to_offset(node.lineno, node.col_offset) == text.index("t")
    assert index.node_span(node) == Span(text.index("t"), text.index("1") + 1)


def test_one_based_locations_round_trip_and_clamp() -> None:
    text = "ab\r\ncdé\rf"
    index = LineIndex.of(text)
    assert index.line_column(text.index("é")) == (2, 3)
    assert index.line_column(text.index("f")) == (3, 1)
    for offset in range(len(text) + 1):
        if text[offset - 1 : offset + 1] == "\r\n":
            continue
        assert index.offset_at(*index.line_column(offset)) == offset
    assert index.offset_at(2, 99) == text.index("\r", 4)  # past the line's end: its end, not the next line
    assert index.offset_at(0, 0) == 0 and index.offset_at(99, 1) == text.index("f")
    loc = index.location(Span(text.index("c"), text.index("f")), "x.py")
    assert (loc.path, loc.line, loc.column, loc.end_line, loc.end_column) == ("x.py", 2, 1, 3, 1)


def test_line_numbers_agree_with_pythons_on_every_line_ending() -> None:
    """A location from `ast` and the line the editor is sent are the same line."""
    text = "a = 1\r\nb = 2\rc = 3\nd = 4\n"
    index = LineIndex.of(text)
    for node in ast.parse(text).body:
        start = index.node_span(node).start
        assert index.line_column(start) == (node.lineno, node.col_offset + 1)
        assert index.position(start) == (node.lineno - 1, node.col_offset)


def test_span_contains_its_end_and_slices_its_text() -> None:
    span = Span(2, 5)
    assert span.contains(2) and span.contains(5) and not span.contains(6) and not span.contains(1)
    assert span.text("0123456") == "234"
