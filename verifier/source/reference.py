"""Find and check a candidate's reference (README convention, see `source/document.py`).

`resolve_reference(doc)` returns the parsed reference `Document` (the candidate itself when it
holds `Model` + `get_inputs`) or diagnostics that say what is missing and where. It reads the
reference file from disk (or takes its text, `source=`) but never imports it; calling its
`get_inputs()` is run/reference_probe.py's job, in a child process.

A candidate without a usable reference is still checked and compiled: api.py reports these
diagnostics as `as_warnings()` words them; only correctness and timing need a reference.
`NO_REFERENCE_CODES` names the diagnostics that mean "no usable reference", for the CLI's report.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from cudice.verifier.source import pyparse
from cudice.verifier.source.document import Document, parse_document, read_document
from cudice.verifier.source.result import Diagnostic, Location, Severity, Stage

NO_REFERENCE_CODES = frozenset({"parse.no_reference", "parse.reference_missing", "parse.reference_invalid"})
HOW_TO_GIVE_ONE = (
    "Give one with `--reference PATH`, a comment `# cudice: reference=path/to/problem.py` in this "
    "file, or `Model` + `get_inputs()` in this file."
)


@dataclass(frozen=True, slots=True)
class ResolvedReference:
    document: Document | None
    diagnostics: tuple[Diagnostic, ...]

    @property
    def path(self) -> str | None:
        return self.document.path if self.document else None


def reference_path(doc: Document) -> Path | None:
    """The reference's path on disk (comment paths are relative to the candidate's folder)."""
    spec = doc.reference
    if spec.path is None:
        return None
    if spec.origin == "comment":
        return (Path(doc.path).parent / spec.path).resolve()
    return Path(spec.path).resolve()


def resolve_reference(doc: Document, source: str | None = None) -> ResolvedReference:
    """Parse and check the reference named by `doc.reference`.

    `source` is the reference's text, given instead of a file (the RL reward's problems): it is
    parsed under the name `doc.reference.path` (a pseudo path for locations, never read), and a
    candidate's own `Model` or reference comment is then ignored.
    """
    spec = doc.reference
    if source is not None:
        return _checked(parse_document(source, spec.path or "<reference>", require_candidate=False), doc)
    if spec.origin == "same_file":
        return ResolvedReference(doc, ())
    path = reference_path(doc)
    where = doc.location(spec.span) if spec.span else Location(doc.path, 1, 1)
    if path is None:
        return ResolvedReference(
            None,
            (
                Diagnostic(
                    Severity.ERROR,
                    "No reference: add `Model` + `get_inputs()` to this file, a comment "
                    "`# cudice: reference=path/to/problem.py`, or pass `--reference PATH`.",
                    "parse.no_reference",
                    Stage.PARSE,
                    where,
                ),
            ),
        )
    if not path.is_file():
        how = (
            "fix the path in the `# cudice: reference=` comment"
            if spec.origin == "comment"
            else "check --reference"
        )
        return ResolvedReference(
            None,
            (
                Diagnostic(
                    Severity.ERROR,
                    f"Reference file {path} does not exist ({how}; comment paths are relative to "
                    "the candidate's folder).",
                    "parse.reference_missing",
                    Stage.PARSE,
                    where,
                ),
            ),
        )
    return _checked(read_document(path, require_candidate=False), doc)


def as_warnings(found: tuple[Diagnostic, ...]) -> list[Diagnostic]:
    """Why there is no usable reference, as a verification without one reports it: warnings (the
    candidate is still checked and compiled), `parse.no_reference` saying what is left unchecked."""
    out = []
    for d in found:
        if d.code == "parse.no_reference":
            d = replace(
                d,
                message="No reference: only the static checks and the compile run; correctness and "
                f"speed are not checked. {HOW_TO_GIVE_ONE}",
            )
        out.append(replace(d, severity=Severity.WARNING))
    return out


def _checked(ref: Document, doc: Document) -> ResolvedReference:
    """`ref` when it has `Model` and `get_inputs()`, else the reasons (repeated at `doc`'s comment)."""
    spec, path = doc.reference, ref.path
    where = doc.location(spec.span) if spec.span else Location(doc.path, 1, 1)
    problems = list(ref.problems)
    if ref.model is None:
        problems.append(
            Diagnostic(
                Severity.ERROR,
                f"The reference {path} has no `class Model`.",
                "parse.reference_no_model",
                Stage.PARSE,
                Location(str(path), 1, 1),
            )
        )
    if ref.get_inputs is None:
        problems.append(
            Diagnostic(
                Severity.ERROR,
                f"The reference {path} has no `get_inputs()`.",
                "parse.no_get_inputs",
                Stage.PARSE,
                Location(str(path), 1, 1),
            )
        )
    errors = tuple(d for d in problems if d.severity is Severity.ERROR)
    if errors:
        # Repeat the reason at the candidate's own reference comment so the editor shows it there.
        head = Diagnostic(
            Severity.ERROR,
            f"The reference {path} is not usable: {errors[0].message}",
            "parse.reference_invalid",
            Stage.PARSE,
            where,
        )
        return ResolvedReference(None, (head, *errors))
    return ResolvedReference(ref, ())


_BUILD_CALLS = ("load_inline", "load")  # torch.utils.cpp_extension's builders (`load` only as an attribute)


def reference_only_source(text: str) -> str:
    """The part of a self-contained candidate that is its reference, line numbers kept.

    A candidate that holds its own `Model` + `get_inputs` is also its reference, but the judge
    runs the reference in its own process and must not run the candidate's code there: a
    module-level `load_inline` would build the extension in the judge with torch's own builder
    (a full, uncached build) and `ModelNew`'s definition would execute. This blanks the lines of
    every top-level statement that defines `ModelNew`, calls `load_inline` (or
    `cpp_extension.load`), or uses a name such a statement bound (`ext = load_inline(...)`,
    `fn = ext.forward`), and keeps the rest where it was. Text that does not parse is returned
    unchanged (running it reports the error as before).
    """
    import ast

    try:
        tree = pyparse.parse(text)
    except SyntaxError:
        return text
    removed: set[str] = set()
    dropped: list[ast.stmt] = []
    kept: list[ast.stmt] = []
    for stmt in tree.body:
        if _builds_or_defines_candidate(stmt) or _uses(stmt, removed):
            dropped.append(stmt)
            removed |= _bound_names(stmt)
        else:
            kept.append(stmt)
    if not dropped:
        return text
    lines = text.split("\n")
    blank: set[int] = set()
    for stmt in dropped:
        first = min([stmt.lineno, *(d.lineno for d in getattr(stmt, "decorator_list", []))])
        blank.update(range(first, (stmt.end_lineno or stmt.lineno) + 1))
    if any(
        k.lineno in blank or (k.end_lineno or k.lineno) in blank for k in kept
    ):  # `a = 1; ext = load_inline(...)`
        return ast.unparse(ast.Module(body=kept, type_ignores=[]))
    return "\n".join("" if i + 1 in blank else line for i, line in enumerate(lines))


def _builds_or_defines_candidate(stmt: object) -> bool:
    import ast

    if isinstance(stmt, ast.ClassDef) and stmt.name == "ModelNew":
        return True
    for node in ast.walk(stmt):  # type: ignore[arg-type]
        if isinstance(node, ast.Call):
            f = node.func
            if (isinstance(f, ast.Name) and f.id == "load_inline") or (
                isinstance(f, ast.Attribute) and f.attr in _BUILD_CALLS
            ):
                if isinstance(f, ast.Attribute) and f.attr == "load" and not _is_cpp_extension(f.value):
                    continue  # torch.load, json.load, ...: not a builder
                return True
    return False


def _is_cpp_extension(node: object) -> bool:
    import ast

    return (isinstance(node, ast.Name) and node.id in ("cpp_extension", "ce")) or (
        isinstance(node, ast.Attribute) and node.attr == "cpp_extension"
    )


def _uses(stmt: object, names: set[str]) -> bool:
    import ast

    return bool(names) and any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(stmt))  # type: ignore[arg-type]


def _bound_names(stmt: object) -> set[str]:
    import ast

    out: set[str] = set()
    if isinstance(stmt, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
        out.add(stmt.name)
        return out
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        out |= {(a.asname or a.name).split(".")[0] for a in stmt.names}
        return out
    todo: list[ast.AST] = [stmt]  # type: ignore[list-item]
    while todo:  # module-level bindings only: not inside nested scopes (functions, lambdas, comprehensions)
        node = todo.pop()
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            out.add(node.id)
        elif isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node is not stmt:
            out.add(node.name)
            continue
        if not isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            todo.extend(ast.iter_child_nodes(node))
    return out
