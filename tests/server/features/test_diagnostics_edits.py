"""Plain-function tests: verifier diagnostics -> LSP, and the generate/infill edit helpers."""

from __future__ import annotations

from pathlib import Path

from cudice.server.features.diagnostics import ClientSupport, location_range, result_diagnostics
from cudice.server.features.edits import (
    candidate_path,
    candidate_text,
    cursor_to_middle,
    extract_middle,
    infill_edit,
    resolve_span,
)
from cudice.verifier.source.document import parse_document
from cudice.verifier.source.positions import LineIndex, Span
from cudice.verifier.source.result import Diagnostic, Location, Severity, Stage, Verdict, VerifyResult
from lsprotocol import types as lsp

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
PATH = str(EXAMPLES / "relu_broken.py")
SOURCE = (EXAMPLES / "relu_broken.py").read_text()
DOC = parse_document(SOURCE, PATH, require_candidate=False)
INDEX = LineIndex.of(SOURCE)


def _result(*diags: Diagnostic, **kw: object) -> VerifyResult:
    return VerifyResult(kw.pop("verdict", Verdict.COMPILE_ERROR), Stage.COMPILE, PATH, diags, **kw)  # type: ignore[arg-type]


def test_one_based_locations_become_lsp_ranges() -> None:
    index = LineIndex.of(SOURCE)
    rng = location_range(index, Location(PATH, 14, 18, 14, 20))
    assert (rng.start.line, rng.start.character, rng.end.line, rng.end.character) == (13, 17, 13, 19)
    whole = location_range(index, Location(PATH, 14))
    assert (whole.start.character, whole.end.character) == (0, len(SOURCE.splitlines()[13]))
    clamped = location_range(index, Location(PATH, 10_000))
    assert clamped.start.line == index.num_lines - 1


def test_diagnostic_fields_related_information_and_fallback() -> None:
    ref = str(EXAMPLES / "relu.py")
    d = Diagnostic(
        Severity.ERROR,
        'undeclared "vv"',
        "compile.error",
        Stage.COMPILE,
        Location(PATH, 14, 18, 14, 20),
        related=((Location(ref, 13, 9), "the reference computes this"),),
    )
    full = result_diagnostics(
        _result(d),
        path=PATH,
        doc=DOC,
        index=INDEX,
        support=ClientSupport(True, True),
        base="file:///docs/diagnostics.md",
    )
    (x,) = full
    assert x.source == "cudice" and x.code == "compile.error" and x.severity == lsp.DiagnosticSeverity.Error
    assert (
        x.code_description is not None
        and x.code_description.href == "file:///docs/diagnostics.md#compile.error"
    )
    assert x.related_information is not None
    assert x.related_information[0].location.uri == Path(ref).as_uri()
    assert x.related_information[0].location.range.start.line == 12
    (y,) = result_diagnostics(
        _result(d), path=PATH, doc=DOC, index=INDEX, support=ClientSupport(False, False)
    )
    assert y.related_information is None and y.code_description is None
    assert "relu.py:13: the reference computes this" in y.message


def test_findings_in_other_files_or_without_location_are_anchored_at_model_new() -> None:
    other = Diagnostic(
        Severity.ERROR, "bad shape", "correctness.shape", Stage.CORRECTNESS, Location("/x/ref.py", 7)
    )
    nowhere = Diagnostic(Severity.WARNING, "slow", "timing.slow", Stage.TIMING, None)
    a, b = result_diagnostics(
        _result(other, nowhere), path=PATH, doc=DOC, index=INDEX, support=ClientSupport()
    )
    line = SOURCE[: SOURCE.index("class ModelNew")].count("\n")
    assert a.range.start.line == b.range.start.line == line
    assert a.message == "ref.py:7: bad shape" and b.severity == lsp.DiagnosticSeverity.Warning


def test_one_problem_gives_one_diagnostic() -> None:
    err = Diagnostic(
        Severity.ERROR, 'undeclared "vv"', "compile.error", Stage.COMPILE, Location(PATH, 14, 18, 14, 20)
    )
    other = Diagnostic(
        Severity.ERROR, 'undeclared "ww"', "compile.error", Stage.COMPILE, Location(PATH, 14, 18, 14, 20)
    )
    found = result_diagnostics(
        _result(err, err, other), path=PATH, doc=DOC, index=INDEX, support=ClientSupport()
    )
    assert [d.message for d in found] == ['undeclared "vv"', 'undeclared "ww"']


def test_compile_only_says_why_once() -> None:
    compiled = _result(verdict=Verdict.COMPILED, compile_only=True)
    (info,) = result_diagnostics(
        compiled, path=PATH, doc=DOC, index=INDEX, support=ClientSupport(), compile_only_reason="no GPU here"
    )
    assert info.code == "server.compile_only" and "no GPU here" in info.message
    verifier_says = Diagnostic(Severity.INFORMATION, "No CUDA GPU here", "verify.no_gpu", Stage.COMPILE, None)
    diags = result_diagnostics(
        _result(verifier_says, verdict=Verdict.COMPILED, compile_only=True),
        path=PATH,
        doc=DOC,
        index=INDEX,
        support=ClientSupport(),
    )
    assert [d.code for d in diags] == ["verify.no_gpu"]


def test_a_failure_without_findings_is_never_silent() -> None:
    crash = _result(
        verdict=Verdict.CRASH, error="Traceback ...\nRuntimeError: CUDA error: illegal memory access"
    )
    (d,) = result_diagnostics(crash, path=PATH, doc=DOC, index=INDEX, support=ClientSupport())
    assert d.code == "server.verify_failed" and d.severity == lsp.DiagnosticSeverity.Error
    assert "`crash`" in d.message and "illegal memory access" in d.message
    located = Diagnostic(Severity.ERROR, "bad", "runtime.exception", Stage.LOAD, Location(PATH, 3))
    assert [
        x.code
        for x in result_diagnostics(
            _result(located, verdict=Verdict.RUNTIME_ERROR),
            path=PATH,
            doc=DOC,
            index=INDEX,
            support=ClientSupport(),
        )
    ] == ["runtime.exception"]


def test_candidate_file_name_and_text() -> None:
    assert candidate_path("/w/relu.py") == Path("/w/relu_cuda.py")
    text = candidate_text("Here it is:\n```python\nclass ModelNew(nn.Module):\n    pass\n```\nbye", "relu.py")
    assert text == "# cudice: reference=relu.py\nclass ModelNew(nn.Module):\n    pass\n"
    own = (
        "class Model(nn.Module):\n    pass\nclass ModelNew(nn.Module):\n    pass\n"
        "def get_inputs():\n    return []\n"
    )
    assert candidate_text(own, "relu.py") == own  # its own reference: no comment
    named = "import torch\n\nclass ModelNew(nn.Module):  # cudice: reference=other.py\n    pass\n"
    assert candidate_text(named, "relu.py") == named  # it names one already, in a trailing comment
    # no get_inputs: not a reference
    half = "class Model(nn.Module):\n    pass\nclass ModelNew(nn.Module):\n    pass\n"
    assert candidate_text(half, "relu.py") == "# cudice: reference=relu.py\n" + half


def test_resolve_span_accepts_offsets_and_ranges_and_explains_bad_ones() -> None:
    text = "ab\ncd😀e\n"
    assert resolve_span({"start": 1, "end": 4}, text) == Span(1, 4)
    rng = {"start": {"line": 1, "character": 2}, "end": {"line": 1, "character": 4}}
    assert resolve_span(rng, text) == Span(5, 6)  # the emoji is 2 UTF-16 units, 1 code point
    assert "outside the document" in str(resolve_span({"start": 3, "end": 99}, text))
    assert "expected" in str(resolve_span([1, 2], text))
    assert "line and character" in str(resolve_span({"start": {}, "end": {}}, text))


def test_a_cursor_becomes_the_code_actions_middle_and_a_selection_stays() -> None:
    content = DOC.cuda_strings[0].content
    at = SOURCE.index("int i = blockIdx")
    assert content is not None and cursor_to_middle(Span(at, at), DOC) == content
    line_end = SOURCE.index("\n", at)
    assert cursor_to_middle(Span(at - 4, line_end), DOC) == content  # Neovim's one-line range
    many = Span(at, SOURCE.index("}", at))
    assert cursor_to_middle(many, DOC) == many
    assert "cursor inside the CUDA" in str(cursor_to_middle(Span(0, 0), DOC))


def test_extract_middle_keeps_prefix_and_suffix() -> None:
    assert extract_middle("PmidS", None, "P", "S") == "mid"
    assert extract_middle("whatever", "given", "P", "S") == "given"
    assert extract_middle("Xmid", None, "P", "S") is None


def test_infill_edit_applied_equals_splicing_the_text() -> None:
    text = SOURCE
    span = DOC.cuda_strings[0].content
    assert span is not None
    middle = "\n__global__ void k() {}\n😀\n"
    for versioned in (True, False):
        edit = infill_edit("file:///r.py", 7, text, span, middle, document_changes=versioned)
        if versioned:
            (doc_edit,) = edit.document_changes or []
            assert isinstance(doc_edit, lsp.TextDocumentEdit) and doc_edit.text_document.version == 7
            (e,) = doc_edit.edits
        else:
            (e,) = (edit.changes or {})["file:///r.py"]
        assert isinstance(e, lsp.TextEdit)
        index = LineIndex.of(text)
        start = index.offset(e.range.start.line, e.range.start.character)
        end = index.offset(e.range.end.line, e.range.end.character)
        assert text[:start] + e.new_text + text[end:] == text[: span.start] + middle + text[span.end :]
