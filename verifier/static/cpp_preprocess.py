"""The preprocessed view of a candidate's C++/CUDA text, and the names it gives ATen's namespaces.

The C++ rules (`static/cpp_rules.py`) are regexes; a rule must see what the compiler sees, not
what the source spells. Two things stand between them:

- macros: `expand_macros()` expands the file's own object-like and function-like `#define`s —
  arguments, `#` (stringising, to a blank string) and `##` (token pasting) included, rescanned
  with the usual hide set — so `CAT(pthread_, create)` reads as `pthread_create` and `NS::relu`
  under `#define NS at` as `at::relu`. Each character of the result knows the offset it came
  from (a macro's text: the invocation's first character), so findings land on the line that
  invokes the macro; `is_expanded()` says whether a character came from a macro.
- spacing: `join_scopes()` removes space around `::` (`at :: relu` is `at::relu`);
- namespace names: `aten_namespaces()` is `torch`, `at`, `c10` plus every name the text makes
  an alias of one (`namespace x = at;`, `namespace x = at::native;`) and every namespace the
  text opens that pulls ATen names in (`namespace cuda { using namespace at; }`,
  `namespace y { using at::relu; }`), and — once `using namespace at;` (or `torch`, `c10`) is
  in effect — ATen's own sub-namespaces by their bare names (`cuda::blas::gemm` is
  `at::cuda::blas::gemm`).

Not covered: macros from headers (`TORCH_CHECK`, `AT_DISPATCH_*` stay as spelled), conditional
compilation (`#if 0` blocks are read like any other), `#include` of the candidate's own files
(there are none: `load_inline` sources are self-contained), macros redefined mid-file (the last
definition before a use applies), and expansion beyond 32 levels or 16x the source's size
(the rest of the text is left as spelled).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_DIRECTIVE = re.compile(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", re.MULTILINE)
_DEFINE = re.compile(
    r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)(\([^)]*\))?((?:[^\n]*\\\n)*[^\n]*)", re.MULTILINE
)
_UNDEF = re.compile(r"^[ \t]*#[ \t]*undef[ \t]+([A-Za-z_]\w*)", re.MULTILINE)
_IDENT = re.compile(r"[A-Za-z_]\w*")
_BODY_TOKEN = re.compile(r"[A-Za-z_]\w*|##|#|\s+|\"[^\"\n]*\"|.", re.DOTALL)
_MAX_DEPTH = 32
_MAX_GROWTH = 16


@dataclass(frozen=True, slots=True)
class Macro:
    name: str
    params: tuple[str, ...] | None  # None: object-like
    body: str
    start: int  # offset of the `#define`
    end: int  # offset of a later `#undef`, or the end of the text


@dataclass(frozen=True, slots=True)
class Expanded:
    """The text after macro expansion; `origin[i]` is the source offset character `i` came from."""

    text: str
    origin: list[int] | None  # None: nothing was expanded (identity)
    from_macro: list[bool] | None

    def source_offset(self, offset: int) -> int:
        if self.origin is None:
            return offset
        return self.origin[min(max(offset, 0), len(self.origin) - 1)] if self.origin else 0

    def is_expanded(self, offset: int) -> bool:
        if self.from_macro is None or not self.from_macro:
            return False
        return self.from_macro[min(max(offset, 0), len(self.from_macro) - 1)]


_SCOPE_SPACE = re.compile(r"\s*::\s*")


def join_scopes(ex: Expanded) -> Expanded:
    """`at :: relu` → `at::relu` (C++ allows space, newlines and comments around `::`; comments are
    blanks by now), keeping every character's source offset."""
    if not any(m.group(0) != "::" for m in _SCOPE_SPACE.finditer(ex.text)):
        return ex
    n = len(ex.text)
    origin = ex.origin if ex.origin is not None else list(range(n))
    from_macro = ex.from_macro if ex.from_macro is not None else [False] * n
    keep = [True] * n
    for m in _SCOPE_SPACE.finditer(ex.text):
        for i in range(m.start(), m.end()):
            keep[i] = ex.text[i] == ":"
    idx = [i for i in range(n) if keep[i]]
    return Expanded("".join(ex.text[i] for i in idx), [origin[i] for i in idx], [from_macro[i] for i in idx])


def find_macros(code: str) -> dict[str, list[Macro]]:
    """The file's `#define`s by name (comments and strings already blanked in `code`)."""
    undefs: dict[str, list[int]] = {}
    for m in _UNDEF.finditer(code):
        undefs.setdefault(m.group(1), []).append(m.start())
    out: dict[str, list[Macro]] = {}
    for m in _DEFINE.finditer(code):
        name = m.group(1)
        params = None
        if m.group(2) is not None:
            params = tuple(p.strip() for p in m.group(2)[1:-1].split(",") if p.strip())
        body = re.sub(r"\\\n", " ", m.group(3)).strip()
        end = min((u for u in undefs.get(name, []) if u > m.start()), default=len(code))
        out.setdefault(name, []).append(Macro(name, params, body, m.start(), end))
    return out


def expand_macros(code: str) -> Expanded:
    """`code` (blanked) with the file's macros expanded outside preprocessor lines."""
    macros = find_macros(code)
    if not macros:
        return Expanded(code, None, None)
    directives = [(m.start(), m.end()) for m in _DIRECTIVE.finditer(code)]
    budget = [len(code) * _MAX_GROWTH]
    out: list[str] = []
    origin: list[int] = []
    from_macro: list[bool] = []
    pos = 0
    d = 0
    for m in _IDENT.finditer(code):
        while d < len(directives) and directives[d][1] <= m.start():
            d += 1
        if d < len(directives) and directives[d][0] <= m.start() < directives[d][1]:
            continue
        macro = _active(macros, m.group(0), m.start())
        if macro is None or m.start() < pos:
            continue
        replaced = _invoke(macro, code, m.end(), macros, frozenset(), 0, budget)
        if replaced is None:
            continue
        text, end = replaced
        out.append(code[pos : m.start()])
        origin.extend(range(pos, m.start()))
        from_macro.extend([False] * (m.start() - pos))
        out.append(text)
        origin.extend([m.start()] * len(text))
        from_macro.extend([True] * len(text))
        pos = end
    out.append(code[pos:])
    origin.extend(range(pos, len(code)))
    from_macro.extend([False] * (len(code) - pos))
    return Expanded("".join(out), origin, from_macro)


def _active(macros: dict[str, list[Macro]], name: str, at: int) -> Macro | None:
    best = None
    for macro in macros.get(name, ()):
        if macro.start < at < macro.end and (best is None or macro.start > best.start):
            best = macro
    return best


def _invoke(
    macro: Macro,
    text: str,
    after: int,
    macros: dict[str, list[Macro]],
    hide: frozenset[str],
    depth: int,
    budget: list[int],
) -> tuple[str, int] | None:
    """The expansion of `macro` invoked at `text[after:]` (just past its name) and where it ends."""
    if depth > _MAX_DEPTH or budget[0] <= 0:
        return None
    hide = hide | {macro.name}
    if macro.params is None:
        return _rescan(macro.body, macros, hide, depth + 1, budget), after
    i = after
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    if i >= len(text) or text[i] != "(":
        return None  # a function-like macro's name without arguments is not an invocation
    args, end = _arguments(text, i)
    if args is None:
        return None
    params = list(macro.params)
    if params and params[-1] == "...":
        params[-1] = "__VA_ARGS__"
        fixed = len(params) - 1
        args = [*args[:fixed], ",".join(args[fixed:])] if len(args) > fixed else args
    raw = {p: (args[k].strip() if k < len(args) else "") for k, p in enumerate(params)}
    tokens = _BODY_TOKEN.findall(macro.body)
    pieces: list[str] = []
    for k, tok in enumerate(tokens):
        prev = next((t for t in reversed(tokens[:k]) if not t.isspace()), "")
        nxt = next((t for t in tokens[k + 1 :] if not t.isspace()), "")
        if tok == "#" and nxt in raw:
            pieces.append('" "')
        elif tok in raw and prev == "#":
            continue
        elif tok in raw:
            pasted = prev == "##" or nxt == "##"
            pieces.append(
                raw[tok] if pasted else _rescan(raw[tok], macros, hide - {macro.name}, depth + 1, budget)
            )
        else:
            pieces.append(tok)
    body = re.sub(r"\s*##\s*", "", "".join(pieces))
    budget[0] -= len(body)
    return _rescan(body, macros, hide, depth + 1, budget), end


def _rescan(
    text: str, macros: dict[str, list[Macro]], hide: frozenset[str], depth: int, budget: list[int]
) -> str:
    out: list[str] = []
    pos = 0
    for m in _IDENT.finditer(text):
        if m.start() < pos or m.group(0) in hide or m.group(0) not in macros:
            continue
        macro = macros[m.group(0)][-1]
        replaced = _invoke(macro, text, m.end(), macros, hide, depth, budget)
        if replaced is None:
            continue
        out.append(text[pos : m.start()])
        out.append(replaced[0])
        pos = replaced[1]
    out.append(text[pos:])
    return "".join(out)


def _arguments(text: str, open_paren: int) -> tuple[list[str] | None, int]:
    depth, start, args = 0, open_paren + 1, []
    for i in range(open_paren, min(len(text), open_paren + 20000)):
        ch = text[i]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                args.append(text[start:i])
                return (args if any(a.strip() for a in args) or len(args) > 1 else []), i + 1
        elif ch == "," and depth == 1:
            args.append(text[start:i])
            start = i + 1
    return None, open_paren


ATEN_ROOTS = ("torch", "at", "c10")
# Namespaces inside ATen's that a using-directive of ATen makes reachable by their own name.
ATEN_SUBNAMESPACES = frozenset(
    {"cuda", "native", "_ops", "detail", "nn", "functional", "linalg", "special", "fft", "jit", "autograd"}
)
_NS_ALIAS = re.compile(r"\bnamespace\s+([A-Za-z_]\w*)\s*=\s*:?:?\s*([A-Za-z_][\w:]*)\s*;")
_NS_OPEN = re.compile(r"\bnamespace\s+([A-Za-z_][\w:]*)\s*\{")
_USING = re.compile(r"\busing\s+(?:namespace\s+)?:?:?\s*([A-Za-z_]\w*)\s*(?:::|;)")


def aten_namespaces(code: str) -> set[str]:
    """`torch`, `at`, `c10` and the names this text gives them (see the module docstring)."""
    roots = set(ATEN_ROOTS)
    for _ in range(4):  # aliases of aliases settle in a few passes
        before = len(roots)
        for m in _NS_ALIAS.finditer(code):
            if m.group(2).split("::")[0] in roots:
                roots.add(m.group(1))
        for m in _NS_OPEN.finditer(code):
            body = _block(code, m.end() - 1)
            if any(u.group(1) in roots for u in _USING.finditer(body)):
                roots.add(m.group(1).split("::")[-1])
        if len(roots) == before:
            break
    directive = re.compile(
        rf"\busing\s+namespace\s+(?:::\s*)?(?:{'|'.join(sorted(map(re.escape, roots)))})\b"
    )
    if directive.search(code):  # `using namespace at;` makes `cuda::x` mean `at::cuda::x`
        roots |= ATEN_SUBNAMESPACES
    return roots


def aten_using_declarations(code: str, roots: set[str]) -> set[str]:
    """Names a using-declaration brings in from ATen (`using at::special_erfcx;`, `using x::relu;`)."""
    alt = "|".join(sorted(map(re.escape, roots)))
    rx = re.compile(rf"\busing\s+(?:::\s*)?(?:{alt})::(?:[A-Za-z_]\w*::)*([A-Za-z_]\w*)\s*;")
    return {m.group(1) for m in rx.finditer(code)}


def _block(code: str, open_brace: int) -> str:
    depth = 0
    for i in range(open_brace, len(code)):
        if code[i] == "{":
            depth += 1
        elif code[i] == "}":
            depth -= 1
            if depth == 0:
                return code[open_brace + 1 : i]
    return code[open_brace + 1 :]
