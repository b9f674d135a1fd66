"""The C++/CUDA checks over what each `load_inline` call compiles, located in the candidate's file.

`extension_findings()` runs `cuda.check_cpp_sources` over the sources of every call that
resolves to `load_inline` (`names.LoadInlineUses`, under any name): literals the document
maps character by character are located through their source map; sources the file fixes by
other means (`static/sources.py`: f-strings over constants, `"".join`, `+=` …) on the expression
that builds them; a source the file does not fix is `static.dynamic_source` (an error; a warning in
`lenient`), and a name nothing in the file defines is reported as exactly that.
Sources a call received at run time get the same C++ checks in `checks.check_built_sources`.

Not covered: calls of `load_inline` the Python checks cannot find (through `getattr`, `globals()`;
`static/checks.py` rejects those as dynamic code).
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

from cudice.verifier.source.bindings import undefined_names
from cudice.verifier.source.document import Document
from cudice.verifier.source.result import Diagnostic, Location, Severity, Stage
from cudice.verifier.source.sourcemap import SourceSpan
from cudice.verifier.static.cuda import CppSource, Locator, check_cpp_sources
from cudice.verifier.static.names import LoadInlineUses
from cudice.verifier.static.policy import Strictness
from cudice.verifier.static.sources import ResolvedCall, call_functions, resolve_call_sources


def extension_findings(
    doc: Document, uses: LoadInlineUses, level: Strictness, low_ref: bool
) -> list[Diagnostic]:
    """The C++ findings of every `load_inline` call of a parsed candidate (`doc.tree` is set)."""
    assert doc.tree is not None
    tree = doc.tree
    diags: list[Diagnostic] = []
    recorded = dict(zip((id(n) for n in uses.spelled), doc.load_inline_calls, strict=True))
    for node in uses.calls:
        call = recorded.get(id(node))
        if call is not None:
            mapped = {(s.kind, s.index): s.span for s in call.sources if s.span is not None}
            functions = call.functions
        else:  # `li(...)` for `load_inline as li`: the document does not map it, its values are read here
            mapped, functions = {}, call_functions(tree, node)
        resolved = resolve_call_sources(tree, node)
        diags += _cpp_findings(doc, functions, mapped, resolved, level, low_ref)
    return diags


def _cpp_findings(
    doc: Document,
    functions: Sequence[str] | None,
    mapped: dict[tuple[str, int], SourceSpan],
    resolved: ResolvedCall,
    level: Strictness,
    low_ref: bool,
) -> list[Diagnostic]:
    """The C++ checks over every source of one call: mapped literals through their source map,
    sources computed from constants located on their expression, and `static.dynamic_source`
    for what the file does not fix (an undefined name is reported as one)."""
    sources: list[CppSource] = []
    diags: list[Diagnostic] = []
    dynamic_sev = Severity.WARNING if level is Strictness.LENIENT else Severity.ERROR
    for r in resolved.sources:
        span = mapped.get((r.kind, r.index))
        if span is not None:

            def locate(line: int, col: int, span: SourceSpan = span) -> Location:
                fl, fc = span.to_file(line, col)
                return Location(doc.path, fl, fc)

            sources.append(CppSource(span.text, locate, r.kind == "cuda"))
        elif r.text is not None:
            sources.append(
                CppSource(r.text, _fixed_locator(_node_location(doc.path, r.node)), r.kind == "cuda")
            )
        else:
            diags.append(_dynamic_source(doc, r.node, f"this {r.kind} source", dynamic_sev, plural=False))
    for node in resolved.dynamic_args:
        diags.append(_dynamic_source(doc, node, "these `load_inline` sources", dynamic_sev, plural=True))
    if sources:
        diags += check_cpp_sources(
            sources,
            functions,
            level,
            reference_low_precision=low_ref,
            check_launches=resolved.is_complete,
        )
    return diags


def _fixed_locator(where: Location) -> Locator:
    """Every finding in a source without a character map lands on the expression that builds it."""

    def locate(_line: int, _col: int) -> Location:
        return where

    return locate


def _node_location(path: str, node: ast.AST) -> Location:
    return Location(path, getattr(node, "lineno", 1), getattr(node, "col_offset", 0) + 1)


def _dynamic_source(
    doc: Document, node: ast.AST, what: str, severity: Severity, *, plural: bool
) -> Diagnostic:
    """`what` names the source(s) as the message's subject; `plural` makes its verbs agree."""
    path = doc.path
    missing = undefined_names(node, doc.tree) if doc.tree is not None else []
    if missing:
        unique = list(dict.fromkeys(missing))
        names = ", ".join(f"`{n}`" for n in unique)
        subject = f"names {names} are" if len(unique) > 1 else f"name {names} is"
        return Diagnostic(
            Severity.ERROR,
            f"{subject} not defined in this file, so {what} cannot be read (and the file would "
            "fail with a NameError). Check the spelling against the variable that holds the source.",
            "static.dynamic_source",
            Stage.STATIC,
            _node_location(path, node),
        )
    tail = (
        " In `lenient` only the run-time checks judge it."
        if severity is Severity.WARNING
        else " Write the source as a string literal (module-level constants in f-strings are fine)."
    )
    is_, it_compiles, it = ("are", "they compile", "them") if plural else ("is", "it compiles", "it")
    return Diagnostic(
        severity,
        f"{what} {is_} built at run time (a call, a file, a variable the file does not fix): "
        f"the static checks cannot read the C++/CUDA {it_compiles}, so ATen calls, streams, "
        f"dispatcher overrides or file access could hide in {it}." + tail,
        "static.dynamic_source",
        Stage.STATIC,
        _node_location(path, node),
    )
