"""What a candidate's own code may hold to share a batch: build/batch.py's source scanner.

Role: `scan_code(code)` reads the lines of a candidate's `cuda.cu` after its leading `#include
<...>` block (build/batch.py `Job.code`) as tokens: the macros it defines (and the words of each
definition), the names it declares at namespace scope (namespaces see-through; class, function and
initializer bodies skipped; an unscoped enum's enumerators counted), every word of each
namespace-scope declaration, and its names of internal linkage. `clash(scan, tail, names,
spelled)` says whether those names could mean something else in a batch than alone, given the
full headers' names (headers.full_header_names) and the words of the shim's prelude and of the
headers it adds (batch.py's `_prelude_words`).

Contract: code that `scan_code` accepts and `clash` passes can be compiled in a namespace of its
own, its macros `#undef`ined after it, beside other candidates, and prints there what it prints
alone (batch.py's docstring says why); for anything else they return why not, which
`BatchReport.how` shows, and the candidate gets its single check. Refused: another `#include`,
`#line`, `#error`/`#warning`, a pragma other than `unroll`/`nounroll`, `_Pragma`, `push_macro`, an
`#undef` of a name the code did not define, a macro defined twice or named `TORCH_EXTENSION_NAME`,
`#if`s or brackets that do not balance, an unterminated comment, literal or line, a raw string,
`__COUNTER__`/`__BASE_FILE__`/`__FILE_NAME__`/`__INCLUDE_LEVEL__`/`__has_include`, `extern "C"`,
a leading `::`, `operator`, `asm` or `main` at namespace scope, a using-directive or
using-declaration there, a declaration qualified by a name not the code's own, `TORCH_LIBRARY`,
the word `cudice`; a name declared at namespace scope that the full headers spell; a macro the
headers define, or that the shim or the headers its prelude adds spell (the single check reads
them with the macro defined); a name of internal linkage (`static`, `const`, unnamed namespace)
not clearly referenced (`_referenced`: EDG warns of an unreferenced one only in the main file,
which a `#line`d section is not), or beside conditional code.

Not covered: it reads tokens, not C++: a local declared as `int a, x;` can shadow a global `x`
unseen by `_referenced`; a macro used in a namespace-scope declaration is taken to declare every
word given to it (a refusal too many, never one too few). No compiler runs here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from cudice.verifier.build.headers import WORD, HeaderNames

_LITERAL = re.compile(r'//[^\n]*|/\*[\s\S]*?\*/|"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'|/\*|["\']')
_TOKEN = re.compile(r"[A-Za-z_$][\w$]*|\.?\d(?:[\w.']|[eEpP][+-])*|::|\S")
_FORBIDDEN_WORDS = frozenset(
    "__COUNTER__ __BASE_FILE__ __FILE_NAME__ __INCLUDE_LEVEL__ _Pragma __has_include __has_include_next "
    "TORCH_LIBRARY TORCH_LIBRARY_IMPL TORCH_LIBRARY_FRAGMENT".split()
)
# words that are no name a declaration can introduce: C++ keywords and CUDA's qualifier macros
_NOT_NAMES = frozenset(
    "alignas alignof auto bool break case catch char char8_t char16_t char32_t class const consteval "
    "constexpr constinit const_cast continue decltype default delete do double dynamic_cast else enum "
    "explicit export extern false final float for friend goto if inline int long mutable namespace new "
    "noexcept nullptr override private protected public register reinterpret_cast requires return short "
    "signed sizeof static static_assert static_cast struct switch template this thread_local throw true "
    "try typedef typeid typename union unsigned using virtual void volatile wchar_t while __restrict "
    "__restrict__ __global__ __device__ __host__ __forceinline__ __noinline__ __inline__ __shared__ "
    "__constant__ __managed__ __launch_bounds__ __align__ __grid_constant__ __cluster_dims__ "
    "__maxnreg__ __attribute__ __inline __volatile__".split()
)
_SCOPE_KEYS = frozenset({"struct", "class", "union", "enum"})


@dataclass(frozen=True, slots=True)
class Scan:
    macros: tuple[str, ...]
    macro_words: dict[str, frozenset[str]]  # words of each macro's definition
    declared: frozenset[str]  # names declared at namespace scope (namespaces see-through)
    statement_words: tuple[frozenset[str], ...]  # every word of each namespace-scope declaration
    internal: frozenset[str]  # names with internal linkage (static, const, unnamed namespace)


def _strip(code: str) -> str | None:
    """`code` with comments blanked (newlines kept) and literals emptied; None when one is unterminated."""
    bad = False

    def blank(m: re.Match[str]) -> str:
        nonlocal bad
        t = m.group(0)
        if t in ('"', "'", "/*"):
            bad = True
        if t.startswith("//") or t.startswith("/*"):
            return " " + "\n" * t.count("\n")
        return t[0] * 2

    out = _LITERAL.sub(blank, code)
    return None if bad or re.search(r'\bR""', out) else out


def scan_code(code: str) -> tuple[Scan | None, str | None]:
    """What `_job` needs of the candidate's own code, or why it cannot be batched."""
    if re.search(r'\bextern\s*"C', code):
        return None, 'extern "C"'
    clean = _strip(code)
    if clean is None or clean.rstrip().endswith("\\"):
        return None, "unterminated comment, literal or line"
    macros: list[str] = []
    macro_words: dict[str, frozenset[str]] = {}
    depth = 0
    conditional = False
    body: list[str] = []
    for logical in re.sub(r"\\\n", " ", clean).split("\n"):
        d = re.match(r"^[ \t]*#[ \t]*(\w*)[ \t]*(.*)$", logical)
        if d is None:
            body.append(logical)
            continue
        body.append("")
        word, rest = d.group(1), d.group(2)
        named = WORD.match(rest)
        name = named.group(0) if named else ""
        if word == "define" and name:
            if name in macros or name == "TORCH_EXTENSION_NAME":
                return None, f"#define {name} twice or of the module name"
            definition = rest[len(name) :]
            if not _balanced(_TOKEN.findall(definition)):
                return None, f"macro {name} does not balance its brackets"
            macros.append(name)
            macro_words[name] = frozenset(WORD.findall(definition))
        elif word == "undef":
            if name not in macros:
                return None, f"#undef of {name or 'nothing'}, which the candidate did not define"
        elif word in ("if", "ifdef", "ifndef"):
            depth += 1
            conditional = True
        elif word in ("elif", "else", "elifdef", "elifndef") and depth > 0:
            pass
        elif word == "endif" and depth > 0:
            depth -= 1
        elif word == "pragma" and re.fullmatch(r"(?:no)?unroll\b[^\n]*", rest):
            pass
        elif word or rest.strip():
            return None, f"#{word} after the leading includes"
    if depth:
        return None, "#if without #endif"
    text = "\n".join(body)
    words = set(WORD.findall(text)) | {w for ws in macro_words.values() for w in ws}
    if any("cudice" in w.lower() for w in words):
        return None, "the word cudice"
    if words & _FORBIDDEN_WORDS:
        return None, f"uses {sorted(words & _FORBIDDEN_WORDS)[0]}"
    tokens = _TOKEN.findall(text)
    for prev, t in zip(["", *tokens], tokens, strict=False):
        if t == "::" and not ((WORD.fullmatch(prev) and prev not in _NOT_NAMES) or prev == ">"):
            return None, "a name qualified from the global namespace (::x)"
    decls, why = _declarations(tokens)
    if decls is None:
        return None, why
    if decls.internal and conditional:
        return None, "conditional code beside names of internal linkage"
    for name, count in decls.internal.items():
        if not _referenced(tokens, name, count):
            return None, f"{name} has internal linkage and may be unreferenced"
    internal = frozenset(decls.internal)
    return Scan(
        tuple(macros), macro_words, frozenset(decls.declared), tuple(decls.statements), internal
    ), None


# a word before a name that does not make it a declaration there
_USE_AFTER = frozenset(
    "return case else do throw sizeof new delete goto co_return co_yield co_await and or not xor bitand "
    "bitor compl not_eq and_eq or_eq xor_eq".split()
)


def _declares(word: str) -> bool:
    """A word a declared name may follow (a type, a qualifier); `return x` is a use."""
    return bool(WORD.fullmatch(word)) and word not in _USE_AFTER


def _referenced(tokens: list[str], name: str, declarations: int) -> bool:
    """`name` (declared `declarations` times at namespace scope) is used somewhere and declared
    nowhere else (no local or parameter of the same name could take its uses).

    EDG warns of an internal-linkage entity nothing references ("declared but never referenced")
    only in the main file, so such a candidate alone gets a warning that a batch would not print."""
    uses = declared = 0
    for j, t in enumerate(tokens):
        if t != name:
            continue
        prev = tokens[j - 1] if j else ";"
        if prev in (".", "->"):
            continue
        before = tokens[j - 2] if j >= 2 else ";"
        first = tokens[j - 3] if j >= 3 else ";"
        if (
            _declares(prev)
            or prev == ">"
            or (prev in ("*", "&", "&&") and _declares(before) and (_declares(first) or first in "{};(,>"))
        ):  # `T x`, `T<U> x`, `T* x` where a statement or parameter starts: a declaration of its own
            declared += 1
        else:
            uses += 1
    return uses > 0 and declared == declarations


def _balanced(tokens: list[str]) -> bool:
    depth = {"(": 0, "[": 0, "{": 0}
    closer = {")": "(", "]": "[", "}": "{"}
    for t in tokens:
        if t in depth:
            depth[t] += 1
        elif t in closer:
            depth[closer[t]] -= 1
            if depth[closer[t]] < 0:
                return False
    return not any(depth.values())


@dataclass(slots=True)
class _Decls:
    """What `_declarations` gathers: names, each declaration's words, internal-linkage names."""

    declared: set[str] = field(default_factory=set)
    statements: list[frozenset[str]] = field(default_factory=list)
    internal: dict[str, int] = field(default_factory=dict)  # name -> declarations of it


def _declarations(tokens: list[str]) -> tuple[_Decls | None, str | None]:
    """Names declared at namespace scope (namespace braces see-through; class, function and
    initializer bodies skipped; an unscoped enum's enumerators counted), each declaration's words."""
    if not _balanced(tokens):
        return None, "brackets do not balance"
    decls = _Decls()
    stmt: list[str] = []
    scopes: list[bool] = []  # per open namespace: whether it is unnamed
    skip = 0  # depth inside a skipped body
    kind = ""
    for t in tokens:
        if skip:
            if t == "{":
                skip += 1
            elif t == "}":
                skip -= 1
            elif kind == "enum" and skip == 1 and WORD.fullmatch(t):
                stmt.append(t)
            if skip == 0:
                if kind == "body":
                    why = _statement(stmt, decls, any(scopes))
                    if why:
                        return None, why
                    stmt = []
                else:
                    stmt.append("{}")
            continue
        if t == "{" and stmt.count("(") == stmt.count(")"):
            if "namespace" in stmt:
                names = [w for w in stmt if WORD.fullmatch(w) and w not in ("namespace", "inline")]
                decls.declared.update(names)
                scopes.append(not names)
                stmt = []
                continue
            head = [w for w in stmt if w != "{}"]
            if "enum" in head and not {"class", "struct"} & set(
                head[head.index("enum") + 1 : head.index("enum") + 2]
            ):
                kind = "enum"
            elif _SCOPE_KEYS & set(head) and "(" not in head:
                kind = "class"
            elif "=" in head or ")" not in head:
                kind = "init"
            else:
                kind = "body"
            skip = 1
            continue
        if t == "}" and stmt.count("(") == stmt.count(")"):
            if not scopes or stmt:
                return None, "a declaration left open at a namespace's end"
            scopes.pop()
            continue
        if t == ";" and stmt.count("(") == stmt.count(")"):
            why = _statement(stmt, decls, any(scopes))
            if why:
                return None, why
            stmt = []
            continue
        stmt.append(t)
    if stmt or scopes:
        return None, "a declaration without its end"
    decls.declared -= _NOT_NAMES
    return decls, None


def _statement(stmt: list[str], decls: _Decls, unnamed: bool) -> str | None:
    """Add the names one namespace-scope declaration introduces; why not, for those refused."""
    if not stmt:
        return None
    before = set(decls.declared)
    why = _introduced(stmt, decls.declared)
    if why is not None:
        return why
    words = [w for w in stmt if WORD.fullmatch(w)]
    decls.statements.append(frozenset(words) - _NOT_NAMES)
    depth, top = 0, set()
    for t in stmt:
        depth += {"(": 1, "[": 1, ")": -1, "]": -1}.get(t, 0)
        if depth == 0:
            top.add(t)
    if unnamed or top & {"static", "const", "constexpr"}:  # internal linkage (or a function returning const)
        names = _introduced_names(stmt, before, decls.declared)
        for n in names:
            decls.internal[n] = decls.internal.get(n, 0) + 1
    return None


def _introduced_names(stmt: list[str], before: set[str], after: set[str]) -> set[str]:
    """The names `stmt` declares: new ones, and those declared again (found by a second pass)."""
    again: set[str] = set()
    _introduced(stmt, again)
    return (after - before) | again


def _introduced(stmt: list[str], declared: set[str]) -> str | None:
    """Add to `declared` the names one namespace-scope declaration introduces; why not, if refused."""
    words = [w for w in stmt if WORD.fullmatch(w)]
    if stmt[0] == "using":
        if len(stmt) >= 3 and WORD.fullmatch(stmt[1]) and stmt[2] == "=":
            declared.add(stmt[1])
            return None
        return "using-directive or using-declaration at namespace scope"
    for bad in ("operator", "asm", "__asm__", "__asm", "main"):
        if bad in words:
            return f"{bad} at namespace scope"
    toks = list(stmt)
    if toks[:2] == ["template", "<"]:  # the template parameter list declares nothing outside
        depth, j = 0, 1
        for j in range(1, len(toks)):
            depth += {"<": 1, ">": -1}.get(toks[j], 0)
            if depth == 0:
                break
        toks = toks[j + 1 :]
    paren = angle = 0
    in_init = False
    for j, t in enumerate(toks):
        prev = toks[j - 1] if j else ""
        nxt = toks[j + 1] if j + 1 < len(toks) else ";"
        if t in "([":
            paren += 1
            if t == "(" and paren == 1 and nxt in ("*", "&", "^"):  # a parenthesized declarator
                k = j + 1
                while k < len(toks) and toks[k] != ")":
                    if WORD.fullmatch(toks[k]):
                        declared.add(toks[k])
                    k += 1
            continue
        if t in ")]":
            paren -= 1
            continue
        if paren:
            continue
        if t == "<" and (WORD.fullmatch(prev) or prev == ">"):
            angle += 1
        elif t == ">" and angle:
            angle -= 1
        elif angle:
            continue
        elif t == "=":
            in_init = True
        elif t == ",":
            in_init = False
        elif WORD.fullmatch(t) and not in_init:
            introduces = nxt in ("(", "=", ";", ",", "[", "{}", ":") or prev in _SCOPE_KEYS
            if prev == "class" and j >= 2 and toks[j - 2] == "enum":
                introduces = True
            if introduces and prev in _SCOPE_KEYS and nxt == "::" and t not in declared:
                return f"a declaration qualified by {t}, not the candidate's own"
            if introduces and prev == "::":
                k = j - 1
                while k >= 1 and toks[k] == "::" and WORD.fullmatch(toks[k - 1]):
                    k -= 2
                if toks[k + 1] not in declared:
                    return f"a declaration qualified by {toks[k + 1]}, not the candidate's own"
            elif introduces:
                declared.add(t)
    if "{}" in stmt and "enum" in words:  # an unscoped enum's enumerators (its body words were kept)
        declared.update(words)
    return None


def clash(scan: Scan, tail: str, names: HeaderNames, spelled: frozenset[str]) -> str | None:
    """Why the names of a candidate's code (`scan`) could mean something else in a batch than alone
    (None: they cannot), given the full headers' names, the words of the shim's prelude and of the
    headers it adds (`spelled`), and the candidate's own part of the shim (`tail`)."""
    for m in scan.macros:
        if m in names.macros:
            return "redefines a header macro"
        if m in spelled or m in WORD.findall(tail):
            return "defines a macro the shim or its headers spell"
    expands = set(scan.macros) | (names.macros - _NOT_NAMES)
    declared = set(scan.declared)
    for words in scan.statement_words:  # a macro at namespace scope may declare any word given to it
        used = words & expands
        if used:
            declared |= words - expands
            declared |= {w for m in used & set(scan.macros) for w in scan.macro_words[m]} - _NOT_NAMES
    hit = sorted(declared & names.identifiers)
    return f"declares a name the headers spell ({hit[0]})" if hit else None
