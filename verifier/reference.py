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
    where = spec.span.location(doc.path) if spec.span else Location(doc.path, 1, 1)
    if path is None:
        return ResolvedReference(None, (Diagnostic(
            Severity.ERROR, "No reference: add `Model` + `get_inputs()` to this file, a comment "
            "`# cudice: reference=path/to/problem.py`, or pass `--reference PATH`.",
            "parse.no_reference", Stage.PARSE, where),))
    if not path.is_file():
        how = "fix the path in the `# cudice: reference=` comment" if spec.origin == "comment" else "check --reference"
        return ResolvedReference(None, (Diagnostic(
            Severity.ERROR, f"Reference file {path} does not exist ({how}; comment paths are relative to "
            "the candidate's folder).", "parse.reference_missing", Stage.PARSE, where),))
    ref = read_document(path, require_candidate=False)
    problems = list(ref.problems)
    if ref.model is None:
        problems.append(Diagnostic(Severity.ERROR, f"The reference {path} has no `class Model`.",
                                   "parse.reference_no_model", Stage.PARSE, Location(str(path), 1, 1)))
    if ref.get_inputs is None:
        problems.append(Diagnostic(Severity.ERROR, f"The reference {path} has no `get_inputs()`.",
                                   "parse.no_get_inputs", Stage.PARSE, Location(str(path), 1, 1)))
    errors = tuple(d for d in problems if d.severity is Severity.ERROR)
    if errors:
        # Repeat the reason at the candidate's own reference comment so the editor shows it there.
        head = Diagnostic(Severity.ERROR, f"The reference {path} is not usable: {errors[0].message}",
                          "parse.reference_invalid", Stage.PARSE, where)
        return ResolvedReference(None, (head, *errors))
    return ResolvedReference(ref, ())
