"""Build a virtual candidate's first `load_inline` module in one build mode, and the part of a
build's outcome that must not depend on the mode (shared by the fast-build tests; imported by
name: tests/ has no packages)."""

from __future__ import annotations

from cudice.verifier.build.compile import BuildResult, build_module
from cudice.verifier.build.generated import from_call
from cudice.verifier.config import VerifyConfig
from cudice.verifier.source.document import parse_document


def build_text(text: str, name: str, config: VerifyConfig, mode: str) -> BuildResult:
    """Compile (no link) the first `load_inline` module of `text`, read as `/virtual/{name}.py`."""
    doc = parse_document(text, f"/virtual/{name}.py")
    module = from_call(doc, doc.load_inline_calls[0])
    assert module is not None
    return build_module(module, doc.path, config, link=False, mode=mode)


def outcome(build: BuildResult) -> tuple[bool, set[tuple[object, ...]]]:
    """Whether it built, and every diagnostic's severity, code, message, line and column."""
    return build.ok, {
        (
            d.severity,
            d.code,
            d.message,
            d.location.line if d.location else None,
            d.location.column if d.location else None,
        )
        for d in build.diagnostics
    }
