"""The document model: pieces found without executing, and exact literal → file mapping."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from cudice.verifier.source.document import parse_document, read_document
from cudice.verifier.source.positions import LineIndex
from cudice.verifier.source.reference import resolve_reference
from cudice.verifier.source.result import Severity, Verdict
from cudice.verifier.source.sourcemap import LiteralScanError, scan_literal


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
        '"""crlf\r\nline\rend"""',
        '"a\\\r\nb"',
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
    span = _span_of(text, text[text.index('"') : text.rindex(")")])
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
    assert cuda.content is not None and cuda.content.text(doc.text) == cuda.text and cuda.is_single_literal
    assert doc.cuda_string_at(cuda.content.start + 5) == cuda
    assert doc.model_new is not None and doc.model_new.bases == ("nn.Module",)
    assert doc.model_new.forward_params == ("x",)
    assert doc.reference.origin == "comment" and doc.reference.path == "relu.py"


def test_lists_of_strings_and_dynamic_sources() -> None:
    text = (
        "from torch.utils.cpp_extension import load_inline\n"
        "a = '__global__ void k() {}'\n"
        "b = f'// {a}'\n"
        "m = load_inline('m', cpp_sources=['int f();', 'int g();'], "
        "cuda_sources=[a, b, 'x' + a, a.upper()],\n"
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
    doc = parse_document(
        '// cudice: reference=relu.py\nextern "C" __global__ void relu(float* x) {}\n', "k.cu"
    )
    assert doc.kind == "cu" and [k.name for k in doc.raw_kernels] == ["relu"]
    assert doc.location(doc.raw_kernels[0].span).line == 2 and doc.reference.path == "relu.py"
    assert doc.raw_kernels[0].span.text(doc.text) == "relu"
    bad = parse_document("__global__ void k() {}\n", "k.cu")
    assert [d.code for d in bad.problems] == ["parse.no_kernel"]


def test_document_lists_classes_cuda_strings_and_kernels(examples_dir: Path) -> None:
    source = (examples_dir / "relu_broken.py").read_text()
    doc = parse_document(source, str(examples_dir / "relu_broken.py"), require_candidate=False)
    assert doc.reference.origin == "comment" and doc.reference.path == "relu.py"
    assert doc.model_new is not None and doc.model_new.name_span.text(source) == "ModelNew"
    assert doc.model_new.header.text(source) == "class ModelNew(nn.Module)"
    assert [(c.name, c.is_module) for c in doc.classes] == [("ModelNew", True)]
    (cuda,) = doc.cuda_strings
    assert cuda.variable == "relu_source" and cuda.is_single_literal and cuda.content is not None
    value = next(
        n.value.value
        for n in ast.parse(source).body
        if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "relu_source"
    )
    assert cuda.content.text(source) == value  # exactly the string's contents
    (kernel,) = doc.kernels
    assert kernel.name == "relu_kernel" and kernel.span.text(source) == "relu_kernel"
    assert kernel.body is not None and source[kernel.body.start - 1] == "{" and source[kernel.body.end] == "}"
    assert doc.load_inline_calls[0].functions == ("relu_cuda",)
    assert doc.is_candidate and doc.cuda_string_at(kernel.span.start) == cuda


def test_a_reference_and_broken_code(examples_dir: Path) -> None:
    ref = parse_document((examples_dir / "relu.py").read_text(), "relu.py", require_candidate=False)
    assert [(c.name, c.is_module) for c in ref.classes] == [("Model", True)]
    assert ref.cuda_strings == () and ref.model_new is None and not ref.is_candidate
    broken = parse_document(
        "# cudice: reference=relu.py\nclass ModelNew(:\n", "b.py", require_candidate=False
    )
    assert [d.code for d in broken.problems] == ["parse.syntax_error"] and broken.classes == ()
    assert broken.reference.path == "relu.py"  # still known: the server watches it while the file is fixed


def test_only_plain_literals_are_offered_as_replaceable() -> None:
    src = (
        'k = "__global__ void a() {}" "\\n"\nm = f"__global__ void {x}() {{}}"\n'
        'n = r"""__global__ void b() {}"""\nempty = """"""\n'
    )
    doc = parse_document(src, "s.py", require_candidate=False)
    by_var = {s.variable: s for s in doc.cuda_strings}
    assert by_var["k"].mappable and not by_var["k"].is_single_literal  # implicit concatenation
    assert "m" not in by_var  # an f-string is not a constant: not CUDA text that can be placed
    n = by_var["n"]
    assert n.is_single_literal and n.content is not None and n.content.text(src) == "__global__ void b() {}"
    assert [k.name for k in doc.kernels] == ["a", "b"]
    assert all(s.index == -1 for s in doc.cuda_strings)  # no load_inline call receives them


def test_kernels_in_comments_are_not_kernels_and_templates_are() -> None:
    src = (
        'cuda = """\n// __global__ void ghost(float* x) {}\n'
        'template <typename T>\n__global__ void __launch_bounds__(256) tk(T* x) { x[0] = T(); }\n"""\n'
    )
    doc = parse_document(src, "t.py", require_candidate=False)
    (k,) = doc.kernels
    assert k.name == "tk" and k.span.text(src) == "tk" and k.body is not None
    assert k.body.text(src).strip() == "x[0] = T();"


@pytest.mark.parametrize(
    "comment",
    [
        "# cudice: reference=relu.py\n",
        "import torch\n\nclass ModelNew:\n    # cudice: reference=relu.py\n    pass\n",  # indented
        "import torch  # cudice: reference=relu.py\nclass ModelNew:\n    pass\n",  # trailing
        "import torch\rclass ModelNew:\r    pass  # cudice: reference=relu.py\r",  # old Mac line ends
    ],
)
def test_reference_comments_are_found_indented_and_trailing(comment: str) -> None:
    doc = parse_document(comment, "/w/cand.py", require_candidate=False)
    assert doc.reference.origin == "comment" and doc.reference.path == "relu.py"
    assert doc.reference.span is not None and doc.reference.span.text(comment).startswith("# cudice:")


def test_a_reference_comment_inside_a_string_is_not_one() -> None:
    src = 'doc = """\n# cudice: reference=wrong.py\n"""\n# cudice: reference=right.py\n'
    assert parse_document(src, "c.py", require_candidate=False).reference.path == "right.py"
    only_string = 's = "# cudice: reference=wrong.py"\n'
    assert parse_document(only_string, "c.py", require_candidate=False).reference.origin == "none"
