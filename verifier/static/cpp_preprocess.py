"""The preprocessed view of a candidate's C++/CUDA text, and the names it gives ATen's namespaces.

The C++ rules (`static/cpp_rules.py`) are regexes; a rule must see what the compiler sees, not
what the source spells. Between them stand the compiler's first translation phases and the
preprocessor, which `cpp_scan.Unit.of` applies in the compiler's order:

- line splices: `splice_lines()` joins a line ending in a backslash to the next before anything
  else reads the text (`at::re\\<newline>lu(x)` is `at::relu(x)`; a `//` comment ending in a
  backslash goes on), keeping each character's source offset;
- digraphs: `replace_digraphs()` reads `%:` as `#` (so `%:define` is a directive, `%:%:` pastes),
  `<% %>` as braces and `<: :>` as brackets (C++'s `<::` rule kept), padded with spaces so no
  offset moves. Trigraphs (`??=`) are not read: C++17 removed them, and g++ and nvcc (checked)
  ignore them with a warning and fail on the line; the flags that turn them on (`-trigraphs`, an
  ISO `-std` before C++17) are refused (`static/load_inline.py`);
- macros: `expand_macros()` expands the file's own object-like and function-like `#define`s, and
  those of the compiler command line (`-D NAME=VALUE`, in effect from the first line) —
  arguments, `#` (stringising, to a blank string) and `##` (token pasting) included, rescanned
  with the usual hide set — so `CAT(pthread_, create)` reads as `pthread_create` and `NS::relu`
  under `#define NS at` as `at::relu`. Each character of the result knows the offset it came
  from (a macro's text: the invocation's first character), so findings land on the line that
  invokes the macro; `is_expanded()` says whether a character came from a macro;
- conditional compilation: no `#if` is evaluated, every branch is read. A name defined in several
  branches (`#if 1 / #define NS at / #else / #define NS mine / #endif`), or by both the command
  line and the file, has every definition: `macro_choices()` lists the readings (one definition
  per such name; all combinations up to 64, beyond that each definition at least once) and the
  rules judge each (`cpp_scan.Unit.variants`). An `#undef` ends a definition only where it surely
  runs after it (same branch or outside the definition's conditionals), so one in another branch
  leaves the definition in effect; in a text with `#pragma pop_macro` (or `_Pragma`), which can
  restore a definition, no `#undef` ends one;
- spacing: `join_scopes()` removes space around `::` (`at :: relu` is `at::relu`);
- namespace names: `aten_namespaces()` is `torch`, `at`, `c10` plus every name the text makes
  an alias of one (`namespace x = at;`, `namespace x = at::native;`) and every namespace the
  text opens that pulls ATen names in (`namespace cuda { using namespace at; }`,
  `namespace y { using at::relu; }`), and — once `using namespace at;` (or `torch`, `c10`) is
  in effect — ATen's own sub-namespaces by their bare names (`cuda::blas::gemm` is
  `at::cuda::blas::gemm`).

Not covered: macros from headers (`TORCH_CHECK`, `AT_DISPATCH_*` stay as spelled), `#include` of
the candidate's own files (there are none: `load_inline` sources are self-contained, and
include directories are refused), the combinations of more than 64 conditional readings (each
definition is still read once), a macro that is defined only through another macro's expansion
of `#define` (impossible in C++), and expansion beyond 32 levels or 16x the source's size (the
rest of the text is left as spelled).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

_DIRECTIVE = re.compile(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", re.MULTILINE)
_DEFINE = re.compile(
    r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)(\([^)]*\))?((?:[^\n]*\\\n)*[^\n]*)", re.MULTILINE
)
_UNDEF = re.compile(r"^[ \t]*#[ \t]*undef[ \t]+([A-Za-z_]\w*)", re.MULTILINE)
# `#pragma pop_macro("X")` (also spelled `_Pragma(...)`, whose string is blanked by now) restores a
# definition an `#undef` ended: where the text has one, no `#undef` ends a definition.
_RESTORES = re.compile(r"^[ \t]*#[ \t]*pragma[ \t]+pop_macro\b|\b_Pragma\b|\b__pragma\b", re.MULTILINE)
_CONDITIONAL = re.compile(r"^[ \t]*#[ \t]*(if|ifdef|ifndef|elif|elifdef|elifndef|else|endif)\b", re.MULTILINE)
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
    preferred: bool = False  # the reading `expand_macros(choice=...)` takes where it is in effect


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

    def through(self, back: list[int] | None) -> Expanded:
        """This expansion of a text that was itself read from another (`back[i]`: the other text's
        offset of character `i`, `splice_lines`), mapped to that other text's offsets."""
        if back is None:
            return self
        n = len(self.text)
        origin = self.origin if self.origin is not None else list(range(n))
        return Expanded(
            self.text,
            [back[min(max(o, 0), len(back) - 1)] for o in origin] if back else origin,
            self.from_macro if self.from_macro is not None else [False] * n,
        )


# Translation phase 2: a backslash at the end of a line joins it to the next, anywhere (inside an
# identifier: `at::re\<newline>lu`); g++ also accepts spaces between the backslash and the newline.
_SPLICE = re.compile(r"\\[ \t]*\r?\n")


def splice_lines(text: str) -> tuple[str, list[int] | None]:
    """`text` with its line continuations removed, and each character's offset in `text` (None when
    there are none)."""
    if _SPLICE.search(text) is None:
        return text, None
    out: list[str] = []
    back: list[int] = []
    pos = 0
    for m in _SPLICE.finditer(text):
        out.append(text[pos : m.start()])
        back.extend(range(pos, m.start()))
        pos = m.end()
    out.append(text[pos:])
    back.extend(range(pos, len(text) + 1))
    return "".join(out), back


# Alternative tokens (digraphs) the compilers read in C++17 (checked with g++ and nvcc): `%:define`
# is `#define`, `%:%:` pastes, `<% %>` are braces, `<: :>` brackets; `<::` followed by anything but
# `:` or `>` is `<` and `::` (`std::vector<::ns::T>`), and `::` is read before `:>`. Replaced with
# their one-character tokens padded by spaces, so offsets stay. Trigraphs (`??=`) are not read:
# C++17 removed them and both compilers ignore them unless `-trigraphs` (a flag the checks refuse).
_DIGRAPH = re.compile(r"%:%:|%:|<%|%>|<:(?!:[^:>])|::|:>")
_DIGRAPH_TEXT = {"%:%:": "##  ", "%:": "# ", "<%": "{ ", "%>": " }", "<:": "[ ", ":>": " ]", "::": "::"}


def replace_digraphs(code: str) -> str:
    """`code` (blanked: no comments or strings) with digraphs spelled as their tokens."""
    if "%" not in code and "<:" not in code and ":>" not in code:
        return code
    return _DIGRAPH.sub(lambda m: _DIGRAPH_TEXT[m.group(0)], code)


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


def _conditions(code: str) -> list[tuple[int, tuple[tuple[int, int], ...]]]:
    """`(offset, stack)` at each conditional directive: the `(block, branch)` pairs of the
    `#if`/`#elif`/`#else` groups enclosing the text after it, outermost first."""
    out: list[tuple[int, tuple[tuple[int, int], ...]]] = [(-1, ())]
    stack: list[tuple[int, int]] = []
    blocks = 0
    for m in _CONDITIONAL.finditer(code):
        kind = m.group(1)
        if kind.startswith("if"):
            blocks += 1
            stack.append((blocks, 0))
        elif kind == "endif":
            if stack:
                stack.pop()
        elif stack:
            block, branch = stack.pop()
            stack.append((block, branch + 1))
        out.append((m.start(), tuple(stack)))
    return out


def _stack_at(
    conds: list[tuple[int, tuple[tuple[int, int], ...]]], offset: int
) -> tuple[tuple[int, int], ...]:
    stack: tuple[tuple[int, int], ...] = ()
    for at, s in conds:
        if at > offset:
            break
        stack = s
    return stack


def find_macros(code: str, predefined: tuple[tuple[str, str], ...] = ()) -> dict[str, list[Macro]]:
    """The file's `#define`s by name (comments and strings already blanked in `code`), after the
    command line's (`predefined`: `("NAME", "VALUE")`, `("F(x, y)", "...")`, in effect from the
    first line until an `#undef`).

    A definition lasts until an `#undef` that surely runs after it: one in the same conditional
    branch or outside every conditional the definition is in. An `#undef` in another branch may not
    run, so the definition stays (and a name defined in both branches of an `#if` has both
    definitions: `expand_macros` reads each of them, see `macro_choices`)."""
    conds = _conditions(code)
    undefs: dict[str, list[tuple[int, tuple[tuple[int, int], ...]]]] = {}
    if _RESTORES.search(code) is None:  # `pop_macro` brings back what an `#undef` ended
        for m in _UNDEF.finditer(code):
            undefs.setdefault(m.group(1), []).append((m.start(), _stack_at(conds, m.start())))

    def end_of(name: str, start: int, stack: tuple[tuple[int, int], ...]) -> int:
        return min(
            (u for u, su in undefs.get(name, []) if u > start and stack[: len(su)] == su),
            default=len(code),
        )

    out: dict[str, list[Macro]] = {}
    for head, body in predefined:
        d = re.fullmatch(r"\s*([A-Za-z_]\w*)(\([^)]*\))?\s*", head)
        if d is None:
            continue
        name, params = d.group(1), None
        if d.group(2) is not None:
            params = tuple(p.strip() for p in d.group(2)[1:-1].split(",") if p.strip())
        out.setdefault(name, []).append(Macro(name, params, body.strip(), -1, end_of(name, -1, ())))
    for m in _DEFINE.finditer(code):
        name = m.group(1)
        params = None
        if m.group(2) is not None:
            params = tuple(p.strip() for p in m.group(2)[1:-1].split(",") if p.strip())
        body = re.sub(r"\\\n", " ", m.group(3)).strip()
        end = end_of(name, m.start(), _stack_at(conds, m.start()))
        out.setdefault(name, []).append(Macro(name, params, body, m.start(), end))
    return out


_MAX_VARIANTS = 64


def macro_choices(code: str, predefined: tuple[tuple[str, str], ...] = ()) -> list[dict[str, int]]:
    """The other readings of `code` when a name has several definitions in effect at once (both
    branches of an `#if`, a command-line `-D` and the file's `#define`): each is a choice of one
    definition per such name (`expand_macros(..., choice=...)`), all combinations up to
    `_MAX_VARIANTS`, beyond that each definition at least once. `[]` when every name has one."""
    macros = find_macros(code, predefined)
    alts: dict[str, list[int]] = {}
    for name, defs in macros.items():
        distinct: dict[tuple[tuple[str, ...] | None, str], int] = {}
        for i, d in enumerate(defs):
            overlaps = any(o is not d and max(o.start, d.start) < min(o.end, d.end) for o in defs)
            if overlaps:
                distinct.setdefault((d.params, d.body), i)
        if len(distinct) > 1:
            alts[name] = sorted(distinct.values())
    if not alts:
        return []
    total = 1
    for idx in alts.values():
        total *= len(idx)
    if total <= _MAX_VARIANTS:
        combos: list[dict[str, int]] = [{}]
        for name, idx in alts.items():
            combos = [{**c, name: i} for c in combos for i in idx]
        return combos
    width = max(len(idx) for idx in alts.values())
    return [{name: idx[min(k, len(idx) - 1)] for name, idx in alts.items()} for k in range(width)]


def expand_macros(
    code: str, predefined: tuple[tuple[str, str], ...] = (), choice: dict[str, int] | None = None
) -> Expanded:
    """`code` (blanked) with the file's macros (and `predefined`, the command line's: `find_macros`)
    expanded outside preprocessor lines. Where several definitions of a name are in effect, the
    latest is read, or the one `choice` names (an index into the name's definitions)."""
    macros = find_macros(code, predefined)
    if choice:
        macros = {n: _chosen(defs, choice.get(n)) for n, defs in macros.items()}
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


def _chosen(defs: list[Macro], index: int | None) -> list[Macro]:
    """`defs` with the chosen one preferred and last (`_active` prefers it, `_rescan` reads the last)."""
    if index is None or not 0 <= index < len(defs):
        return defs
    pick = defs[index]
    return [*(d for d in defs if d is not pick), dataclasses.replace(pick, preferred=True)]


def _active(macros: dict[str, list[Macro]], name: str, at: int) -> Macro | None:
    best = None
    for macro in macros.get(name, ()):
        if macro.start < at < macro.end and (
            best is None or macro.preferred or (not best.preferred and macro.start > best.start)
        ):
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
