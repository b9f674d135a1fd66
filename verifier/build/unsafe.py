"""What a `load_inline` call may hand the compiler: identifiers for names, headers for includes.

The compiler runs outside the runners' OS boundary (run/boundary.py), as the user who runs cudice,
and it is also the first thing that reads a candidate's strings on the editor's and the CLI's
compile-only path. So the strings of a `load_inline` call must not reach it as anything but C++:

- the module `name` becomes `-DTORCH_EXTENSION_NAME=<name>` in a command line that is split like
  a shell's, and the library's file name: it must be a C identifier (`[A-Za-z_][A-Za-z0-9_]*`),
  or a name like `x -wrapper /bin/sh,-c,...` runs a program and `x -MF /path` writes a file;
- each `functions` entry is pasted into `m.def("<f>", torch::wrap_pybind_function(<f>))`: it
  must be a C identifier too, or `at::relu` (or a closing parenthesis and a comment) binds a
  library function under the file's name;
- an `#include` (also `#include_next`, `#import`, `#embed`, `__has_include`, `__has_embed`,
  `#pragma GCC dependency`) must name a header by a relative path without `..` — an absolute
  path or one that climbs out reads any file the user can read, and the compiler's error message
  quotes its lines back to the candidate; an include whose operand is a macro cannot be checked
  and is refused; `.incbin` (assembler) embeds a file's bytes in the object and is refused.

`unsafe_reason(name, sources, functions)` says why a call's values are refused (or None); every
builder of a module calls it through build/generated.py's `layout`, which raises `UnsafeModule`,
and the judge checks a runner's `load_inline` request with it before building
(run/judge_load.py). `unsafe_call_diagnostics(doc)` reports the statically known calls in the
static stage (`static.build_injection`), so the editor and the CLI say so before any compile.

Not covered: what the headers on the include path contain (they are the toolchain's and torch's);
`extra_cflags`/`extra_ldflags` (static/sources.py reads them).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from cudice.verifier.source.document import Document
from cudice.verifier.source.result import Diagnostic, Severity, Stage

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_SPLICE = re.compile(r"\\\r?\n")
# comments become a space (a directive may have `/**/` around its `#`), string and character
# literals are kept as they are (a header name in quotes is one)
_COMMENT_OR_LITERAL = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
_DIRECTIVE = re.compile(
    r"^[ \t\f\v]*(?:#|%:|\?\?=)[ \t\f\v]*(include_next|include|import|embed)\b[ \t\f\v]*(.*)$", re.M
)
_HAS = re.compile(r"__has_(?:include_next|include|embed)\s*\(\s*([^)]*)\)")
_DEPENDENCY = re.compile(r"^[ \t]*(?:#|%:)[ \t]*pragma[ \t]+GCC[ \t]+dependency[ \t]+(.*)$", re.M)
_INCBIN = re.compile(r"\.incbin\b")


class UnsafeModule(ValueError):
    """A `load_inline` call whose name, functions or sources would reach the compiler as more than
    C++ (`unsafe_reason` says why)."""


def _header_problem(operand: str) -> str | None:
    """Why an include's operand is refused, or None for `<rel/path.h>` or `"rel/path.h"`."""
    operand = operand.strip()
    m = re.match(r'<([^>]*)>|"([^"]*)"', operand)
    if m is None:
        return f'`{operand[:60]}`, which is no header name in <...> or "..." (a macro cannot be checked)'
    path = (m.group(1) if m.group(1) is not None else m.group(2)).strip()
    parts = re.split(r"[\\/]+", path)
    if path.startswith(("/", "\\", "~")) or re.match(r"[A-Za-z]:", path):
        return f"`{path}` is an absolute path"
    if ".." in parts:
        return f"`{path}` climbs out of the include folders with `..`"
    return None


def unsafe_source_reason(text: str) -> str | None:
    """Why one C++/CUDA source is refused, or None."""
    text = _SPLICE.sub("", text)
    text = _COMMENT_OR_LITERAL.sub(lambda m: " " if m.group(0).startswith("/") else m.group(0), text)
    for m in _DIRECTIVE.finditer(text):
        if (why := _header_problem(m.group(2))) is not None:
            return f"`#{m.group(1)}` of {why}"
    for m in _HAS.finditer(text):
        if (why := _header_problem(m.group(1))) is not None:
            return f"`__has_include` of {why}"
    for m in _DEPENDENCY.finditer(text):
        if (why := _header_problem(m.group(1))) is not None:
            return f"`#pragma GCC dependency` on {why}"
    if _INCBIN.search(text):
        return "`.incbin` embeds a file's bytes into the object"
    return None


def unsafe_reason(name: str, sources: Iterable[str], functions: Sequence[str] | None) -> str | None:
    """Why these `load_inline` values are refused (the module docstring's rules), or None."""
    if not isinstance(name, str) or not IDENTIFIER.match(name):
        return (
            f"the module name {name!r} is not a C identifier: it becomes a compiler flag and a file "
            "name, so anything else would pass options to the compiler. Name the module with "
            "letters, digits and underscores"
        )
    for f in functions or ():
        if not isinstance(f, str) or not IDENTIFIER.match(f):
            return (
                f"the `functions` entry {f!r} is not a C identifier: it is pasted into the "
                "generated binding, so anything else binds other code (a library function, a "
                "comment). List the names of functions the sources define"
            )
    for text in sources:
        if (why := unsafe_source_reason(text)) is not None:
            return (
                f"{why}: the compiler would read a file outside the headers (and quote it in its "
                "errors). Include headers by their usual names (`<torch/extension.h>`, "
                "`<cuda_runtime.h>`)"
            )
    return None


def unsafe_call_diagnostics(doc: Document) -> list[Diagnostic]:
    """`static.build_injection` for each statically known `load_inline` call whose values
    `unsafe_reason` refuses (the parts known only at run time are checked by the judge)."""
    out: list[Diagnostic] = []
    for call in doc.load_inline_calls:
        sources = [s.text for s in call.sources if s.text is not None]
        why = unsafe_reason(call.name if call.name is not None else "_", sources, call.functions)
        if why is not None:
            out.append(
                Diagnostic(
                    Severity.ERROR,
                    f"`load_inline` call refused: {why}.",
                    "static.build_injection",
                    Stage.STATIC,
                    doc.location(call.span),
                )
            )
    return out
