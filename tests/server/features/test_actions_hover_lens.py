"""Plain-function tests: which code actions, hover targets and lenses appear where."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from cudice.server.features.code_actions import ModelAvailability, code_actions, infill_target
from cudice.server.features.code_lens import code_lenses
from cudice.server.features.display import hover_markdown, lens_title
from cudice.server.features.hover import hover_card, hover_target
from cudice.verifier.source.document import Document, parse_document
from cudice.verifier.source.positions import LineIndex
from cudice.verifier.source.result import (
    Diagnostic,
    Location,
    Severity,
    Stage,
    Timing,
    Verdict,
    VerifyResult,
)

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
READY = ModelAvailability("ready")
UNAVAILABLE = ModelAvailability("missing", "no model configured: set cudice.model.path")
LOADING = ModelAvailability("loading", "loading /models/dice")


def _doc(source: str) -> Document:
    return parse_document(source, "x.py", require_candidate=False)


CORRECT = VerifyResult(
    Verdict.CORRECT,
    Stage.TIMING,
    "c.py",
    candidate=Timing(0.1, 0.09, 0.12, 0.095, 0.105, 30),
    reference=Timing(0.231, 0.22, 0.25, 0.225, 0.235, 30),
    speedup=2.3149,
    speedup_min=2.1,
    speedup_max=2.5,
    num_correct_trials=5,
    num_trials=5,
    gpu_name="NVIDIA H200",
    measured_at="2026-12-02T10:00:00+00:00",
)


def _actions(
    source: str, needle: str, model: ModelAvailability = READY, disabled_support: bool = True
) -> list:
    at = source.index(needle)
    return code_actions(
        uri="file:///x.py",
        doc=_doc(source),
        start=at,
        end=at,
        version=3,
        model=model,
        disabled_support=disabled_support,
    )


def test_generate_is_offered_inside_a_module_class_only() -> None:
    ref = (EXAMPLES / "relu.py").read_text()
    (action,) = _actions(ref, "return torch.relu")
    assert action.title == "Generate CUDA kernel for `Model`"
    assert action.command.command == "cudice.generateKernel" and action.command.arguments == [
        "file:///x.py",
        "Model",
    ]
    assert _actions(ref, "batch_size = 16") == []
    cand = (EXAMPLES / "relu_cuda.py").read_text()
    assert [
        a.command.command for a in _actions(cand, "return self.relu.relu_cuda")
    ] == []  # ModelNew: no generate


def test_actions_are_disabled_with_the_reason_or_say_it_in_the_title() -> None:
    ref = (EXAMPLES / "relu.py").read_text()
    (a,) = _actions(ref, "return torch.relu", UNAVAILABLE)
    assert a.disabled is not None and a.disabled.reason == UNAVAILABLE.reason
    (b,) = _actions(ref, "return torch.relu", UNAVAILABLE, disabled_support=False)
    assert b.disabled is None and b.title.endswith(f"(unavailable: {UNAVAILABLE.reason})")


def test_while_the_model_loads_actions_are_offered_and_say_they_wait() -> None:
    ref = (EXAMPLES / "relu.py").read_text()
    for disabled_support in (True, False):
        (a,) = _actions(ref, "return torch.relu", LOADING, disabled_support=disabled_support)
        assert a.disabled is None and a.title.endswith("(once the model has loaded)")
        assert a.command is not None and a.command.command == "cudice.generateKernel"


def test_infill_targets_the_empty_body_else_the_whole_string() -> None:
    cand = (EXAMPLES / "relu_cuda.py").read_text()
    o = _doc(cand)
    content = o.cuda_strings[0].content
    assert content is not None
    assert (
        infill_target(o, cand.index("int64_t i = (int64_t)blockIdx")) == content
    )  # a full body: whole string
    empty = cand.replace(
        cand[cand.index("{", cand.index("__global__")) + 1 : cand.index("}\n\ntorch::")], "\n"
    )
    body = empty.index("{", empty.index("__global__")) + 1
    span = infill_target(_doc(empty), body)
    assert span is not None and (span.start, span.end) == (body, body + 1)
    commented = empty.replace("{\n}", "{\n    // TODO\n}", 1)  # a body holding only a comment is empty too
    span = infill_target(_doc(commented), commented.index("TODO"))
    assert span is not None and commented[span.start - 1] == "{" and commented[span.end] == "}"
    marked = cand.replace(
        "int64_t i = (int64_t)blockIdx", "// cudice: infill\n    int64_t i = (int64_t)blockIdx"
    )
    span = infill_target(_doc(marked), marked.index("cudice: infill"))
    assert span is not None and marked[span.start - 1] == "{" and marked[span.end] == "}"
    assert infill_target(o, cand.index("class ModelNew")) is None
    (action,) = _actions(cand, "int64_t i = (int64_t)blockIdx")
    assert action.command.arguments == ["file:///x.py", {"start": content.start, "end": content.end}, 3]


def test_hover_targets() -> None:
    cand = (EXAMPLES / "relu_cuda.py").read_text()
    o = _doc(cand)
    assert o.model_new is not None
    assert hover_target(o, cand.index("class ModelNew") + 2) == o.model_new.name_span
    assert (
        hover_target(o, cand.index("nn.Module):", cand.index("class ModelNew")) + 3) == o.model_new.name_span
    )
    k = cand.index("relu_kernel")
    assert hover_target(o, k + 3) == o.kernels[0].span
    use = cand.rindex("relu_cuda(x)")
    span = hover_target(o, use + 2)
    assert span is not None and cand[span.start : span.end] == "relu_cuda"
    assert hover_target(o, cand.index("load_inline(") + 1) is not None
    assert hover_target(o, cand.index("import torch")) is None


def test_lens_titles_and_hover_card() -> None:
    assert lens_title(CORRECT) == "✓ 2.31× vs PyTorch · H200"
    assert lens_title(CORRECT, required_speedup=3.0).startswith("⚠ 2.31×")
    err = VerifyResult(
        Verdict.COMPILE_ERROR,
        Stage.COMPILE,
        "c.py",
        (Diagnostic(Severity.ERROR, "bad", "compile.error", Stage.COMPILE, Location("c.py", 3)),),
    )
    assert lens_title(err) == "✗ compile error (1)"
    wrong = dataclasses.replace(CORRECT, verdict=Verdict.INCORRECT, num_correct_trials=2, speedup=None)
    assert lens_title(wrong) == "✗ incorrect: 2/5 trials passed"
    card = hover_markdown(CORRECT, version=4)
    for part in (
        "2.31×",
        "spread 2.10–2.50×",
        "PyTorch: 0.231 ms",
        "kernel: 0.1 ms",
        "NVIDIA H200",
        "5/5 trials",
        "timed calls: 30",
        "2026-12-02 10:00:00 UTC (document version 4)",
    ):
        assert part in card, part
    compiled = VerifyResult(Verdict.COMPILED, Stage.COMPILE, "c.py", compile_only=True)
    assert "no speedup shown: no GPU here" in hover_markdown(compiled, compile_only_reason="no GPU here")
    noise = Diagnostic(
        Severity.WARNING,
        "Speedup not measured: noise.",
        "timing.unresolved",
        Stage.TIMING,
        Location("c.py", 9),
    )
    unresolved = dataclasses.replace(
        CORRECT, candidate=None, speedup=None, speedup_min=None, speedup_max=None, diagnostics=(noise,)
    )
    assert lens_title(unresolved) == "✓ correct · speedup too small to resolve · H200"
    card = hover_markdown(unresolved)
    assert "×" not in card and "kernel: —" in card and "PyTorch: 0.231 ms" in card


def test_hover_card_per_document_state() -> None:
    assert hover_card("x", None).startswith("**cudice: not verified yet**")
    running = hover_card("x", CORRECT, is_running=True)
    assert running.startswith("**cudice: verifying…**") and "previous result:" in running
    assert hover_card("x", None, is_running=True) == "**cudice: verifying…**\n"
    shown = hover_card("x", CORRECT, result_source="x", version=3)
    assert shown == hover_markdown(CORRECT, version=3)
    edited = hover_card("y", CORRECT, result_source="x", version=3)
    assert edited.startswith("**edited since this result**") and edited.endswith(shown)


def test_code_lens_states() -> None:
    cand = (EXAMPLES / "relu_cuda.py").read_text()
    o, index = _doc(cand), LineIndex.of(cand)
    line = cand[: cand.index("class ModelNew")].count("\n")
    (lens,) = code_lenses(uri="u", doc=o, index=index, result=None, is_running=False)
    assert lens.range.start.line == line and lens.command.command == "cudice.verify"
    assert lens.command.title == "cudice: not verified yet · verify"
    (lens,) = code_lenses(uri="u", doc=o, index=index, result=CORRECT, is_running=True)
    assert "verifying" in lens.command.title
    (lens,) = code_lenses(uri="u", doc=o, index=index, result=CORRECT, is_running=False)
    assert lens.command.title == "✓ 2.31× vs PyTorch · H200 · re-verify"
    (lens,) = code_lenses(uri="u", doc=o, index=index, result=CORRECT, is_running=False, is_stale=True)
    assert lens.command.title == "edited since: ✓ 2.31× vs PyTorch · H200 · re-verify"
    ref = (EXAMPLES / "relu.py").read_text()
    assert code_lenses(uri="u", doc=_doc(ref), index=LineIndex.of(ref), result=None, is_running=False) == []
