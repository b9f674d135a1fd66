"""The source strings of a KernelBench document: what `load_inline` receives, mapped to the file.

`SourceStrings(source, index, tree)` resolves a `cpp_sources` / `cuda_sources` argument to
`CudaSource`s: string literals written directly, through module-level variables, in lists, by
implicit concatenation or by `+` of literals, each with a `SourceSpan` that maps every character
of its value back to the `.py` file (`sourcemap.scan_literal`). `loose_cuda` finds module-level
strings that hold CUDA text no call receives yet (a scaffold being written); `kernels` locates
the `__global__` definitions inside a mapped string, names and bodies, in the file.

Part of the document model (`source/document.py` owns the parse); nothing here is imported or run.
Not covered: values computed at run time (f-strings with fields, `.format`, calls, `+` of
non-literals, variables assigned more than once or inside functions) are unmappable, with the
reason; kernels in such sources, and kernels a macro writes, are not listed.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from cudice.verifier.source.bindings import NOT_DEFINED, bound_names
from cudice.verifier.source.positions import LineIndex, Span
from cudice.verifier.source.sourcemap import LiteralScanError, SourceSpan, scan_literal
from cudice.verifier.static.cpp_scan import blank_comments_and_strings, find_functions

_CUDA_TEXT = re.compile(r"__global__|#include\s*<cuda|<<<")  # a string that holds CUDA source


@dataclass(frozen=True, slots=True)
class CudaSource:
    """One string that `load_inline` receives in `cpp_sources` or `cuda_sources` (or, with
    `index == -1`, a string holding CUDA text that no `load_inline` call receives yet).

    `content` delimits the string's *contents* in the file (inside the quotes; for concatenated
    literals, from the first content character to the last), so a client can split the file
    into prefix / middle / suffix for infilling. `span` and `content` are None when unmappable.
    """

    kind: str  # "cpp" or "cuda"
    index: int  # position in the load_inline list (0 for a plain string, -1 when not passed)
    expr: Span  # the expression as written in the call or the variable's assignment
    variable: str | None  # module-level variable that feeds the call, if any
    span: SourceSpan | None
    reason: str = ""  # why span is None
    is_single_literal: bool = False  # one plain literal (no f, no concatenation): contents replaceable as is

    @property
    def mappable(self) -> bool:
        return self.span is not None

    @property
    def text(self) -> str | None:
        return self.span.text if self.span else None

    @property
    def content(self) -> Span | None:
        return self.span.content if self.span else None


@dataclass(frozen=True, slots=True)
class Kernel:
    """A `__global__` function: its name in the file and, for a definition, the file span
    between its braces (None for a raw `.cu` kernel, whose body the document does not need)."""

    name: str
    span: Span
    body: Span | None = None


class SourceStrings:
    """Resolves the source arguments of the module `tree` (the parse of `source`) to `CudaSource`s."""

    def __init__(self, source: str, index: LineIndex, tree: ast.Module) -> None:
        self.source, self.index, self.tree = source, index, tree
        self._assigned: dict[str, list[ast.expr]] = {}  # module-level name -> the values assigned to it
        self._augmented: set[str] = set()  # names changed by `+=` and the like: values unknown
        for stmt in tree.body:
            if isinstance(stmt, ast.Assign):
                for t in stmt.targets:
                    if isinstance(t, ast.Name):
                        self._assigned.setdefault(t.id, []).append(stmt.value)
            elif (
                isinstance(stmt, ast.AnnAssign)
                and isinstance(stmt.target, ast.Name)
                and stmt.value is not None
            ):
                self._assigned.setdefault(stmt.target.id, []).append(stmt.value)
            elif isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
                self._augmented.add(stmt.target.id)

    def span(self, node: ast.expr) -> Span:
        return self.index.node_span(node)

    def loose_cuda(self, seen: set[int]) -> tuple[CudaSource, ...]:
        """Module-level `name = "..."` strings holding CUDA text whose literal does not start at
        an offset in `seen` (the starts of the sources the calls receive)."""
        loose: list[CudaSource] = []
        for stmt in self.tree.body:
            target = (
                stmt.targets[0]
                if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                else (stmt.target if isinstance(stmt, ast.AnnAssign) else None)
            )
            value = stmt.value if isinstance(stmt, (ast.Assign, ast.AnnAssign)) else None
            if (
                isinstance(target, ast.Name)
                and isinstance(value, ast.Constant)
                and isinstance(value.value, str)
                and _CUDA_TEXT.search(value.value)
                and self.span(value).start not in seen
            ):
                loose.append(self.one_source("cuda", -1, value, target.id))
        return tuple(loose)

    def sources(
        self, kind: str, expr: ast.expr | None, reasons: list[str], undefined: list[str]
    ) -> tuple[CudaSource, ...]:
        """The sources `expr` passes as `kind`; why they cannot be read statically goes to
        `reasons`, and a name this file never binds to `undefined` too."""
        if expr is None or (isinstance(expr, ast.Constant) and expr.value is None):
            return ()
        variable = None
        if isinstance(expr, ast.Name):
            variable = expr.id
            value = self.module_assignment(expr.id)
            if value is None:
                bound = bound_names(self.tree)
                if bound is not None and expr.id not in bound:
                    undefined.append(expr.id)
                    reasons.append(f"`{expr.id}` {NOT_DEFINED}")
                else:
                    reasons.append(f"`{expr.id}` is not a single module-level assignment")
                return ()
            expr = value
        if isinstance(expr, (ast.List, ast.Tuple)):
            return tuple(self.one_source(kind, i, e, variable) for i, e in enumerate(expr.elts))
        return (self.one_source(kind, 0, expr, variable),)

    def module_assignment(self, name: str) -> ast.expr | None:
        """The value of `name` when the module assigns it exactly once (and never augments it)."""
        found = self._assigned.get(name, [])
        return found[0] if len(found) == 1 and name not in self._augmented else None

    def one_source(
        self, kind: str, i: int, expr: ast.expr, variable: str | None, depth: int = 0
    ) -> CudaSource:
        where = self.span(expr)
        if isinstance(expr, ast.Name) and depth < 4:
            value = self.module_assignment(expr.id)
            if value is not None:
                return self.one_source(kind, i, value, expr.id, depth + 1)
        try:
            span = self.literal_span(expr)
        except LiteralScanError as exc:
            return CudaSource(kind, i, where, variable, None, str(exc))
        if span is None:
            return CudaSource(kind, i, where, variable, None, _dynamic_reason(expr))
        single = isinstance(expr, ast.Constant) and len(span.pieces) == 1
        return CudaSource(kind, i, where, variable, span, "", single)

    def literal_span(self, expr: ast.expr, depth: int = 0) -> SourceSpan | None:
        """The mapped value of a literal expression, or None when it is computed."""
        if isinstance(expr, ast.Name) and depth < 4:
            value = self.module_assignment(expr.id)
            return self.literal_span(value, depth + 1) if value is not None else None
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            pass
        elif isinstance(expr, ast.JoinedStr) and all(isinstance(v, ast.Constant) for v in expr.values):
            pass
        elif isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
            left, right = self.literal_span(expr.left, depth), self.literal_span(expr.right, depth)
            return left.concat(right) if left is not None and right is not None else None
        else:
            return None
        sp = self.span(expr)
        span = scan_literal(self.source, sp.start, sp.end, self.index)
        expected = (
            expr.value
            if isinstance(expr, ast.Constant)
            else "".join(str(v.value) for v in expr.values if isinstance(v, ast.Constant))
        )
        if span.text != expected:  # internal invariant; fall back to "unmappable" rather than mislead
            raise LiteralScanError("the literal's text could not be mapped character by character")
        return span


def kernels(src: CudaSource) -> list[Kernel]:
    """The `__global__` definitions in a mappable source, located in the file (comments and string
    literals inside the C++ ignored)."""
    if src.span is None:
        return []
    code = blank_comments_and_strings(src.span.text)
    out: list[Kernel] = []
    for fn in find_functions(code):
        if "__global__" not in fn.header:
            continue
        names = list(re.finditer(rf"\b{re.escape(fn.name)}\s*(?:<[^()]*>)?\s*\(", code[: fn.body_start]))
        if not names:
            continue
        at = names[-1].start()
        offsets = src.span.offsets
        body = Span(offsets[fn.body_start] + 1, offsets[fn.body_end - 1])  # between `{` and `}`
        out.append(Kernel(fn.name, src.span.file_span(at, at + len(fn.name)), body))
    return out


def _dynamic_reason(expr: ast.expr) -> str:
    if isinstance(expr, ast.JoinedStr):
        return "an f-string with replacement fields"
    if isinstance(expr, ast.Call):
        func = callee_name(expr.func)
        return "a `.format(...)` call" if func == "format" else f"the result of calling `{func or '...'}`"
    if isinstance(expr, ast.BinOp):
        return "an expression combining non-literal parts"
    if isinstance(expr, ast.Name):
        return f"`{expr.id}` is not a single module-level string assignment"
    return f"a `{type(expr).__name__}` expression"


def callee_name(func: ast.expr) -> str | None:
    """`f` for `f(...)` and `m.f(...)`: the called name without its receiver, else None."""
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None
