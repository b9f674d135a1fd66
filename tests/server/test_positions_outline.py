"""Plain-function tests: offset/position conversion and the document outline."""

from __future__ import annotations

import ast
from pathlib import Path

from cudice.server.features.outline import outline
from cudice.server.features.positions import LineIndex

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_positions_count_utf16_units_and_all_line_endings() -> None:
    text = "a😀b\r\nxy\rz\n"
    index = LineIndex.of(text)
    assert index.num_lines == 4
    assert index.position(text.index("b")) == (0, 3)  # the emoji is two UTF-16 units
    assert index.offset(0, 3) == text.index("b")
    assert index.position(text.index("z")) == (2, 0)
    for offset in range(len(text) + 1):
        if text[offset - 1:offset + 1] == "\r\n":
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


def test_ast_byte_columns_map_to_code_points() -> None:
    text = "s = 'é'; t = 1\n"
    node = ast.parse(text).body[1]
    assert LineIndex.of(text).byte_col_to_offset(node.lineno, node.col_offset) == text.index("t")


def test_outline_of_a_candidate() -> None:
    source = (EXAMPLES / "relu_broken.py").read_text()
    o = outline(source)
    assert o.reference == "relu.py" and o.syntax_error is None
    assert o.model_new is not None and source[o.model_new.name_span.start:o.model_new.name_span.end] == "ModelNew"
    (cuda,) = o.cuda_strings
    assert cuda.variable == "relu_source" and cuda.is_literal
    value = next(n.value.value for n in ast.parse(source).body
                 if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "relu_source")
    assert source[cuda.content.start:cuda.content.end] == value  # exactly the string's contents
    assert [k.name for k in o.kernels] == ["relu_kernel"]
    assert source[o.kernels[0].span.start:o.kernels[0].span.end] == "relu_kernel"
    assert o.load_inline_calls[0].functions == ("relu_cuda",)


def test_outline_of_a_reference_and_of_broken_code() -> None:
    o = outline((EXAMPLES / "relu.py").read_text())
    assert [(c.name, c.is_module) for c in o.classes] == [("Model", True)]
    assert o.cuda_strings == () and o.model_new is None
    broken = outline("class ModelNew(:\n")
    assert broken.syntax_error and broken.classes == ()


def test_dynamic_sources_are_not_offered_for_replacement() -> None:
    src = 'k = "__global__ void a() {}" "\\n"\nm = f"__global__ void {x}() {{}}"\nn = r"""__global__ void b() {}"""\n'
    strings = outline(src).cuda_strings
    by_var = {s.variable: s for s in strings}
    assert by_var["k"].is_literal is False  # implicit concatenation
    assert "m" not in by_var  # f-strings are not constants: not CUDA text we can place
    assert by_var["n"].is_literal and src[by_var["n"].content.start:by_var["n"].content.end] == "__global__ void b() {}"
