"""The document model: what a KernelBench-format file contains, found without executing it.

`parse_document(source, path)` reads a candidate or reference `.py` file with `ast` and finds
`Model` / `ModelNew`, `get_inputs` / `get_init_inputs`, every `load_inline(...)` call and, for
its `cpp_sources` / `cuda_sources`, the string literals (directly, or through module-level
variables, lists of strings, implicit concatenation or `+` of literals) with a `SourceSpan`
mapping every generated character back to the file. A `.cu` file is a raw-kernel document
(`extern "C" __global__` kernels).

Reference convention (README): an explicit `--reference PATH`; else `Model` + `get_inputs` in
the candidate itself; else a `# cudice: reference=PATH` comment (PATH relative to the file).

Problems (syntax errors, missing pieces) are `Diagnostic`s on the document, located precisely;
`Document.invalid_result()` turns them into a `VerifyResult` with verdict `invalid_input`.

Not covered: sources whose value is computed (f-strings with fields, `.format`, function
calls, `+` of non-literals, variables assigned more than once or inside functions) are
recorded with `mappable=False` and the reason; their diagnostics point at the `load_inline`
call. Code is never imported or run here.
"""

from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from cudice.verifier.result import Diagnostic, Location, Severity, Stage, Verdict, VerifyResult
from cudice.verifier.sourcemap import LineIndex, LiteralScanError, SourceSpan, scan_literal

REFERENCE_COMMENT = re.compile(r"#\s*cudice:\s*reference\s*=\s*(?P<path>\S+)")
RAW_KERNEL = re.compile(r'extern\s+"C"\s+__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+(?P<name>\w+)')
LOAD_INLINE_PARAMS = ("name", "cpp_sources", "cuda_sources", "functions")


@dataclass(frozen=True, slots=True)
class Span:
    """A region of the file: 1-based lines/columns (end exclusive), plus character offsets."""

    line: int
    column: int
    end_line: int
    end_column: int
    start_offset: int
    end_offset: int

    def location(self, path: str) -> Location:
        return Location(path, self.line, self.column, self.end_line, self.end_column)


@dataclass(frozen=True, slots=True)
class ClassInfo:
    name: str
    span: Span
    bases: tuple[str, ...]  # unparsed base expressions, e.g. ("nn.Module",)
    forward: ast.FunctionDef | None = field(compare=False, repr=False)
    init_params: tuple[str, ...] = ()
    forward_params: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class FunctionInfo:
    name: str
    span: Span


@dataclass(frozen=True, slots=True)
class CudaSource:
    """One string that `load_inline` receives in `cpp_sources` or `cuda_sources`.

    `start_offset`/`end_offset` delimit the string's *contents* in the file (inside the quotes;
    for concatenated literals, from the first content character to the last), so a client can
    split the file into prefix / middle / suffix for infilling. `span` is None when unmappable.
    """

    kind: str  # "cpp" or "cuda"
    index: int  # position in the load_inline list (0 for a plain string)
    expr: Span  # the expression as written in the call or the variable's assignment
    variable: str | None  # module-level variable that feeds the call, if any
    span: SourceSpan | None
    reason: str = ""  # why span is None
    start_offset: int = -1
    end_offset: int = -1

    @property
    def mappable(self) -> bool:
        return self.span is not None

    @property
    def text(self) -> str | None:
        return self.span.text if self.span else None


@dataclass(frozen=True, slots=True)
class LoadInlineCall:
    span: Span
    name: str | None
    functions: tuple[str, ...] | None
    cpp_sources: tuple[CudaSource, ...]
    cuda_sources: tuple[CudaSource, ...]
    unmappable_reason: str = ""  # set when the sources list itself is dynamic

    @property
    def sources(self) -> tuple[CudaSource, ...]:
        return self.cpp_sources + self.cuda_sources

    @property
    def is_mappable(self) -> bool:
        return not self.unmappable_reason and all(s.mappable for s in self.sources)


@dataclass(frozen=True, slots=True)
class RawKernel:
    name: str
    span: Span


@dataclass(frozen=True, slots=True)
class ReferenceSpec:
    """Where the reference lives: `origin` is "argument", "same_file", "comment" or "none"."""

    origin: str
    path: str | None
    span: Span | None = None  # the `# cudice: reference=` comment


@dataclass(frozen=True, slots=True)
class Document:
    path: str
    text: str
    kind: str  # "python" or "cu"
    index: LineIndex
    model: ClassInfo | None = None
    model_new: ClassInfo | None = None
    get_inputs: FunctionInfo | None = None
    get_init_inputs: FunctionInfo | None = None
    load_inline_calls: tuple[LoadInlineCall, ...] = ()
    raw_kernels: tuple[RawKernel, ...] = ()
    reference: ReferenceSpec = ReferenceSpec("none", None)
    problems: tuple[Diagnostic, ...] = ()
    tree: ast.Module | None = field(default=None, compare=False, repr=False)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()

    @property
    def is_reference(self) -> bool:
        return self.model is not None and self.get_inputs is not None

    @property
    def has_errors(self) -> bool:
        return any(d.severity is Severity.ERROR for d in self.problems)

    def location(self, span: Span) -> Location:
        return span.location(self.path)

    def invalid_result(self) -> VerifyResult | None:
        """The `invalid_input` verdict when the document cannot be verified, else None."""
        if not self.has_errors:
            return None
        return VerifyResult(Verdict.INVALID_INPUT, Stage.PARSE, self.path, self.problems,
                            source_sha256=self.sha256)

    def cuda_source_at(self, offset: int) -> CudaSource | None:
        """The mappable source whose contents contain file offset `offset` (for infilling)."""
        for call in self.load_inline_calls:
            for src in call.sources:
                if src.mappable and src.start_offset <= offset <= src.end_offset:
                    return src
        return None


def parse_document(source: str, path: str, *, reference: str | None = None,
                   require_candidate: bool = True) -> Document:
    """Parse `source` (the text of the file at `path`) into a `Document`, without executing it.

    `reference` is an explicit reference path (the CLI's `--reference`), which wins over the
    file's own `Model` and over a `# cudice: reference=` comment. With `require_candidate`
    (the default) a Python file without `ModelNew` is a problem; pass False to parse a reference.
    Never raises on bad input: problems are in `Document.problems`.
    """
    index = LineIndex.of(source)
    if path.endswith((".cu", ".cuh")):
        return _parse_cu(source, path, index, reference)
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as exc:
        line, col = exc.lineno or 1, exc.offset or 1
        diag = Diagnostic(Severity.ERROR, f"Python syntax error: {exc.msg}. Fix the syntax so the file can be read.",
                          "parse.syntax_error", Stage.PARSE,
                          Location(path, line, col, exc.end_lineno or line, exc.end_offset or col + 1))
        return Document(path, source, "python", index, problems=(diag,))
    return _Parser(source, path, index, tree).build(reference, require_candidate)


def _parse_cu(source: str, path: str, index: LineIndex, reference: str | None) -> Document:
    kernels = []
    for m in RAW_KERNEL.finditer(source):
        kernels.append(RawKernel(m.group("name"), _span_of_offsets(index, m.start(), m.end())))
    ref = _reference_from_comment(source, index, comment_prefixes=("//", "#"))
    if reference is not None:
        ref = ReferenceSpec("argument", reference)
    problems: list[Diagnostic] = []
    if not kernels:
        problems.append(Diagnostic(
            Severity.ERROR, 'No `extern "C" __global__ void name(...)` kernel found: a raw .cu file must '
            "declare its kernels extern \"C\" so they can be launched by name.",
            "parse.no_kernel", Stage.PARSE, Location(path, 1, 1)))
    return Document(path, source, "cu", index, raw_kernels=tuple(kernels), reference=ref, problems=tuple(problems))


def _span_of_offsets(index: LineIndex, start: int, end: int) -> Span:
    line, col = index.position(start)
    end_line, end_col = index.position(end)
    return Span(line, col, end_line, end_col, start, end)


def _reference_from_comment(source: str, index: LineIndex, comment_prefixes: tuple[str, ...] = ("#",)) -> ReferenceSpec:
    pattern = REFERENCE_COMMENT if comment_prefixes == ("#",) else re.compile(
        r"(?:#|//)\s*cudice:\s*reference\s*=\s*(?P<path>\S+)")
    m = pattern.search(source)
    if m is None:
        return ReferenceSpec("none", None)
    return ReferenceSpec("comment", m.group("path"), _span_of_offsets(index, m.start(), m.end()))


class _Parser:
    def __init__(self, source: str, path: str, index: LineIndex, tree: ast.Module) -> None:
        self.source, self.path, self.index, self.tree = source, path, index, tree
        self.problems: list[Diagnostic] = []
        self.lines = source.splitlines(keepends=True)

    # -- positions -------------------------------------------------------------------------
    def offset(self, lineno: int, col_utf8: int) -> int:
        """Character offset of an ast (1-based line, UTF-8 byte column) position."""
        line_text = self.lines[lineno - 1] if lineno - 1 < len(self.lines) else ""
        col = len(line_text.encode()[:col_utf8].decode(errors="ignore"))
        return self.index.offset(lineno, col + 1)

    def span(self, node: ast.AST) -> Span:
        start = self.offset(node.lineno, node.col_offset)  # type: ignore[attr-defined]
        end = self.offset(node.end_lineno or node.lineno, node.end_col_offset or 0)  # type: ignore[attr-defined]
        return _span_of_offsets(self.index, start, end)

    def problem(self, message: str, code: str, node: ast.AST | Span | None, severity: Severity = Severity.ERROR) -> None:
        if node is None:
            loc = Location(self.path, 1, 1)
        else:
            loc = (node if isinstance(node, Span) else self.span(node)).location(self.path)
        self.problems.append(Diagnostic(severity, message, code, Stage.PARSE, loc))

    # -- document --------------------------------------------------------------------------
    def build(self, reference: str | None, require_candidate: bool) -> Document:
        top = {n.name: n for n in self.tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
        model = self.class_info(top.get("Model"))
        model_new = self.class_info(top.get("ModelNew"))
        get_inputs = self.function_info(top.get("get_inputs"))
        get_init_inputs = self.function_info(top.get("get_init_inputs"))
        calls = tuple(self.load_inline(c) for c in ast.walk(self.tree)
                      if isinstance(c, ast.Call) and callee_name(c.func) == "load_inline")

        if reference is not None:
            ref = ReferenceSpec("argument", reference)
        elif model is not None and get_inputs is not None:
            ref = ReferenceSpec("same_file", self.path)
        else:
            ref = _reference_from_comment(self.source, self.index)

        if require_candidate and model_new is None:
            what = "a reference file (it has `Model`)" if model is not None else "not a KernelBench candidate"
            self.problem(f"No `class ModelNew` at module level: this file is {what}. A candidate defines "
                         "`class ModelNew(nn.Module)` with the same constructor and forward as `Model`.",
                         "parse.no_model_new", None)
        if require_candidate and ref.origin == "none":
            self.problem("No reference found: add `Model` and `get_inputs()` to this file, a first-line comment "
                         "`# cudice: reference=path/to/problem.py`, or pass `--reference PATH`.",
                         "parse.no_reference", None)
        if model_new is not None and model_new.forward is None:
            self.problem("`ModelNew` has no `forward` method.", "parse.no_forward", model_new.span)
        if model is not None and get_inputs is None:
            self.problem("`Model` is defined but `get_inputs()` is missing: a reference needs `get_inputs()` "
                         "returning the forward inputs.", "parse.no_get_inputs", model.span,
                         Severity.ERROR if not require_candidate else Severity.WARNING)
        for call in calls:
            self.check_call(call)
        return Document(self.path, self.source, "python", self.index, model, model_new, get_inputs,
                        get_init_inputs, calls, (), ref, tuple(self.problems), self.tree)

    def class_info(self, node: ast.stmt | None) -> ClassInfo | None:
        if not isinstance(node, ast.ClassDef):
            return None
        methods = {n.name: n for n in node.body if isinstance(n, ast.FunctionDef)}
        forward, init = methods.get("forward"), methods.get("__init__")
        return ClassInfo(node.name, self.span(node), tuple(ast.unparse(b) for b in node.bases), forward,
                         _param_names(init), _param_names(forward))

    def function_info(self, node: ast.stmt | None) -> FunctionInfo | None:
        return FunctionInfo(node.name, self.span(node)) if isinstance(node, ast.FunctionDef) else None

    # -- load_inline -----------------------------------------------------------------------
    def load_inline(self, call: ast.Call) -> LoadInlineCall:
        args: dict[str, ast.expr] = dict(zip(LOAD_INLINE_PARAMS, call.args, strict=False))
        args.update({k.arg: k.value for k in call.keywords if k.arg})
        name = _const_str(args.get("name"))
        functions = _const_str_list(args.get("functions"))
        reasons: list[str] = []
        cpp = self.sources("cpp", args.get("cpp_sources"), reasons)
        cuda = self.sources("cuda", args.get("cuda_sources"), reasons)
        return LoadInlineCall(self.span(call), name, functions, cpp, cuda, "; ".join(reasons))

    def check_call(self, call: LoadInlineCall) -> None:
        if call.name is None:
            self.problem("`load_inline(name=...)` is not a string literal: cudice needs the module name to build it.",
                         "parse.dynamic_name", call.span, Severity.WARNING)
        for src in call.sources:
            if not src.mappable:
                self.problem(f"The {src.kind} source passed to `load_inline` is built at run time ({src.reason}); "
                             "compiler messages for it will point at this call.", "parse.unmappable_source",
                             src.expr, Severity.INFORMATION)
        if call.unmappable_reason:
            self.problem(f"`load_inline` sources are built at run time ({call.unmappable_reason}); compiler "
                         "messages will point at this call.", "parse.unmappable_source", call.span,
                         Severity.INFORMATION)

    def sources(self, kind: str, expr: ast.expr | None, reasons: list[str]) -> tuple[CudaSource, ...]:
        if expr is None or (isinstance(expr, ast.Constant) and expr.value is None):
            return ()
        variable = None
        if isinstance(expr, ast.Name):
            variable = expr.id
            value = self.module_assignment(expr.id, expr.lineno)
            if value is None:
                reasons.append(f"`{expr.id}` is not a single module-level assignment")
                return ()
            expr = value
        if isinstance(expr, (ast.List, ast.Tuple)):
            return tuple(self.one_source(kind, i, e, variable) for i, e in enumerate(expr.elts))
        return (self.one_source(kind, 0, expr, variable),)

    def module_assignment(self, name: str, before_line: int) -> ast.expr | None:
        found: list[ast.expr] = []
        for stmt in self.tree.body:
            if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets):
                found.append(stmt.value)
            elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == name:
                if stmt.value is not None:
                    found.append(stmt.value)
            elif isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == name:
                return None
        return found[0] if len(found) == 1 else None

    def one_source(self, kind: str, i: int, expr: ast.expr, variable: str | None, depth: int = 0) -> CudaSource:
        where = self.span(expr)
        if isinstance(expr, ast.Name) and depth < 4:
            value = self.module_assignment(expr.id, expr.lineno)
            if value is not None:
                return self.one_source(kind, i, value, expr.id, depth + 1)
        try:
            span = self.literal_span(expr)
        except LiteralScanError as exc:
            return CudaSource(kind, i, where, variable, None, str(exc))
        if span is None:
            return CudaSource(kind, i, where, variable, None, _dynamic_reason(expr))
        start = span.offsets[0] if span.text else span.offsets[-1]
        return CudaSource(kind, i, where, variable, span, "", start, span.offsets[-1])

    def literal_span(self, expr: ast.expr, depth: int = 0) -> SourceSpan | None:
        """The mapped value of a literal expression, or None when it is computed."""
        if isinstance(expr, ast.Name) and depth < 4:
            value = self.module_assignment(expr.id, expr.lineno)
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
        span = scan_literal(self.source, sp.start_offset, sp.end_offset, self.index)
        expected = expr.value if isinstance(expr, ast.Constant) else "".join(
            str(v.value) for v in expr.values if isinstance(v, ast.Constant))
        if span.text != expected:  # internal invariant; fall back to "unmappable" rather than mislead
            raise LiteralScanError("the literal's text could not be mapped character by character")
        return span


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


def _const_str(expr: ast.expr | None) -> str | None:
    return expr.value if isinstance(expr, ast.Constant) and isinstance(expr.value, str) else None


def _const_str_list(expr: ast.expr | None) -> tuple[str, ...] | None:
    if expr is None:
        return None
    if (s := _const_str(expr)) is not None:
        return (s,)
    if isinstance(expr, (ast.List, ast.Tuple)):
        items = [_const_str(e) for e in expr.elts]
        if all(i is not None for i in items):
            return tuple(i for i in items if i is not None)
    if isinstance(expr, ast.Dict):
        keys = [_const_str(k) for k in expr.keys]
        if all(k is not None for k in keys):
            return tuple(k for k in keys if k is not None)
    return None


def _param_names(fn: ast.FunctionDef | None) -> tuple[str, ...]:
    if fn is None:
        return ()
    return tuple(a.arg for a in fn.args.args[1:])


def read_document(path: str | Path, *, reference: str | None = None, require_candidate: bool = True) -> Document:
    """Read and parse a file; an unreadable file becomes a document with one located problem."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        diag = Diagnostic(Severity.ERROR, f"Cannot read {p}: {exc}. Check the path and that the file is UTF-8 text.",
                          "parse.unreadable", Stage.PARSE, Location(str(p), 1, 1))
        return Document(str(p), "", "python", LineIndex.of(""), problems=(diag,))
    return parse_document(text, str(p), reference=reference, require_candidate=require_candidate)
