"""Reading C++/CUDA source text without a compiler: comments and strings blanked with every
offset kept, namespace-scope function definitions and other brace blocks, `__global__` kernels,
and diagnostics located back in the user's file through each source's locator.

Used by the static C++ rules (`static/cpp_rules.py`), the launch check (`static/cuda.py`) and the
dynamic profiler check (`defined_kernel_names`). The rules read each source as the compiler's
first phases do (`Unit.of`, `static/cpp_preprocess.py`): lines joined at backslash-newline,
comments and strings blanked, digraphs spelled as their tokens, its own and the command line's
macros expanded, and each other reading of a macro defined in several `#if` branches
(`Unit.variants`). Function headers may start with template
parameter lists (`template <typename T, int N = 4>`, `template <>`: `strip_template_prefix`), and
braces on preprocessor lines (`#define CHECK(x) do { x; } while (0)`) open no block. Member
functions defined in a `struct`/`class`/`union` body (nested classes included) are listed too, with
the class they belong to (`CppFunction.cls`; `operator()` is named `operator()`), host or device by
their own qualifiers; the class body itself is still one of `blocks`. A template instantiation or
an overload is not resolved; a constructor whose initialiser list uses braces (`: a_{x} {`), a
member of a local class (inside a function body) and a member of an anonymous class are not listed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from cudice.verifier.source.positions import LineIndex
from cudice.verifier.source.result import Diagnostic, Location, Severity, Stage
from cudice.verifier.static.cpp_preprocess import (
    Expanded,
    expand_macros,
    join_scopes,
    macro_choices,
    replace_digraphs,
    splice_lines,
)

# (1-based line, 1-based column) in the C++ text → a location in the user's file, or None.
Locator = Callable[[int, int], "Location | None"]


@dataclass(frozen=True, slots=True)
class CppSource:
    """One C++ or CUDA source string of a `load_inline` call, with a way back to the .py file."""

    text: str
    locate: Locator
    is_cuda: bool = True
    # macros the compiler command line defines (`-D NAME=VALUE`, `-DF(x)=...`): `("NAME", "VALUE")`,
    # `("F(x)", "...")`, read as `#define`s before the text's first line
    defines: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class CppFunction:
    name: str
    header: str
    body_start: int  # offset of the opening brace in the stripped text
    body_end: int  # offset just past the closing brace
    is_device: bool  # __global__ or __device__ without __host__
    cls: str = ""  # the class a member function is defined in (`struct C { void m() {...} };`)

    @property
    def qualname(self) -> str:
        """`C::m` for a member function defined in its class body, else the name."""
        return f"{self.cls}::{self.name}" if self.cls else self.name


@dataclass(slots=True)
class Unit:
    """One source: comments/strings blanked, then its own macros expanded (`code`, the text every
    rule reads; `expanded` maps it back to `raw`, the blanked source), and its functions."""

    src: CppSource
    code: str
    functions: list[CppFunction] = field(default_factory=list)
    blocks: list[tuple[int, int]] = field(default_factory=list)  # struct/class/initialiser bodies
    raw: str = ""  # the blanked source before expansion ("" when `code` is it)
    expanded: Expanded | None = None
    prepared: str = ""  # the blanked text after splicing and digraphs, before macro expansion

    @classmethod
    def of(cls, src: CppSource, choice: dict[str, int] | None = None) -> Unit:
        """`src` read as the compiler's first phases read it: lines joined at `\\`-newline, comments
        and strings blanked, digraphs spelled as their tokens, then macros expanded (`choice`: which
        definition of a name with several in effect, `cpp_preprocess.macro_choices`)."""
        spliced, back = splice_lines(src.text)
        prepared = replace_digraphs(blank_comments_and_strings(spliced))
        ex = join_scopes(expand_macros(prepared, src.defines, choice)).through(back)
        return cls(src, ex.text, raw=blank_comments_and_strings(src.text), expanded=ex, prepared=prepared)

    def variants(self) -> list[Unit]:
        """The other readings of this source where a macro has several definitions in effect at once
        (both branches of an `#if`): every rule must hold for each (functions and blocks unscanned)."""
        return [Unit.of(self.src, c) for c in macro_choices(self.prepared, self.src.defines)]

    def from_macro(self, offset: int) -> bool:
        """Whether the character at `offset` of `code` comes from expanding a macro."""
        return self.expanded is not None and self.expanded.is_expanded(offset)


# Comments, raw strings (`R"x( ... )x"`, whose `"` inside do not end them), strings, and character
# literals — not a digit separator (`1'000'000`, `0xFF'FF`: a `'` after a letter or digit that is
# not a literal's prefix `u8`, `u`, `U`, `L`).
# A pp-number first (`1'000'000`, `0x1p-3`): its `'` are digit separators, and only there; any other
# `'` opens a character literal, also right after a keyword (`return'"'` is `return '"'`).
_COMMENT_OR_STRING = re.compile(
    r"(?P<num>(?<![\w.])\.?\d(?:[eEpP][+-]|[\w.'])*)|"
    r"//[^\n]*|/\*.*?\*/|(?<![\w])(?:u8|[uUL])?R\"(?P<delim>[^()\\\s\"]{0,16})\(.*?\)(?P=delim)\"|"
    r"\"(?:\\.|[^\"\\\n])*\"|(?:(?<![\w])(?:u8|[uUL]))?'(?:\\.|[^'\\\n])*'",
    re.DOTALL,
)


def blank_comments_and_strings(text: str) -> str:
    """Replace comments and string/char literals by spaces, keeping every offset and newline."""

    def blank(m: re.Match[str]) -> str:
        s = m.group(0)
        if m.group("num") is not None:  # a number stays as it is
            return s
        if m.group("delim") is not None:  # a raw string: blank, lines kept
            return re.sub(r"[^\n]", " ", s)
        if s.startswith('"'):  # keep the quotes so `m.def("name", ...)` stays parseable below
            return '"' + re.sub(r"[^\n]", " ", s[1:-1]) + '"'
        return re.sub(r"[^\n]", " ", s)

    return _COMMENT_OR_STRING.sub(blank, text)


_PREPROCESSOR_LINE = re.compile(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*$", re.MULTILINE)
_HEADER_FN = re.compile(r"\)\s*(?:const|noexcept|override|mutable|->\s*[\w:<>,\s*&]+|\s)*$")
_NS_OR_EXTERN = re.compile(r"(?:namespace\s*[\w:]*|extern\s*\"[^\"]*\")\s*$")


def blank_directives(code: str) -> str:
    """`code` with every preprocessor line (continuations included) turned into spaces, newlines and
    offsets kept: what is left is the code the compiler proper reads, at the same places."""
    return _PREPROCESSOR_LINE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), code)


def find_functions(code: str) -> list[CppFunction]:
    """Function definitions at namespace scope (bodies of namespaces/`extern "C"` are scanned)."""
    return scan_blocks(code)[0]


def scan_blocks(code: str) -> tuple[list[CppFunction], list[tuple[int, int]]]:
    """Function definitions (at namespace scope, and members defined in class bodies), and the spans
    of the other top-level brace blocks (struct/class/enum bodies, initialisers): what is declared
    inside those is not a namespace-scope variable."""
    # preprocessor lines blanked (offsets kept): `#define CHECK(x) do { x; } while (0)` opens no block
    code = blank_directives(code)
    out: list[CppFunction] = []
    others: list[tuple[int, int]] = []
    # ('ns', ''), ('class', name), ('fn', ''), ('other', ''), ('inner', '') with each block's start
    stack: list[tuple[str, str, int]] = []
    start_of_decl = 0
    fn_header = ""
    for i, ch in enumerate(code):
        if ch == "{":
            if any(k in ("fn", "other", "inner") for k, _, _ in stack):
                stack.append(("inner", "", i))
                continue
            header = _ACCESS.sub("", code[start_of_decl:i])
            cls = _class_name(header)
            if _NS_OR_EXTERN.search(header) and not _has_class(stack):
                stack.append(("ns", "", i))
                start_of_decl = i + 1
            elif cls is not None:
                stack.append(("class", cls, i))
                start_of_decl = i + 1
            elif _is_function_header(header):
                stack.append(("fn", "", i))
                fn_header = header.strip()
            else:
                stack.append(("other", "", i))
        elif ch == "}":
            kind, _, start = stack.pop() if stack else ("ns", "", 0)
            if kind == "fn":
                name = _function_name(fn_header)
                if name:
                    dev = (
                        "__global__" in fn_header or "__device__" in fn_header
                    ) and "__host__" not in fn_header
                    owner = next((n for k, n, _ in reversed(stack) if k == "class"), "")
                    out.append(CppFunction(name, fn_header, start, i + 1, dev, owner))
            elif kind == "other" or (kind == "class" and not _has_class(stack)):
                others.append((start, i + 1))
            if not stack or stack[-1][0] in ("ns", "class"):
                start_of_decl = i + 1
        elif ch == ";" and (not stack or stack[-1][0] in ("ns", "class")):
            start_of_decl = i + 1
    return out, others


def _has_class(stack: list[tuple[str, str, int]]) -> bool:
    """Whether a class body is open on `stack` (a `scan_blocks` block stack)."""
    return any(k == "class" for k, _, _ in stack)


# `public:` before a member (after the previous member's `;` or `}`)
_ACCESS = re.compile(r"^\s*(?:(?:public|private|protected)\s*:(?!:)\s*)+")
# `struct C`, `class alignas(16) C final : public B<T>`, `template <class T> struct C` — not
# `struct C* f()` (a function returning a pointer) nor `enum class E`
_CLASS_HEAD = re.compile(
    r"^(?:typedef\s+)?(?:struct|class|union)\s+(?:(?:alignas\s*\([^)]*\)|__align__\s*\([^)]*\)|"
    r"__attribute__\s*\(\([^)]*\)\)|\[\[[^\]]*\]\]|[A-Z_]+_API)\s*)*([A-Za-z_]\w*)\s*(?:<[^{}]*>\s*)?"
    r"(?:final\s*)?(?::[^{};()]*(?:\([^{};]*\)[^{};()]*)*)?$"
)


def _class_name(header: str) -> str | None:
    """The name of the class whose body the `{` after `header` opens, or None."""
    m = _CLASS_HEAD.match(strip_template_prefix(header).strip())
    return m.group(1) if m else None


def strip_template_prefix(header: str) -> str:
    """`header` without its leading `template <...>` parameter lists (nested brackets, default
    arguments, `template <>` specialisations): `template <typename T, int N = 4> void f(T* x)` is
    `void f(T* x)`. Unbalanced brackets leave the header as it is."""
    rest = header.lstrip()
    while (m := re.match(r"template\s*<", rest)) is not None:
        depth, i = 1, m.end()
        while i < len(rest) and depth:
            depth += {"<": 1, ">": -1, "(": 0, ")": 0}.get(rest[i], 0)
            if rest[i] == "(":  # `(sizeof(T) > 2)`: a comparison inside parentheses closes nothing
                close = _matching_paren(rest, i)
                if close < 0:
                    return header
                i = close
            i += 1
        if depth:
            return header
        rest = rest[i:].lstrip()
    return rest


def _matching_paren(text: str, open_paren: int) -> int:
    depth = 0
    for i in range(open_paren, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return i
    return -1


def _is_function_header(header: str) -> bool:
    """Whether the text before a `{` declares a function (not an initialiser `int a[] = {...}`, a
    struct or a lambda assigned to a variable); template parameter lists and their default
    arguments (`template <int N = 4>`) do not count as an initialiser's `=`."""
    head = strip_template_prefix(header)
    return bool(_HEADER_FN.search(head)) and "(" in head and "=" not in head.split("(")[0]


def _function_name(header: str) -> str | None:
    head = re.sub(r"__launch_bounds__\s*\([^)]*\)", " ", strip_template_prefix(header))
    if re.search(r"\boperator\s*\(\s*\)\s*\(", head):
        return "operator()"
    m = re.search(r"([A-Za-z_]\w*)\s*(?:<[^()]*>)?\s*\(", head)
    return m.group(1) if m else None


_GLOBAL_KERNEL = re.compile(r"__global__")


def find_kernels(code: str) -> list[tuple[str, int]]:
    """`(name, offset)` of every `__global__` function (declarations and definitions)."""
    out: list[tuple[str, int]] = []
    for m in _GLOBAL_KERNEL.finditer(code):
        head = code[m.end() : m.end() + 400]
        head = re.sub(r"__launch_bounds__\s*\([^)]*\)", lambda x: " " * len(x.group(0)), head)
        nm = re.search(r"([A-Za-z_]\w*)\s*\(", head)
        if nm and nm.group(1) not in {name for name, _ in out}:
            out.append((nm.group(1), m.start()))
    return out


def defined_kernel_names(cuda_texts: Iterable[str]) -> list[str]:
    """Names of the `__global__` kernels in CUDA source texts, first occurrence order, comments ignored
    (the dynamic profiler check compares them with the kernels that actually ran)."""
    names: list[str] = []
    for text in cuda_texts:
        names += [n for n, _ in find_kernels(blank_comments_and_strings(text)) if n not in names]
    return names


def locate(unit: Unit, offset: int, *, in_source: bool = False) -> Location | None:
    """The user-file location of `offset` in `unit.code` (or, `in_source`, in the source text itself)."""
    if unit.expanded is None or not unit.raw:
        return unit.src.locate(*LineIndex.of(unit.code).line_column(offset))
    source_offset = offset if in_source else unit.expanded.source_offset(offset)
    return unit.src.locate(*LineIndex.of(unit.raw).line_column(source_offset))


def diag(
    unit: Unit,
    offset: int,
    code: str,
    message: str,
    severity: Severity = Severity.ERROR,
    *,
    in_source: bool = False,
) -> Diagnostic:
    return Diagnostic(severity, message, code, Stage.STATIC, locate(unit, offset, in_source=in_source))
