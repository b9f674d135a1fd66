"""The document model: what a KernelBench-format file contains, found without executing it.

`parse_document(source, path)` reads a candidate or reference `.py` file with `ast` and finds
`Model` / `ModelNew`, `get_inputs` / `get_init_inputs`, every class (nested ones too, with its
name and header), every `load_inline(...)` call and, for its `cpp_sources` / `cuda_sources`,
the string literals (directly, or through module-level variables, lists of strings, implicit
concatenation or `+` of literals) with a `SourceSpan` mapping every generated character back to
the file (`source/strings.py`); the CUDA strings no call receives yet; and the `__global__`
kernels in the CUDA strings with their bodies. A `.cu` file is a raw-kernel document
(`extern "C" __global__` kernels). Places are `positions.Span`s (code-point offsets); the
document's `LineIndex` turns them into `Location`s.

This is the one parser of KernelBench files: the verifier's stages, the model's infill scaffold
and the language server's hover, lens, code actions, reference watch and cache key all read it.

Reference convention (README): an explicit `--reference PATH`; else `Model` + `get_inputs` in
the candidate itself; else the first `# cudice: reference=PATH` comment (PATH relative to the
file), on its own line, indented or after code; only real comments count.

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
import io
import re
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

from cudice.verifier.source import pyparse
from cudice.verifier.source.positions import LineIndex, Span
from cudice.verifier.source.result import Diagnostic, Location, Severity, Stage, Verdict, VerifyResult
from cudice.verifier.source.strings import CudaSource as CudaSource
from cudice.verifier.source.strings import Kernel as Kernel
from cudice.verifier.source.strings import SourceStrings, kernels
from cudice.verifier.source.strings import callee_name as callee_name

REFERENCE_COMMENT = re.compile(r"(?:#|//)\s*cudice:\s*reference\s*=\s*(?P<path>\S+)")
RAW_KERNEL = re.compile(
    r'extern\s+"C"\s+__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+(?P<name>\w+)'
)
LOAD_INLINE_PARAMS = ("name", "cpp_sources", "cuda_sources", "functions")
MODULE_BASES = ("nn.Module", "Module", "torch.nn.Module")


@dataclass(frozen=True, slots=True)
class ClassInfo:
    name: str
    span: Span  # the whole class statement, decorators excluded
    name_span: Span  # the name after `class`
    header: Span  # `class Name(bases):`, up to its colon
    bases: tuple[str, ...]  # unparsed base expressions, e.g. ("nn.Module",)
    forward: ast.FunctionDef | None = field(compare=False, repr=False)
    init_params: tuple[str, ...] = ()
    forward_params: tuple[str, ...] = ()

    @property
    def is_module(self) -> bool:
        """Derives from `nn.Module` (written as `nn.Module`, `Module` or `torch.nn.Module`)."""
        return any(b in MODULE_BASES for b in self.bases)


@dataclass(frozen=True, slots=True)
class FunctionInfo:
    name: str
    span: Span


@dataclass(frozen=True, slots=True)
class LoadInlineCall:
    span: Span
    name: str | None
    functions: tuple[str, ...] | None
    cpp_sources: tuple[CudaSource, ...]
    cuda_sources: tuple[CudaSource, ...]
    unmappable_reasons: tuple[str, ...] = ()  # why the sources list itself is dynamic, if it is
    undefined_names: tuple[str, ...] = ()  # names passed as sources that this file never binds

    @property
    def unmappable_reason(self) -> str:
        return "; ".join(self.unmappable_reasons)

    @property
    def built_at_run_time(self) -> bool:
        """The sources list is dynamic for a reason other than an undefined name (which is the
        static checks' error, `static.dynamic_source`, not a note that the build happens later)."""
        return len(self.unmappable_reasons) > len(self.undefined_names)

    @property
    def sources(self) -> tuple[CudaSource, ...]:
        return self.cpp_sources + self.cuda_sources

    @property
    def is_mappable(self) -> bool:
        return not self.unmappable_reason and all(s.mappable for s in self.sources)


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
    model: ClassInfo | None = None  # module-level `class Model`
    model_new: ClassInfo | None = None  # module-level `class ModelNew`
    get_inputs: FunctionInfo | None = None
    get_init_inputs: FunctionInfo | None = None
    load_inline_calls: tuple[LoadInlineCall, ...] = ()
    raw_kernels: tuple[Kernel, ...] = ()  # `extern "C" __global__` kernels of a .cu file
    reference: ReferenceSpec = ReferenceSpec("none", None)
    problems: tuple[Diagnostic, ...] = ()
    tree: ast.Module | None = field(default=None, compare=False, repr=False)
    classes: tuple[ClassInfo, ...] = ()  # every class statement, nested ones too, in file order
    cuda_strings: tuple[CudaSource, ...] = ()  # the `cuda_sources` strings, then unpassed CUDA text
    kernels: tuple[Kernel, ...] = ()  # `__global__` definitions in the mappable CUDA strings

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()

    @property
    def is_reference(self) -> bool:
        return self.model is not None and self.get_inputs is not None

    @property
    def is_candidate(self) -> bool:
        """Whether there is something to verify: a `ModelNew` or a `load_inline` call."""
        return self.model_new is not None or bool(self.load_inline_calls)

    @property
    def has_errors(self) -> bool:
        return any(d.severity is Severity.ERROR for d in self.problems)

    def location(self, span: Span) -> Location:
        return self.index.location(span, self.path)

    def invalid_result(self) -> VerifyResult | None:
        """The `invalid_input` verdict when the document cannot be verified, else None."""
        if not self.has_errors:
            return None
        return VerifyResult(
            Verdict.INVALID_INPUT, Stage.PARSE, self.path, self.problems, source_sha256=self.sha256
        )

    def cuda_string_at(self, offset: int) -> CudaSource | None:
        """The CUDA string whose literal (quotes included) contains file offset `offset`."""
        return next((s for s in self.cuda_strings if s.expr.contains(offset)), None)

    def module_class_at(self, offset: int) -> ClassInfo | None:
        """The innermost `nn.Module` class whose statement contains `offset`."""
        hits = [c for c in self.classes if c.is_module and c.span.contains(offset)]
        return min(hits, key=lambda c: c.span.end - c.span.start) if hits else None


def parse_document(
    source: str, path: str, *, reference: str | None = None, require_candidate: bool = True
) -> Document:
    """Parse `source` (the text of the file at `path`) into a `Document`, without executing it.

    `reference` is an explicit reference path (the CLI's `--reference`), which wins over the
    file's own `Model` and over a `# cudice: reference=` comment. With `require_candidate`
    (the default) a Python file without `ModelNew` is a problem; pass False to parse a reference
    or to outline a file for the editor. Never raises on bad input: problems are in
    `Document.problems`.
    """
    index = LineIndex.of(source)
    if path.endswith((".cu", ".cuh")):
        return _parse_cu(source, path, index, reference)
    try:
        tree = pyparse.parse(source, filename=path)
    except (SyntaxError, ValueError) as exc:  # ValueError: a NUL byte in the text
        line, col = getattr(exc, "lineno", None) or 1, getattr(exc, "offset", None) or 1
        end_line, end_col = (
            getattr(exc, "end_lineno", None) or line,
            getattr(exc, "end_offset", None) or col + 1,
        )
        msg = exc.msg if isinstance(exc, SyntaxError) else str(exc)
        diag = Diagnostic(
            Severity.ERROR,
            f"Python syntax error: {msg}. Fix the syntax so the file can be read.",
            "parse.syntax_error",
            Stage.PARSE,
            Location(path, line, col, end_line, end_col),
        )
        ref = ReferenceSpec("argument", reference) if reference is not None else _reference_comment(index)
        return Document(path, source, "python", index, reference=ref, problems=(diag,))
    return _Parser(source, path, index, tree).build(reference, require_candidate)


def _parse_cu(source: str, path: str, index: LineIndex, reference: str | None) -> Document:
    kernels = tuple(
        Kernel(m.group("name"), Span(m.start("name"), m.end("name"))) for m in RAW_KERNEL.finditer(source)
    )
    ref = (
        ReferenceSpec("argument", reference) if reference is not None else _reference_comment(index, cu=True)
    )
    problems: list[Diagnostic] = []
    if not kernels:
        problems.append(
            Diagnostic(
                Severity.ERROR,
                'No `extern "C" __global__ void name(...)` kernel found: a raw .cu file must '
                'declare its kernels extern "C" so they can be launched by name.',
                "parse.no_kernel",
                Stage.PARSE,
                Location(path, 1, 1),
            )
        )
    return Document(path, source, "cu", index, raw_kernels=kernels, reference=ref, problems=tuple(problems))


def _comments(index: LineIndex) -> list[tuple[int, str]]:
    """(offset, text) of every Python comment of `index.text`, in order; a file that stops
    tokenizing (an unclosed bracket or string) gives the comments before that point."""
    out: list[tuple[int, str]] = []
    try:  # newline=None: "\r" and "\r\n" end a line, as they do for `index` and for Python
        for tok in tokenize.generate_tokens(io.StringIO(index.text, newline=None).readline):
            if tok.type == tokenize.COMMENT:
                out.append((index.offset_at(tok.start[0], tok.start[1] + 1), tok.string))
    except (tokenize.TokenError, SyntaxError):
        pass
    return out


def _reference_comment(index: LineIndex, cu: bool = False) -> ReferenceSpec:
    """The first `# cudice: reference=PATH` comment, wherever it stands: on its own line,
    indented, or after code. Only real comments count (not the same text inside a string); in a
    `.cu` file `//` comments count too."""
    if cu:
        found = [(m.start(), m.group(0)) for m in REFERENCE_COMMENT.finditer(index.text)]
    else:
        found = [(at, text) for at, text in _comments(index) if REFERENCE_COMMENT.match(text)]
    if not found:
        return ReferenceSpec("none", None)
    at, text = found[0]
    m = REFERENCE_COMMENT.match(text)
    assert m is not None
    return ReferenceSpec("comment", m.group("path"), Span(at, at + m.end()))


class _Parser:
    def __init__(self, source: str, path: str, index: LineIndex, tree: ast.Module) -> None:
        self.source, self.path, self.index, self.tree = source, path, index, tree
        self.problems: list[Diagnostic] = []
        self.strings = SourceStrings(source, index, tree)

    def span(self, node: ast.expr | ast.stmt | ast.keyword) -> Span:
        return self.index.node_span(node)

    def problem(
        self,
        message: str,
        code: str,
        node: ast.expr | ast.stmt | Span | None,
        severity: Severity = Severity.ERROR,
    ) -> None:
        if node is None:
            loc = Location(self.path, 1, 1)
        else:
            loc = self.index.location(node if isinstance(node, Span) else self.span(node), self.path)
        self.problems.append(Diagnostic(severity, message, code, Stage.PARSE, loc))

    # -- document --------------------------------------------------------------------------
    def build(self, reference: str | None, require_candidate: bool) -> Document:
        top = {n.name: n for n in self.tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
        classes = tuple(
            sorted(
                (self.class_info(n) for n in ast.walk(self.tree) if isinstance(n, ast.ClassDef)),
                key=lambda c: c.span.start,
            )
        )
        model, model_new = (
            self.top_class(top.get("Model"), classes),
            self.top_class(top.get("ModelNew"), classes),
        )
        get_inputs = self.function_info(top.get("get_inputs"))
        get_init_inputs = self.function_info(top.get("get_init_inputs"))
        calls = tuple(
            self.load_inline(c)
            for c in ast.walk(self.tree)
            if isinstance(c, ast.Call) and callee_name(c.func) == "load_inline"
        )
        cuda_strings = self.cuda_strings(calls)

        comment = _reference_comment(self.index)
        if reference is not None:
            ref = ReferenceSpec("argument", reference)
        elif comment.origin != "none":
            # the comment names the reference on purpose: a `Model` of the file's own must not
            # replace it (a candidate would then be judged against a reference it wrote itself)
            ref = comment
            if model is not None and get_inputs is not None:
                self.problem(
                    f"This file defines its own `Model` and `get_inputs`, but its `# cudice: "
                    f"reference={comment.path}` comment names the reference: the comment's is used "
                    "and the file's own `Model` is ignored. Remove one of them to say which you mean.",
                    "parse.two_references",
                    comment.span,
                    Severity.WARNING,
                )
        elif model is not None and get_inputs is not None:
            ref = ReferenceSpec("same_file", self.path)
        else:
            ref = comment

        if require_candidate and model_new is None:
            what = "a reference file (it has `Model`)" if model is not None else "not a KernelBench candidate"
            self.problem(
                f"No `class ModelNew` at module level: this file is {what}. A candidate defines "
                "`class ModelNew(nn.Module)` with the same constructor and forward as `Model`.",
                "parse.no_model_new",
                None,
            )
        if require_candidate and ref.origin == "none":
            self.problem(
                "No reference found: add `Model` and `get_inputs()` to this file, a comment "
                "`# cudice: reference=path/to/problem.py`, or pass `--reference PATH`.",
                "parse.no_reference",
                None,
            )
        if model_new is not None and model_new.forward is None:
            self.problem("`ModelNew` has no `forward` method.", "parse.no_forward", model_new.span)
        if model is not None and get_inputs is None:
            self.problem(
                "`Model` is defined but `get_inputs()` is missing: a reference needs `get_inputs()` "
                "returning the forward inputs.",
                "parse.no_get_inputs",
                model.span,
                Severity.ERROR if not require_candidate else Severity.WARNING,
            )
        for call in calls:
            self.check_call(call)
        return Document(
            self.path,
            self.source,
            "python",
            self.index,
            model,
            model_new,
            get_inputs,
            get_init_inputs,
            calls,
            (),
            ref,
            tuple(self.problems),
            self.tree,
            classes,
            cuda_strings,
            tuple(k for s in cuda_strings for k in kernels(s)),
        )

    def class_info(self, node: ast.ClassDef) -> ClassInfo:
        methods = {n.name: n for n in node.body if isinstance(n, ast.FunctionDef)}
        forward, init = methods.get("forward"), methods.get("__init__")
        span = self.span(node)
        m = re.compile(r"class\s+(\w+)").match(self.source, span.start)
        name_at = m.start(1) if m else span.start
        parts: list[ast.expr | ast.keyword] = [*node.bases, *node.keywords]
        after = max([name_at + len(node.name), *(self.span(e).end for e in parts)])
        colon = self.source.find(":", after, span.end)
        return ClassInfo(
            node.name,
            span,
            Span(name_at, name_at + len(node.name)),
            Span(span.start, colon if colon >= 0 else after),
            tuple(ast.unparse(b) for b in node.bases),
            forward,
            _param_names(init),
            _param_names(forward),
        )

    def top_class(self, node: ast.stmt | None, classes: tuple[ClassInfo, ...]) -> ClassInfo | None:
        """The `ClassInfo` of a module-level statement when it is a class."""
        if not isinstance(node, ast.ClassDef):
            return None
        start = self.span(node).start
        return next(c for c in classes if c.span.start == start)

    def function_info(self, node: ast.stmt | None) -> FunctionInfo | None:
        return FunctionInfo(node.name, self.span(node)) if isinstance(node, ast.FunctionDef) else None

    # -- load_inline -----------------------------------------------------------------------
    def load_inline(self, call: ast.Call) -> LoadInlineCall:
        args: dict[str, ast.expr] = dict(zip(LOAD_INLINE_PARAMS, call.args, strict=False))
        args.update({k.arg: k.value for k in call.keywords if k.arg})
        name = _const_str(args.get("name"))
        functions = _const_str_list(args.get("functions"))
        reasons: list[str] = []
        undefined: list[str] = []
        cpp = self.strings.sources("cpp", args.get("cpp_sources"), reasons, undefined)
        cuda = self.strings.sources("cuda", args.get("cuda_sources"), reasons, undefined)
        return LoadInlineCall(self.span(call), name, functions, cpp, cuda, tuple(reasons), tuple(undefined))

    def cuda_strings(self, calls: tuple[LoadInlineCall, ...]) -> tuple[CudaSource, ...]:
        """The `cuda_sources` strings of every call, then the CUDA text no call receives yet."""
        passed = tuple(s for call in calls for s in call.cuda_sources)
        return passed + self.strings.loose_cuda({s.expr.start for call in calls for s in call.sources})

    def check_call(self, call: LoadInlineCall) -> None:
        if call.name is None:
            self.problem(
                "`load_inline(name=...)` is not a string literal: cudice needs the module name to build it.",
                "parse.dynamic_name",
                call.span,
                Severity.WARNING,
            )
        for src in call.sources:
            if not src.mappable:
                self.problem(
                    f"The {src.kind} source passed to `load_inline` is built at run time ({src.reason}); "
                    "compiler messages for it will point at this call.",
                    "parse.unmappable_source",
                    src.expr,
                    Severity.INFORMATION,
                )
        if call.built_at_run_time:
            self.problem(
                f"`load_inline` sources are built at run time ({call.unmappable_reason}); compiler "
                "messages will point at this call.",
                "parse.unmappable_source",
                call.span,
                Severity.INFORMATION,
            )


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


def read_document(
    path: str | Path, *, reference: str | None = None, require_candidate: bool = True
) -> Document:
    """Read and parse a file; an unreadable file becomes a document with one located problem."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        diag = Diagnostic(
            Severity.ERROR,
            f"Cannot read {p}: {exc}. Check the path and that the file is UTF-8 text.",
            "parse.unreadable",
            Stage.PARSE,
            Location(str(p), 1, 1),
        )
        return Document(str(p), "", "python", LineIndex.of(""), problems=(diag,))
    return parse_document(text, str(p), reference=reference, require_candidate=require_candidate)
