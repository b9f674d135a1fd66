"""What the server needs to know about a KernelBench document, found with Python's `ast`.

`outline(source)` returns the `nn.Module` classes, `class ModelNew`, the `load_inline(...)`
calls, the CUDA source strings (with the offsets of the string *contents* in the file, the
infill "middle"), the `__global__` kernel names and the reference named by a
`# cudice: reference=path.py` comment. It is cheap (one `ast.parse`) and never raises: a file
that does not parse gives an outline with `syntax_error` set and nothing else.

Not covered: CUDA sources built at run time (f-strings, `+`, `.format`, implicit
concatenation) are listed with `is_literal=False` and no infill range; the verifier maps
compiler lines for those (or says it cannot).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from dataclasses import dataclass

from cudice.server.features.positions import LineIndex

REFERENCE_RE = re.compile(r"^#\s*cudice:\s*reference\s*=\s*(\S+)\s*$", re.MULTILINE)
KERNEL_RE = re.compile(r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?[\w:<>\s\*]*?\b(\w+)\s*\(")
MODULE_BASES = ("nn.Module", "Module", "torch.nn.Module")


@dataclass(frozen=True, slots=True)
class Span:
    """Half-open code-point offsets into the document."""

    start: int
    end: int

    def contains(self, offset: int) -> bool:
        return self.start <= offset <= self.end


@dataclass(frozen=True, slots=True)
class ClassInfo:
    name: str
    span: Span  # the whole class statement
    name_span: Span  # the class name after `class`
    is_module: bool  # derives from nn.Module


@dataclass(frozen=True, slots=True)
class CudaString:
    """A string literal holding CUDA source. `content` excludes prefix and quotes."""

    variable: str | None  # the name it is assigned to, if any
    literal: Span  # the whole literal, quotes included
    content: Span
    is_literal: bool  # one plain (non-f, non-concatenated) literal: its contents can be replaced


@dataclass(frozen=True, slots=True)
class Kernel:
    name: str
    span: Span  # the name inside the CUDA string


@dataclass(frozen=True, slots=True)
class LoadInlineCall:
    span: Span
    functions: tuple[str, ...]  # the `functions=[...]` names, when literal


@dataclass(frozen=True, slots=True)
class Outline:
    classes: tuple[ClassInfo, ...] = ()
    cuda_strings: tuple[CudaString, ...] = ()
    kernels: tuple[Kernel, ...] = ()
    load_inline_calls: tuple[LoadInlineCall, ...] = ()
    reference: str | None = None
    syntax_error: str | None = None

    @property
    def model_new(self) -> ClassInfo | None:
        return next((c for c in self.classes if c.name == "ModelNew"), None)

    def module_class_at(self, offset: int) -> ClassInfo | None:
        """The innermost nn.Module class containing `offset`."""
        hits = [c for c in self.classes if c.is_module and c.span.contains(offset)]
        return min(hits, key=lambda c: c.span.end - c.span.start) if hits else None

    def cuda_string_at(self, offset: int) -> CudaString | None:
        return next((s for s in self.cuda_strings if s.literal.contains(offset)), None)


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _span(index: LineIndex, node: ast.AST) -> Span:
    start = index.byte_col_to_offset(node.lineno, node.col_offset)  # type: ignore[attr-defined]
    end_line = getattr(node, "end_lineno", None) or node.lineno  # type: ignore[attr-defined]
    end_col = getattr(node, "end_col_offset", None)
    end = index.byte_col_to_offset(end_line, end_col if end_col is not None else 0)
    return Span(start, end)


def _literal_parts(text: str) -> list[str]:
    """The STRING tokens of a literal expression's text (more than one = implicit concatenation)."""
    try:
        toks = tokenize.generate_tokens(io.StringIO(text).readline)
        return [t.string for t in toks if t.type == tokenize.STRING]
    except (tokenize.TokenError, SyntaxError):
        return []


def _cuda_string(index: LineIndex, node: ast.expr, variable: str | None) -> CudaString:
    literal = _span(index, node)
    text = index.text[literal.start:literal.end]
    parts = _literal_parts(text) if isinstance(node, ast.Constant) else []
    if len(parts) == 1 and parts[0] == text:
        prefix_len = len(text) - len(text.lstrip("rRbBuU"))
        quote = text[prefix_len:prefix_len + 3]
        quote = quote if quote in ('"""', "'''") else text[prefix_len]
        content = Span(literal.start + prefix_len + len(quote), literal.end - len(quote))
        return CudaString(variable, literal, content, True)
    return CudaString(variable, literal, literal, False)


def _is_cuda_text(value: str) -> bool:
    return "__global__" in value or "#include <cuda" in value or "<<<" in value


class _Visitor(ast.NodeVisitor):
    def __init__(self, index: LineIndex) -> None:
        self.index = index
        self.classes: list[ClassInfo] = []
        self.assigned: dict[str, ast.expr] = {}
        self.calls: list[tuple[ast.Call, LoadInlineCall]] = []

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        span = _span(self.index, node)
        line_start = self.index.byte_col_to_offset(node.lineno, node.col_offset)
        header = self.index.text[line_start:span.end]
        m = re.search(r"class\s+(\w+)", header)
        name_start = line_start + (m.start(1) if m else 0)
        is_module = any(_dotted(b) in MODULE_BASES for b in node.bases)
        self.classes.append(ClassInfo(node.name, span, Span(name_start, name_start + len(node.name)), is_module))
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            if isinstance(target, ast.Name):
                self.assigned[target.id] = node.value
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        if _dotted(node.func).split(".")[-1] == "load_inline":
            functions: tuple[str, ...] = ()
            for kw in node.keywords:
                if kw.arg == "functions" and isinstance(kw.value, (ast.List, ast.Tuple)):
                    functions = tuple(
                        e.value for e in kw.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)
                    )
            self.calls.append((node, LoadInlineCall(_span(self.index, node), functions)))
        self.generic_visit(node)


def _cuda_args(call: ast.Call) -> list[ast.expr]:
    out: list[ast.expr] = []
    for kw in call.keywords:
        if kw.arg == "cuda_sources":
            out.extend(kw.value.elts if isinstance(kw.value, (ast.List, ast.Tuple)) else [kw.value])
    if len(call.args) >= 3:  # load_inline(name, cpp_sources, cuda_sources, ...)
        out.append(call.args[2])
    return out


def outline(source: str) -> Outline:
    """Outline a Python document; never raises."""
    ref = REFERENCE_RE.search(source)
    reference = ref.group(1) if ref else None
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError) as exc:
        return Outline(reference=reference, syntax_error=str(exc))
    index = LineIndex.of(source)
    visitor = _Visitor(index)
    visitor.visit(tree)

    found: dict[int, CudaString] = {}
    for call, _ in visitor.calls:
        for arg in _cuda_args(call):
            var = arg.id if isinstance(arg, ast.Name) else None
            value = visitor.assigned.get(var) if var else arg
            if value is not None:
                s = _cuda_string(index, value, var)
                found[s.literal.start] = s
    for var, value in visitor.assigned.items():  # CUDA text not (yet) wired to load_inline
        if isinstance(value, ast.Constant) and isinstance(value.value, str) and _is_cuda_text(value.value):
            s = _cuda_string(index, value, var)
            found.setdefault(s.literal.start, s)
    strings = tuple(found[k] for k in sorted(found))

    kernels: list[Kernel] = []
    for s in strings:
        body = source[s.content.start:s.content.end]
        for m in KERNEL_RE.finditer(body):
            kernels.append(Kernel(m.group(1), Span(s.content.start + m.start(1), s.content.start + m.end(1))))
    return Outline(
        classes=tuple(visitor.classes),
        cuda_strings=strings,
        kernels=tuple(kernels),
        load_inline_calls=tuple(c for _, c in visitor.calls),
        reference=reference,
    )
