"""`VerifyResult` -> LSP diagnostics for the document that was verified.

Every diagnostic gets `source: "cudice"`, the verifier's stable `code` and (when the client
supports it) a `codeDescription` link to `docs/diagnostics.md#<code>`. Related locations become
`relatedInformation` when the client supports it, otherwise they are appended to the message
(as clangd does). Findings located in another file (the reference) are shown at the top of
this document with that file's name. A compile-only result gets an Information diagnostic that
says why no speedup is shown; a failed run without any located error (a crashed or timed-out
worker) gets one Error diagnostic on `class ModelNew` with the last line of its error text.

Not covered: pull diagnostics; findings are pushed (`textDocument/publishDiagnostics`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from cudice.server.protocol import DIAGNOSTIC_SOURCE
from cudice.verifier.source.document import Document
from cudice.verifier.source.positions import LineIndex
from cudice.verifier.source.result import Diagnostic, Location, Verdict, VerifyResult
from lsprotocol import types as lsp

WEB_DOCS = "https://github.com/cudice/cudice/blob/main/docs/diagnostics.md"
COMPILE_ONLY_CODE = "server.compile_only"  # the server's own codes: documented in docs/server.md
FAILED_CODE = "server.verify_failed"
_FAILURES = (
    Verdict.CRASH,
    Verdict.TIMEOUT,
    Verdict.RUNTIME_ERROR,
    Verdict.INCORRECT,
    Verdict.COMPILE_ERROR,
    Verdict.STATIC_VIOLATION,
    Verdict.INVALID_INPUT,
)

_SEVERITY = {
    "error": lsp.DiagnosticSeverity.Error,
    "warning": lsp.DiagnosticSeverity.Warning,
    "information": lsp.DiagnosticSeverity.Information,
    "hint": lsp.DiagnosticSeverity.Hint,
}


def docs_base(page: str = "diagnostics.md") -> str:
    """`file://.../docs/<page>` of the installed checkout when present, else the web docs."""
    local = Path(__file__).resolve().parents[2] / "docs" / page
    return local.as_uri() if local.is_file() else WEB_DOCS.replace("diagnostics.md", page)


@dataclass(frozen=True, slots=True)
class ClientSupport:
    """The diagnostic features the client advertised."""

    related_information: bool = True
    code_description: bool = True

    @classmethod
    def of(cls, caps: lsp.ClientCapabilities) -> ClientSupport:
        pub = caps.text_document.publish_diagnostics if caps.text_document else None
        if pub is None:
            return cls(False, False)
        return cls(bool(pub.related_information), bool(pub.code_description_support))


def same_file(a: str, b: str) -> bool:
    """Whether the paths `a` and `b` name one file (compared as absolute paths when one is missing)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def location_range(index: LineIndex, loc: Location) -> lsp.Range:
    """1-based verifier location -> LSP range; no end means "to the end of that line"."""
    start = index.position(index.offset_at(loc.line, loc.column))
    if loc.end_line is not None and loc.end_column is not None:
        end = index.position(index.offset_at(max(loc.end_line, loc.line), loc.end_column))
    else:
        end = (start[0], index.units(index.line_text(start[0])))
    if end < start:
        end = start
    return lsp.Range(lsp.Position(*start), lsp.Position(*end))


def _anchor(index: LineIndex, doc: Document) -> lsp.Range:
    cls = doc.model_new
    if cls is not None:
        s, e = index.position(cls.name_span.start), index.position(cls.name_span.end)
        return lsp.Range(lsp.Position(*s), lsp.Position(*e))
    return lsp.Range(lsp.Position(0, 0), lsp.Position(0, len(index.line_text(0))))


def _build_anchor(index: LineIndex, doc: Document) -> lsp.Range:
    """The first line of the `load_inline(...)` call (what was built); `class ModelNew` without one.
    Not `class ModelNew`'s line: a long message there pushes the code lens (same line, end-of-line
    text in Neovim) off the screen."""
    if not doc.load_inline_calls:
        return _anchor(index, doc)
    start = doc.load_inline_calls[0].span.start
    newline = doc.text.find("\n", start)
    end = len(doc.text) if newline < 0 else newline
    return lsp.Range(lsp.Position(*index.position(start)), lsp.Position(*index.position(end)))


def _related_range(path: str, loc: Location) -> lsp.Range:
    line, col = max(loc.line - 1, 0), max(loc.column - 1, 0)
    return lsp.Range(lsp.Position(line, col), lsp.Position(line, col))


def to_lsp(
    diag: Diagnostic, *, path: str, index: LineIndex, doc: Document, support: ClientSupport, base: str
) -> lsp.Diagnostic:
    """One verifier diagnostic -> one LSP diagnostic in the document at `path`."""
    message = diag.message
    loc = diag.location
    if loc is not None and same_file(loc.path, path):
        rng = location_range(index, loc)
    else:
        rng = _anchor(index, doc)
        if loc is not None:
            message = f"{os.path.basename(loc.path)}:{loc.line}: {message}"
    related: list[lsp.DiagnosticRelatedInformation] | None = None
    if diag.related:
        if support.related_information:
            related = [
                lsp.DiagnosticRelatedInformation(
                    lsp.Location(Path(os.path.abspath(r.path)).as_uri(), _related_range(r.path, r)), text
                )
                for r, text in diag.related
            ]
        else:
            message += "".join(f"\n  {os.path.basename(r.path)}:{r.line}: {text}" for r, text in diag.related)
    return lsp.Diagnostic(
        range=rng,
        message=message,
        severity=_SEVERITY.get(diag.severity.value, lsp.DiagnosticSeverity.Error),
        code=diag.code,
        code_description=lsp.CodeDescription(href=f"{base}#{diag.code}")
        if support.code_description
        else None,
        source=DIAGNOSTIC_SOURCE,
        related_information=related,
    )


def result_diagnostics(
    result: VerifyResult,
    *,
    path: str,
    doc: Document,
    index: LineIndex,
    support: ClientSupport,
    compile_only_reason: str | None = None,
    base: str | None = None,
) -> list[lsp.Diagnostic]:
    """All diagnostics of `result` for the document `doc` at `path`; `index` is its line index in
    the client's position encoding."""
    base = base or docs_base()
    out: list[lsp.Diagnostic] = []
    seen: set[tuple[int, int, int, int, str, str]] = set()
    for d in result.diagnostics:  # one diagnostic per problem: a finding reported twice (fast check and
        found = to_lsp(d, path=path, index=index, doc=doc, support=support, base=base)  # build) once
        r = found.range
        key = (r.start.line, r.start.character, r.end.line, r.end.character, str(found.code), found.message)
        if key not in seen:
            seen.add(key)
            out.append(found)
    if result.verdict in _FAILURES and not any(d.severity == lsp.DiagnosticSeverity.Error for d in out):
        # A failure with no located finding (a crashed or timed-out worker): never fail silently.
        detail = (result.error or "").strip().splitlines()[-1:] or ["no details were reported"]
        message = f"Verification ended with `{result.verdict.value}` at the {result.stage.value} stage: "
        out.append(
            _server_diagnostic(
                FAILED_CODE, message + detail[0], lsp.DiagnosticSeverity.Error, _anchor(index, doc), support
            )
        )
    verifier_said_why = any(d.code == "verify.no_gpu" for d in result.diagnostics)
    if result.compile_only and result.verdict is Verdict.COMPILED and not verifier_said_why:
        why = compile_only_reason or "compile-only mode is on (cudice.verify.compileOnly)"
        out.append(
            _server_diagnostic(
                COMPILE_ONLY_CODE,
                f"Compiles. No correctness or speedup measured: {why}.",
                lsp.DiagnosticSeverity.Information,
                _build_anchor(index, doc),
                support,
            )
        )
    return out


def _server_diagnostic(
    code: str, message: str, severity: lsp.DiagnosticSeverity, rng: lsp.Range, support: ClientSupport
) -> lsp.Diagnostic:
    """A diagnostic of the server's own (`code` documented in docs/server.md), not the verifier's."""
    return lsp.Diagnostic(
        range=rng,
        message=message,
        severity=severity,
        code=code,
        code_description=lsp.CodeDescription(href=f"{docs_base('server.md')}#{code}")
        if support.code_description
        else None,
        source=DIAGNOSTIC_SOURCE,
    )
