"""Human-readable text for a `VerifyResult`: the code-lens title, the hover Markdown, a one-word label.

Figures keep full precision in the record; rounding happens only here. This module formats;
it does not decide verdicts (the verifier does) nor where text is shown (hover.py, code_lens.py).
"""

from __future__ import annotations

from cudice.verifier.source.result import Verdict, VerifyResult

_FAIL_LABEL = {
    Verdict.INCORRECT: "incorrect",
    Verdict.COMPILE_ERROR: "compile error",
    Verdict.STATIC_VIOLATION: "static check failed",
    Verdict.RUNTIME_ERROR: "runtime error",
    Verdict.TIMEOUT: "timed out",
    Verdict.CRASH: "crashed",
    Verdict.INVALID_INPUT: "not a candidate",
}


def short_gpu(name: str | None) -> str:
    """`NVIDIA H200` -> `H200`."""
    if not name:
        return ""
    return name.removeprefix("NVIDIA ").removeprefix("GeForce ").strip()


def speedup_text(result: VerifyResult) -> str:
    return f"{result.speedup:.2f}×" if result.speedup is not None else ""


def lens_title(result: VerifyResult, required_speedup: float = 1.0) -> str:
    """One line for the code lens over `class ModelNew`, e.g. `✓ 2.31× vs PyTorch · H200`."""
    gpu = short_gpu(result.gpu_name)
    if result.verdict is Verdict.CORRECT and result.speedup is not None:
        mark = "✓" if result.is_fast(required_speedup) or required_speedup <= 0 else "⚠"
        suspicious = " (suspicious)" if result.is_suspicious else ""
        return f"{mark} {speedup_text(result)} vs PyTorch{suspicious}" + (f" · {gpu}" if gpu else "")
    if result.verdict is Verdict.CORRECT and any(d.code == "timing.unresolved" for d in result.diagnostics):
        return "✓ correct · speedup too small to resolve" + (f" · {gpu}" if gpu else "")
    if result.verdict is Verdict.CORRECT:
        return "✓ correct (not timed)"
    if result.verdict is Verdict.COMPILED:
        return "✓ compiles · no speedup measured (compile-only)"
    if result.verdict is Verdict.CHECKED and any(d.code == "verify.not_compiled" for d in result.diagnostics):
        return "⚠ not compiled: its CUDA sources are built at run time"
    if result.verdict is Verdict.CHECKED:
        return "✓ static checks and fast compile passed · building…"
    label = _FAIL_LABEL.get(result.verdict, result.verdict.value)
    num = sum(1 for d in result.diagnostics if d.severity.value == "error")
    extra = ""
    if result.verdict is Verdict.INCORRECT and result.num_trials:
        extra = f": {result.num_correct_trials}/{result.num_trials} trials passed"
    elif num:
        extra = f" ({num})"
    return f"✗ {label}{extra}"


def _ms(value: float | None) -> str:
    return f"{value:.4g} ms" if value is not None else "—"


def hover_markdown(
    result: VerifyResult,
    *,
    compile_only_reason: str | None = None,
    version: int | None = None,
    required_speedup: float = 1.0,
) -> str:
    """The hover card: verdict, speedup with spread, runtimes, GPU, trials, when measured."""
    lines = [f"**cudice: {lens_title(result, required_speedup)}**", ""]
    if result.speedup is not None:
        spread = ""
        if result.speedup_min is not None and result.speedup_max is not None:
            spread = f" (spread {result.speedup_min:.2f}–{result.speedup_max:.2f}×)"
        lines.append(f"- speedup: **{speedup_text(result)}**{spread}; required > {required_speedup:g}×")
        if result.is_suspicious:
            lines.append("- ⚠ suspiciously fast: check that the kernel really does the work")
    if result.reference is not None or result.candidate is not None:
        lines.append(
            f"- PyTorch: {_ms(result.reference_runtime_ms)} · kernel: {_ms(result.runtime_ms)} (median)"
        )
    if result.num_trials:
        lines.append(f"- correctness: {result.num_correct_trials}/{result.num_trials} trials passed")
        if result.max_abs_err is not None:
            lines.append(f"- max abs error: {result.max_abs_err:.3g}")
    if result.candidate is not None:
        lines.append(f"- timed calls: {result.candidate.num_trials}")
    if result.gpu_name:
        lines.append(f"- GPU: {result.gpu_name}")
    if result.compile_only:
        why = compile_only_reason or "compile-only mode"
        lines.append(f"- no speedup shown: {why}")
    if result.measured_at:
        when = result.measured_at.replace("T", " ")[:19] + " UTC"
        lines.append(
            f"- measured: {when}" + (f" (document version {version})" if version is not None else "")
        )
    if result.error and result.verdict is not Verdict.CORRECT:
        tail = result.error.strip().splitlines()[-1:] if result.error.strip() else []
        if tail:
            lines.append(f"- error: `{tail[0][:200]}`")
    return "\n".join(lines).rstrip() + "\n"
