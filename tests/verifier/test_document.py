"""The document model: pieces found without executing, and exact literal → file mapping."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from cudice.verifier.document import parse_document, read_document
from cudice.verifier.reference import resolve_reference
from cudice.verifier.result import Severity, Verdict
from cudice.verifier.sourcemap import LineIndex, LiteralScanError, scan_literal


def _span_of(text: str, literal: str):
    start = text.index(literal)
    return scan_literal(text, start, start + len(literal), LineIndex.of(text))


@pytest.mark.parametrize(
    "literal",
    [
        '"abc"',
        "'a\\tb\\\\c\\'d'",
        '"""x\n  y\n"""',
        "r'a\\nb'",
        '"a" "b" \'c\'',
        '("x"\n # comment\n "y")',
        '"\\x41\\101\\u00e9\\N{BULLET}"',
        '"line\\\ncontinued"',
        'f"{{braces}}"',
    ],
)
def test_scan_literal_value_equals_python_value(literal: str) -> None:
    text = f"s = {literal}\n"
    span = _span_of(text, literal)
    expected = ast.literal_eval(literal) if not literal.startswith("f") else "{braces}"
    assert span.text == expected
    # every value character maps to a file offset inside the literal, in increasing order
    assert list(span.offsets) == sorted(span.offsets)
    assert all(text.index(literal) <= o <= text.index(literal) + len(literal) for o in span.offsets)


def test_escapes_shift_columns_exactly() -> None:
    text = 'src = "a\\tb\\\\cX"\n'
    span = _span_of(text, '"a\\tb\\\\cX"')
    # value: a, TAB, b, \, c, X  → "X" is value column 6; in the file it sits at column 16
    assert span.text == "a\tb\\cX"
    assert span.to_file(1, 6) == (1, text.index("X") + 1)


def test_implicit_concatenation_maps_each_piece() -> None:
    text = 'src = ("__global__ void k() {\\n"\n       "  int bad = ;\\n"\n       "}\\n")\n'
    span = _span_of(text, text[text.index('"'):text.rindex(")")])
    # generated line 2 is the second literal, on file line 2; column 9 is the ';'
    assert span.text.splitlines()[1] == "  int bad = ;"
    assert span.to_file(2, 13) == (2, text.splitlines()[1].index(";") + 1)


def test_fstring_with_field_and_bytes_are_rejected() -> None:
    with pytest.raises(LiteralScanError):
        _span_of('s = f"{x}"\n', 'f"{x}"')
    with pytest.raises(LiteralScanError):
        _span_of("s = b'x'\n", "b'x'")


def test_examples_relu_broken_line_14_maps(examples_dir: Path) -> None:
    doc = read_document(examples_dir / "relu_broken.py")
    assert not doc.problems
    (call,) = doc.load_inline_calls
    assert call.name == "relu_broken" and call.functions == ("relu_cuda",)
    cuda = call.cuda_sources[0]
    assert cuda.variable == "relu_source" and cuda.mappable
    gen_line = cuda.text.splitlines().index(next(x for x in cuda.text.splitlines() if "vv" in x)) + 1
    col = cuda.text.splitlines()[gen_line - 1].index("vv") + 1
    line, column = cuda.span.to_file(gen_line, col)
    assert (line, column) == (14, doc.text.splitlines()[13].index("vv") + 1)
    # the contents offsets delimit exactly the text between the quotes
    assert doc.text[cuda.start_offset:cuda.end_offset] == cuda.text
    assert doc.cuda_source_at(cuda.start_offset + 5) == cuda
    assert doc.model_new is not None and doc.model_new.bases == ("nn.Module",)
    assert doc.model_new.forward_params == ("x",)
    assert doc.reference.origin == "comment" and doc.reference.path == "relu.py"


def test_lists_of_strings_and_dynamic_sources() -> None:
    text = (
        "from torch.utils.cpp_extension import load_inline\n"
        "a = '__global__ void k() {}'\n"
        "b = f'// {a}'\n"
        "m = load_inline('m', cpp_sources=['int f();', 'int g();'], cuda_sources=[a, b, 'x' + a, a.upper()],\n"
        "                functions=['f'])\n"
        "class Model: pass\nclass ModelNew: pass\ndef get_inputs(): return []\n"
    )
    doc = parse_document(text, "c.py")
    (call,) = doc.load_inline_calls
    assert [s.text for s in call.cpp_sources] == ["int f();", "int g();"]
    cuda = call.cuda_sources
    assert cuda[0].mappable and cuda[0].variable == "a"
    assert not cuda[1].mappable and "f-string" in cuda[1].reason
    assert cuda[2].mappable and cuda[2].text == "x__global__ void k() {}"
    assert not cuda[3].mappable and "upper" in cuda[3].reason
    assert not call.is_mappable
    infos = [d for d in doc.problems if d.code == "parse.unmappable_source"]
    assert len(infos) == 2 and all(d.severity is Severity.INFORMATION for d in infos)
    assert doc.reference.origin == "same_file"


def test_syntax_error_is_a_located_invalid_input() -> None:
    doc = parse_document("class ModelNew:\n    def forward(self x):\n        pass\n", "bad.py")
    result = doc.invalid_result()
    assert result is not None and result.verdict is Verdict.INVALID_INPUT
    (diag,) = result.diagnostics
    assert diag.code == "parse.syntax_error" and diag.location is not None and diag.location.line == 2


def test_missing_model_new_and_reference_are_reported() -> None:
    doc = parse_document("import torch\n", "empty.py")
    codes = {d.code for d in doc.problems}
    assert codes == {"parse.no_model_new", "parse.no_reference"}
    assert doc.invalid_result() is not None


def test_reference_comment_resolves_relative_to_the_file(examples_dir: Path, tmp_path: Path) -> None:
    ref = resolve_reference(read_document(examples_dir / "relu_cuda.py"))
    assert ref.document is not None and ref.document.path.endswith("relu.py") and not ref.diagnostics
    moved = tmp_path / "cand.py"
    moved.write_text((examples_dir / "relu_cuda.py").read_text())
    missing = resolve_reference(read_document(moved))
    assert missing.document is None and missing.diagnostics[0].code == "parse.reference_missing"
    assert missing.diagnostics[0].location is not None and missing.diagnostics[0].location.line == 1


def test_explicit_reference_wins(examples_dir: Path) -> None:
    doc = read_document(examples_dir / "relu_cuda.py", reference=str(examples_dir / "softmax.py"))
    assert doc.reference.origin == "argument"
    ref = resolve_reference(doc)
    assert ref.document is not None and ref.document.path.endswith("softmax.py")


def test_raw_cu_kernels() -> None:
    doc = parse_document('// cudice: reference=relu.py\nextern "C" __global__ void relu(float* x) {}\n', "k.cu")
    assert doc.kind == "cu" and [k.name for k in doc.raw_kernels] == ["relu"]
    assert doc.raw_kernels[0].span.line == 2 and doc.reference.path == "relu.py"
    bad = parse_document("__global__ void k() {}\n", "k.cu")
    assert [d.code for d in bad.problems] == ["parse.no_kernel"]
