"""Find and check a candidate's reference (README convention, see `document.py`).

`resolve_reference(doc)` returns the parsed reference `Document` (the candidate itself when it
holds `Model` + `get_inputs`) or diagnostics that say what is missing and where. It reads the
reference file from disk but never imports it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cudice.verifier.document import Document, read_document
from cudice.verifier.result import Diagnostic, Location, Severity, Stage


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


def resolve_reference(doc: Document) -> ResolvedReference:
    """Parse and check the reference named by `doc.reference`."""
    spec = doc.reference
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
    ref = read_document(path, require_candidate=False)
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
        tree = ast.parse(text)
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
