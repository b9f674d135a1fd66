"""The C++/CUDA checks over what each `load_inline` call compiles, located in the candidate's file.

`extension_findings()` runs `cuda.check_cpp_sources` over the sources of every call that
resolves to `load_inline` (`names.LoadInlineUses`, under any name): literals the document
maps character by character are located through their source map; sources the file fixes by
other means (`static/sources.py`: f-strings over constants, `"".join`, `+=` …) on the expression
that builds them; a source the file does not fix is `static.dynamic_source` (an error; a warning in
`lenient`), and a name nothing in the file defines is reported as exactly that.
Sources a call received at run time get the same C++ checks in `checks.check_built_sources`.

The call's other arguments change what is compiled, so they are read too (`build_flag_findings`,
`functions_findings`): `-D NAME=VALUE` in `extra_cflags`/`extra_cuda_cflags` (also `-D NAME`,
`--define-macro`, through `-Xcompiler`, nvcc's comma lists) is a `#define` at the top of every
source of the call; every other flag must be one of the usual optimisation, warning, standard and
architecture flags, or it is refused with what it is and why (`-U` — except of torch's own
`__CUDA_NO_HALF*` defines, which half-precision kernels undo —, `-include`, `-imacros`, `-I`,
option files, `-Wp,`, plugins, `-trigraphs`, an `-std` before C++17: `static.dynamic_source`;
shell syntax in a flag:
`static.cpp_file_or_process`, since torch writes the flags into a shell command line unquoted).
`extra_ldflags` may link libraries (`-l<lib>`, `-L<dir>`, `-Wl,-rpath,...`; what the sources call
in them is judged by the C++ rules); symbol rebinding (`--wrap`, `--defsym`, linker scripts,
`--just-symbols`) is `static.timer_patch`, any other linker input is refused.
`extra_include_paths` and `sycl_sources` name code the checks cannot read. `functions=` entries
must be plain C identifiers (`load_inline` pastes each into `m.def("<f>", <f>)`; `at::relu` binds
ATen's op), and a dict's docstrings must hold no quote, backslash or line break (they are pasted
into a C++ string literal); build/unsafe.py refuses such entries at build time as well
(`static.build_injection`). Flags or functions the file does not fix are refused.

Not covered: calls of `load_inline` the Python checks cannot find (through `getattr`, `globals()`;
`static/checks.py` rejects those as dynamic code); the flags' effect on code generation
(`--use_fast_math` changes precision, which the run-time comparison judges); `build_directory`
and the other keyword arguments, which do not change the compiled text.
"""

from __future__ import annotations

import ast
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field

from cudice.verifier.source.bindings import undefined_names
from cudice.verifier.source.document import Document
from cudice.verifier.source.result import Diagnostic, Location, Severity, Stage
from cudice.verifier.source.sourcemap import SourceSpan
from cudice.verifier.static.cuda import CppSource, Locator, check_cpp_sources
from cudice.verifier.static.names import LoadInlineUses
from cudice.verifier.static.policy import Strictness
from cudice.verifier.static.sources import (
    ModuleConstants,
    ResolvedCall,
    call_functions,
    enclosing_function,
    resolve_call_sources,
)


def extension_findings(
    doc: Document, uses: LoadInlineUses, level: Strictness, low_ref: bool
) -> list[Diagnostic]:
    """The C++ findings of every `load_inline` call of a parsed candidate (`doc.tree` is set)."""
    assert doc.tree is not None
    tree = doc.tree
    diags: list[Diagnostic] = []
    recorded = dict(zip((id(n) for n in uses.spelled), doc.load_inline_calls, strict=True))
    for node in uses.calls:
        call = recorded.get(id(node))
        if call is not None:
            mapped = {(s.kind, s.index): s.span for s in call.sources if s.span is not None}
            functions = call.functions
        else:  # `li(...)` for `load_inline as li`: the document does not map it, its values are read here
            mapped, functions = {}, call_functions(tree, node)
        resolved = resolve_call_sources(tree, node)
        flag_diags, defines = build_flag_findings(doc, node)
        diags += flag_diags + functions_findings(doc, node)
        diags += _cpp_findings(doc, functions, mapped, resolved, level, low_ref, defines)
    return diags


def _cpp_findings(
    doc: Document,
    functions: Sequence[str] | None,
    mapped: dict[tuple[str, int], SourceSpan],
    resolved: ResolvedCall,
    level: Strictness,
    low_ref: bool,
    defines: tuple[tuple[str, str], ...] = (),
) -> list[Diagnostic]:
    """The C++ checks over every source of one call: mapped literals through their source map,
    sources computed from constants located on their expression, and `static.dynamic_source`
    for what the file does not fix (an undefined name is reported as one)."""
    sources: list[CppSource] = []
    diags: list[Diagnostic] = []
    dynamic_sev = Severity.WARNING if level is Strictness.LENIENT else Severity.ERROR
    for r in resolved.sources:
        span = mapped.get((r.kind, r.index))
        if span is not None:

            def locate(line: int, col: int, span: SourceSpan = span) -> Location:
                fl, fc = span.to_file(line, col)
                return Location(doc.path, fl, fc)

            sources.append(CppSource(span.text, locate, r.kind == "cuda", defines))
        elif r.text is not None:
            where = _fixed_locator(_node_location(doc.path, r.node))
            sources.append(CppSource(r.text, where, r.kind == "cuda", defines))
        else:
            diags.append(_dynamic_source(doc, r.node, f"this {r.kind} source", dynamic_sev, plural=False))
    for node in resolved.dynamic_args:
        diags.append(_dynamic_source(doc, node, "these `load_inline` sources", dynamic_sev, plural=True))
    if sources:
        diags += check_cpp_sources(
            sources,
            functions,
            level,
            reference_low_precision=low_ref,
            check_launches=resolved.is_complete,
        )
    return diags


def _fixed_locator(where: Location) -> Locator:
    """Every finding in a source without a character map lands on the expression that builds it."""

    def locate(_line: int, _col: int) -> Location:
        return where

    return locate


def _node_location(path: str, node: ast.AST) -> Location:
    return Location(path, getattr(node, "lineno", 1), getattr(node, "col_offset", 0) + 1)


def _dynamic_source(
    doc: Document, node: ast.AST, what: str, severity: Severity, *, plural: bool
) -> Diagnostic:
    """`what` names the source(s) as the message's subject; `plural` makes its verbs agree."""
    path = doc.path
    missing = undefined_names(node, doc.tree) if doc.tree is not None else []
    if missing:
        unique = list(dict.fromkeys(missing))
        names = ", ".join(f"`{n}`" for n in unique)
        subject = f"names {names} are" if len(unique) > 1 else f"name {names} is"
        return Diagnostic(
            Severity.ERROR,
            f"{subject} not defined in this file, so {what} cannot be read (and the file would "
            "fail with a NameError). Check the spelling against the variable that holds the source.",
            "static.dynamic_source",
            Stage.STATIC,
            _node_location(path, node),
        )
    tail = (
        " In `lenient` only the run-time checks judge it."
        if severity is Severity.WARNING
        else " Write the source as a string literal (module-level constants in f-strings are fine)."
    )
    is_, it_compiles, it = ("are", "they compile", "them") if plural else ("is", "it compiles", "it")
    return Diagnostic(
        severity,
        f"{what} {is_} built at run time (a call, a file, a variable the file does not fix): "
        f"the static checks cannot read the C++/CUDA {it_compiles}, so ATen calls, streams, "
        f"dispatcher overrides or file access could hide in {it}." + tail,
        "static.dynamic_source",
        Stage.STATIC,
        _node_location(path, node),
    )


# torch's `load_inline` parameters in order: a positional argument past `functions` binds by these.
TORCH_LOAD_INLINE_PARAMS = (
    "name",
    "cpp_sources",
    "cuda_sources",
    "sycl_sources",
    "functions",
    "extra_cflags",
    "extra_cuda_cflags",
    "extra_sycl_cflags",
    "extra_ldflags",
    "extra_include_paths",
)
_COMPILER_FLAGS = ("extra_cflags", "extra_cuda_cflags")
# torch joins the flags into the build's shell command line unquoted; outside these characters a
# flag could be shell syntax (`;`, `$(...)`, quotes, globs) that runs commands at build time.
_SAFE_FLAG_TEXT = re.compile(r"[A-Za-z0-9_\-=+.,:/@%^ \t]*")
# Quoting with plain text inside (`--compiler-options '-fPIC'`, as torch's own flags do): the shell
# only removes the quotes, so the flag is read as `shlex` splits it.
_QUOTED = re.compile(r"'[A-Za-z0-9_\-=+.,:/@%^ \t]*'|\"[A-Za-z0-9_\-=+.,:/@%^ \t]*\"")
_CODE_LIST = re.compile(r"code=\[[\w,]+\]")
# Flags that change nothing the checks read: optimisation, debug info, warnings, language standard,
# target architecture, floating-point modes, register and resource reports.
_PLAIN_FLAG = re.compile(
    r"-O[0-3sgz]?|-Ofast|-g[0-3]?|-G|-lineinfo|--generate-line-info|-w|-W(?![lap],)[\w\-=+]*|"
    r"-{1,2}std=(?:c|gnu)\+\+(?:17|1z|20|2a|23|2b|26|2c)|-m[\w\-=.]+|-pthread|-fPIC|-fpic|"
    r"-f(?:no-)?(?:fast-math|unroll-loops|unroll-all-loops|strict-aliasing|math-errno|finite-math-only|"
    r"omit-frame-pointer|inline-functions|tree-vectorize|exceptions|rtti|permissive|associative-math|"
    r"reciprocal-math|signed-zeros|trapping-math|diagnostics-color(?:=\w+)?|visibility=\w+|fp-contract=\w+)|"
    r"-{1,2}use_fast_math|-{1,2}expt-relaxed-constexpr|-{1,2}expt-extended-lambda|-{1,2}extended-lambda|"
    r"-{1,2}(?:ftz|prec-div|prec-sqrt|fmad)=(?:true|false)|-{1,2}maxrregcount=\d+|-{1,2}restrict|"
    r"-res-usage|--resource-usage|-{1,2}(?:arch|gpu-architecture|code|gpu-code)=[\w,]+|"
    r"-{1,2}(?:gencode|generate-code)=?arch=[\w]+,code=\[?[\w,]+\]?|-rdc=(?:true|false)|"
    r"--relocatable-device-code=(?:true|false)|-{1,2}threads=?\d*|-t=?\d+|-DNDEBUG|"
    r"-Xptxas=[\w\-=.,]+|--ptxas-options=[\w\-=.,]+|-Xcudafe=--diag_suppress=[\w,]+|"
    # warnings, optimisation levels and packaging only: no file read, no macro, no launch changed
    r"-{1,2}diag[-_](?:suppress|warn|error|default)=[\d,]+|-{1,2}disable-warnings|"
    r"-{1,2}extra-device-vectorization|-{1,2}allow-unsupported-compiler|-src-in-ptx|"
    r"-{1,2}optimize=[0-3]|-dopt=(?:on|off)|-Xfatbin=-compress-all"
)
# Flags whose next argument is part of them (`-arch sm_90`, `-Xptxas -v`, `-Xcompiler -O3`).
_TAKES_ARGUMENT = frozenset(
    {
        "-arch",
        "--gpu-architecture",
        "-code",
        "--gpu-code",
        "-gencode",
        "--generate-code",
        "--maxrregcount",
        "-maxrregcount",
        "--threads",
        "-t",
        "-Xptxas",
        "--ptxas-options",
        "-Xcudafe",
        "-Xcompiler",
        "--compiler-options",
        "-D",
        "--define-macro",
        "-std",
        "--std",
        "-diag-suppress",
        "--diag-suppress",
        "-Xfatbin",
    }
)
_PTXAS_OPTION = re.compile(
    r"-v|--verbose|-O[0-3]|-dlcm=\w+|-dscm=\w+|--warn-on-[\w-]+|--allow-expensive-optimizations(?:=\w+)?|"
    r"-{1,2}maxrregcount=\d+|--def-load-cache=\w+|--def-store-cache=\w+|-warn-spills|-warn-lmem-usage"
)
_INCLUDE_FLAG = re.compile(
    r"-(?:I|isystem|iquote|idirafter|isysroot|-include-path|-system-include|-sysroot)(?![a-z])"
)
_PREINCLUDE_FLAG = re.compile(r"-(?:include|imacros|-pre-include|-options-file|optf)(?![a-z])|@")
_UNDEF_FLAG = re.compile(r"-U|--undefine-macro")
# torch's own command line defines these (`-D__CUDA_NO_HALF_OPERATORS__` …), and half-precision
# kernels undefine them to get `cuda_fp16.h`'s operators back: they switch nothing but those
# operators on, so `-U` of them is no blind spot. Any other `-U` is refused.
_TORCH_UNDEFINES = frozenset(
    {
        "__CUDA_NO_HALF_OPERATORS__",
        "__CUDA_NO_HALF_CONVERSIONS__",
        "__CUDA_NO_HALF2_OPERATORS__",
        "__CUDA_NO_BFLOAT16_CONVERSIONS__",
        "__CUDA_NO_BFLOAT16_OPERATORS__",
        "__CUDA_NO_BFLOAT162_OPERATORS__",
    }
)
# Linker flags: libraries and their search paths keep whatever policy holds for what the sources
# call; anything that binds or renames symbols is interposition, anything else cannot be modelled.
_LINK_PLAIN = re.compile(r"-l[\w.+\-]+|-L[\w.+\-/@%:]+|-pthread|-O[0-3]?|-s|-shared")
_LINK_WL_PLAIN = re.compile(
    r"-rpath|-R|--as-needed|--no-as-needed|-O[0-3]|--gc-sections|-z,?(?:now|relro|defs)"
)
_LINK_FILE = re.compile(r"\.(?:so|o|a|ld|lds|x|map|def|sym)(?:\.\d+)*$")
_LINK_REBIND = re.compile(
    r"-{1,2}wrap\b|-{1,2}defsym\b|-{1,2}just-symbols\b|-R\S*\.(?:so|o|a)\b|-T\S*|-{1,2}script\b|"
    r"-{1,2}(?:dynamic-list|version-script|export-dynamic-symbol|undefined|entry|init|fini|alias)\b|"
    r"-Bsymbolic\w*|-z,?interpose|--unresolved-symbols\b|-[ue]\b|--(?:no-)?whole-archive\b"
)


@dataclass
class _FlagReader:
    """The findings and `-D` macros of one `load_inline` call's flag lists."""

    doc: Document
    diags: list[Diagnostic] = field(default_factory=list)
    defines: list[tuple[str, str]] = field(default_factory=list)

    def refuse(self, node: ast.AST, code: str, message: str) -> None:
        self.diags.append(
            Diagnostic(Severity.ERROR, message, code, Stage.STATIC, _node_location(self.doc.path, node))
        )

    def cannot_model(self, node: ast.AST, kw: str, flag: str, why: str) -> None:
        self.refuse(
            node,
            "static.dynamic_source",
            f"`{flag}` in `{kw}`: {why} The static checks read only the sources, so what this flag "
            "makes the compiler do is unseen (a macro could turn a harmless name into an ATen call). "
            "Use only the usual optimisation and architecture flags (`-O3`, `--use_fast_math`, "
            "`-arch=sm_90`, `-D NAME=VALUE`), or drop it.",
        )

    def compiler_flags(self, node: ast.AST, kw: str, tokens: list[str], nvcc: bool) -> None:
        i = 0
        while i < len(tokens):
            tok = tokens[i]
            nxt = tokens[i + 1] if i + 1 < len(tokens) else ""
            if tok in _TAKES_ARGUMENT and nxt:
                i += 1
                tok_arg = nxt
            else:
                tok_arg = None
            i += 1
            if tok_arg is not None:
                if tok in ("-Xcompiler", "--compiler-options"):
                    self.compiler_flags(node, kw, tok_arg.split(","), nvcc=False)
                elif tok in ("-D", "--define-macro"):
                    self.define(tok_arg, nvcc)
                elif tok in ("-Xptxas", "--ptxas-options"):
                    bad = [o for o in tok_arg.split(",") if not _PTXAS_OPTION.fullmatch(o)]
                    if bad:
                        self.cannot_model(
                            node, kw, f"{tok} {tok_arg}", "an assembler option the checks do not know."
                        )
                elif tok == "-Xcudafe":
                    if not re.fullmatch(r"--diag_suppress=[\w,]+", tok_arg):
                        self.cannot_model(
                            node, kw, f"{tok} {tok_arg}", "a front-end option the checks do not know."
                        )
                elif not _PLAIN_FLAG.fullmatch(f"{tok}={tok_arg}"):
                    self.cannot_model(
                        node, kw, f"{tok} {tok_arg}", "a compiler flag the checks cannot model."
                    )
                continue
            if tok.startswith(("-Xcompiler=", "--compiler-options=")):
                self.compiler_flags(node, kw, tok.split("=", 1)[1].split(","), nvcc=False)
            elif tok.startswith("--define-macro="):
                self.define(tok.split("=", 1)[1], nvcc)
            elif tok.startswith("-D") and len(tok) > 2:
                self.define(tok[2:], nvcc)
            elif re.sub(r"^(?:-U|--undefine-macro=?)", "", tok) in _TORCH_UNDEFINES:
                continue
            elif _UNDEF_FLAG.match(tok):
                self.cannot_model(
                    node,
                    kw,
                    tok,
                    "it undefines a macro for the whole compile, which the checks cannot "
                    "follow (they read the sources' own `#define`/`#undef`). Use `#undef` in the source.",
                )
            elif _PREINCLUDE_FLAG.match(tok):
                self.cannot_model(
                    node,
                    kw,
                    tok,
                    "it makes the compiler read a file (or a list of flags from a file) "
                    "before the source, and the checks never see that file. Put the code in the source.",
                )
            elif _INCLUDE_FLAG.match(tok):
                self.cannot_model(
                    node,
                    kw,
                    tok,
                    "it adds a directory of headers the checks cannot read; code `#include`d "
                    "from it is compiled unseen. Keep the code in the sources.",
                )
            elif tok in _TAKES_ARGUMENT:
                self.cannot_model(node, kw, tok, "it expects an argument and has none.")
            elif not _PLAIN_FLAG.fullmatch(tok):
                self.cannot_model(node, kw, tok, "a compiler flag the checks cannot model.")

    def define(self, text: str, nvcc: bool) -> None:
        """`NAME`, `NAME=VALUE`, `F(x)=BODY`: `#define NAME 1`, `#define NAME VALUE`, `#define F(x) BODY`;
        nvcc also reads `A=1,B=2` as two definitions, so both readings count."""
        readings = [text]
        if nvcc and "," in text:
            readings += text.split(",")
        for r in readings:
            head, eq, body = r.partition("=")
            self.defines.append((head, body if eq else "1"))

    def linker_flags(self, node: ast.AST, kw: str, tokens: list[str]) -> None:
        i = 0
        while i < len(tokens):
            tok = tokens[i]
            i += 1
            parts: list[str]
            if tok.startswith("-Wl,"):
                parts = tok[4:].split(",")
            elif tok in ("-Xlinker", "--linker-options") and i < len(tokens):
                parts = tokens[i].split(",")
                i += 1
            elif _LINK_PLAIN.fullmatch(tok):
                continue
            else:
                parts = [tok]
            rebind = next((p for p in parts if _LINK_REBIND.match(p)), None)
            if rebind is not None:
                self.refuse(
                    node,
                    "static.timer_patch",
                    f"`{tok}` in `{kw}`: the linker option `{rebind}` binds or renames symbols (`--wrap` "
                    "makes `__real_<name>` call any library function, `--defsym` aliases one name to "
                    "another, a linker script or `--just-symbols` places them anywhere), so a harmless "
                    "name in the source can call ATen or a timing function. Link libraries with "
                    "`-l<name>`/`-L<dir>` only.",
                )
            elif parts == [tok] or not all(
                _LINK_WL_PLAIN.fullmatch(p) or (p.startswith("/") and not _LINK_FILE.search(p)) for p in parts
            ):
                self.refuse(
                    node,
                    "static.dynamic_source",
                    f"`{tok}` in `{kw}`: a linker flag or input the checks cannot model (an object, a "
                    "library file or an option that changes what the extension's names bind to). Link "
                    "libraries with `-l<name>`/`-L<dir>` only.",
                )


def call_argument(call: ast.Call, param: str) -> ast.expr | None:
    """The expression `call` passes for torch's `load_inline` parameter `param` (a keyword, or a
    positional argument past `functions`), None when absent or `None`."""
    expr = next((k.value for k in call.keywords if k.arg == param), None)
    at = TORCH_LOAD_INLINE_PARAMS.index(param)
    if expr is None and at >= 5 and at < len(call.args):
        expr = call.args[at]
    if expr is None or (isinstance(expr, ast.Constant) and expr.value is None):
        return None
    return expr


def build_flag_findings(
    doc: Document, call: ast.Call
) -> tuple[list[Diagnostic], tuple[tuple[str, str], ...]]:
    """The findings over one call's build flags, and the macros its `-D` flags define.

    `extra_cflags`/`extra_cuda_cflags`: `-D NAME=VALUE` is a `#define` at the top of every source (both
    lists, for every source: a HIP build gives `extra_cflags` to the device compiler too);
    `-U`, `-include`, `-imacros`, include directories and any flag outside the usual optimisation and
    architecture ones are refused (`static.dynamic_source`), as is a flag with shell syntax
    (`static.cpp_file_or_process`: the build runs the flags through a shell). `extra_ldflags`:
    `-l<lib>`/`-L<dir>` pass; symbol rebinding (`--wrap`, `--defsym`, linker scripts) is
    `static.timer_patch`; other linker inputs are refused. `extra_include_paths` and `sycl_sources`
    name code the checks cannot read. A flag list the file does not fix is refused."""
    assert doc.tree is not None
    env = ModuleConstants(doc.tree, enclosing_function(doc.tree, call), reader=call)
    reader = _FlagReader(doc)
    for kw in (*_COMPILER_FLAGS, "extra_ldflags", "extra_include_paths", "sycl_sources"):
        expr = call_argument(call, kw)
        if expr is None:
            continue
        node = env.definition(expr)
        if kw == "sycl_sources":
            reader.refuse(
                node,
                "static.dynamic_source",
                "`sycl_sources`: the static checks read only `cpp_sources` and `cuda_sources`, so code "
                "compiled from these is unseen. Write the kernels in `cuda_sources`.",
            )
            continue
        value = env.value(expr)
        flags = [value] if isinstance(value, str) else value
        if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
            reader.refuse(
                node,
                "static.dynamic_source",
                f"`{kw}` is not fixed by the file (a call, a variable assigned at run time): the static "
                "checks cannot read the flags the compiler receives, and a flag can define macros or "
                "include files that change what the sources mean. Write the flags as a literal list.",
            )
            continue
        if kw == "extra_include_paths":
            if any(str(f).strip() for f in flags):
                reader.refuse(
                    node,
                    "static.dynamic_source",
                    f"`extra_include_paths={flags!r}`: headers from these directories are compiled "
                    "but never read by the static checks. Keep the code in the sources.",
                )
            continue
        tokens: list[str] = []
        for f in flags:
            f = str(f)
            # `code=[sm_80,compute_80]` (nvcc's list form): a glob that can only match a one-letter
            # file of the build folder, and nvcc reads the list either way
            if not _SAFE_FLAG_TEXT.fullmatch(_CODE_LIST.sub("code=", _QUOTED.sub("", f))):
                reader.refuse(
                    node,
                    "static.cpp_file_or_process",
                    f"`{f}` in `{kw}`: torch writes the flags into the build's shell command line "
                    "unquoted, so `;`, `$`, `&`, `|`, `#`, backquotes, globs or quotes around any of them "
                    "are shell syntax that can run programs at build time. Use plain flags.",
                )
                continue
            tokens += shlex.split(f)
        if kw == "extra_ldflags":
            reader.linker_flags(node, kw, tokens)
        else:
            reader.compiler_flags(node, kw, tokens, nvcc=kw == "extra_cuda_cflags")
    return reader.diags, tuple(reader.defines)


_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")


def functions_findings(doc: Document, call: ast.Call) -> list[Diagnostic]:
    """`functions=` entries must be plain C identifiers: `load_inline` writes each into the generated
    binding as C++ code (`m.def("<entry>", <entry>, "<docstring>")`), so `at::relu` binds ATen's op
    and any other text is code the checks never read; a dict's docstrings are pasted into a C++
    string literal. A `functions=` the file does not fix is refused the same way."""
    assert doc.tree is not None
    expr = next((k.value for k in call.keywords if k.arg == "functions"), None)
    if expr is None and len(call.args) > 3:
        expr = call.args[3]  # cudice's `load_inline` (and the document) read the fourth as `functions`
    if expr is None or (isinstance(expr, ast.Constant) and expr.value is None):
        return []
    env = ModuleConstants(doc.tree, enclosing_function(doc.tree, call), reader=call)
    node = env.definition(expr)
    entries: list[tuple[str, str | None]] = []
    value = env.value(expr)
    if isinstance(value, str):
        entries = [(value, None)]
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        entries = [(str(v), None) for v in value]
    elif isinstance(node, ast.Dict) and None not in node.keys:
        keys = [env.value(k) for k in node.keys if k is not None]
        docs = [env.value(v) for v in node.values]
        if all(isinstance(k, str) for k in keys) and all(isinstance(d, str) for d in docs):
            entries = [(str(k), str(d)) for k, d in zip(keys, docs, strict=True)]
    if not entries and not (isinstance(value, list) and not value):
        return [
            Diagnostic(
                Severity.ERROR,
                "`functions=` is not fixed by the file: `load_inline` writes its entries into the "
                "generated C++ binding, which the static checks then cannot read. Write the names as a "
                "literal list.",
                "static.dynamic_source",
                Stage.STATIC,
                _node_location(doc.path, node),
            )
        ]
    diags: list[Diagnostic] = []
    for name, docstring in entries:
        if not _IDENTIFIER.fullmatch(name):
            qualified = "::" in name
            diags.append(
                Diagnostic(
                    Severity.ERROR,
                    f"`functions=` entry {name!r} is not a plain C++ identifier: `load_inline` writes "
                    f'`m.def("{name}", {name})` into the generated binding, so '
                    + (
                        "a qualified name binds a library function (`at::relu` is ATen's op) for Python "
                        "to call, and PyTorch does the work, not the candidate's kernel."
                        if qualified
                        else "the entry is C++ code the static checks never read."
                    )
                    + " List only the names of the candidate's own host functions.",
                    "static.cpp_torch_op" if qualified else "static.dynamic_source",
                    Stage.STATIC,
                    _node_location(doc.path, node),
                )
            )
        if docstring is not None and re.search(r'["\\\n]', docstring):
            diags.append(
                Diagnostic(
                    Severity.ERROR,
                    f"the docstring {docstring!r} of `functions=` entry `{name}` holds a quote, a "
                    "backslash or a line break: `load_inline` pastes it into a C++ string literal of the "
                    "generated binding, where it can end the string and add code the checks never read. "
                    "Use plain text.",
                    "static.dynamic_source",
                    Stage.STATIC,
                    _node_location(doc.path, node),
                )
            )
    return diags
