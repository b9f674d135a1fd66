"""Static anti-cheat checks over a candidate's C++/CUDA source text (no compiler, regex + braces).

`check_cpp_sources()` is the entry point: it reads each source as the compiler's first phases do
(line splices, comments and strings blanked, digraphs, the file's own and the command line's macros
expanded: `static/cpp_scan.py`, `static/cpp_preprocess.py`), applies the pattern rules
to every source and to each other reading of a macro defined in several `#if` branches
(`static/cpp_rules.py`: streams, threads, sleeps, interposition, dispatcher registrations,
file/process APIs, caches, ATen calls and operators on tensors, vendor-library and Python calls),
warns about half precision, and — here — checks that every `__global__` kernel is launched from a host
function Python can reach
(`static.kernel_never_launched`; roots are `functions=`, else `PYBIND11_MODULE`'s `m.def`, else
every host function). The call graph follows every spelling of a call (`calls_function`):
explicit and nested template arguments (`launch_relu<scalar_t>(...)`, `f<Vec<std::pair<int, int>>>(...)`),
`::`/namespace qualification, calls inside lambdas given to macros (KernelBench's
`AT_DISPATCH_FLOATING_TYPES(..., [&] { launch_relu<scalar_t>(...); })`), the file's own macros
expanded, and a function taken as a value (`&launch<float>`, `std::invoke(launch<float>, ...)`).
Function templates are found with default template arguments and as explicit specialisations;
overloads and specialisations share their name, and all of them count. A kernel passed by name
to a host function that launches that parameter (`template <class K, class... A> void launch(K k,
...) { k<<<g, b>>>(...); }`) counts as launched; a launch of a name that is no kernel, parameter or
local (`relu_kernl<<<...>>>`) is reported where it is written, instead of calling the kernel it
misspells a decoy.

Member functions count like free functions: one defined outside its class (`void
Launcher::run(...)`) or inside it (`struct Launcher { void run(...) {...} };`, `static/cpp_scan.py`)
is reached by its name (`obj.run(...)`, `Launcher{256}.run(...)`, `&Launcher::run` in a pybind
`.def`), a functor's `operator()` and a constructor when a reachable function names their class
(`ReluLaunch{}(x, out)`).

What it does not do: tell overloads or template instantiations apart (a call of any of them
reaches all, and a member is reached by its name whatever object it is called on), follow calls
through function pointers stored in variables other than by name, see macros from headers, or
read members of local or anonymous classes; a kernel launched only from another kernel (dynamic
parallelism) counts as not launched. Those cases are what the
dynamic profiler check (`run/dynamic_checks.py`) is for.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Sequence

from cudice.verifier.source.result import Diagnostic, Severity
from cudice.verifier.static.cpp_rules import LOW_PRECISION, defined_names, pattern_findings
from cudice.verifier.static.cpp_scan import (
    CppFunction,
    CppSource,
    Locator,
    Unit,
    blank_comments_and_strings,
    defined_kernel_names,
    diag,
    find_functions,
    find_kernels,
    scan_blocks,
    strip_template_prefix,
)
from cudice.verifier.static.policy import Strictness

__all__ = [
    "CppFunction",
    "CppSource",
    "Locator",
    "blank_comments_and_strings",
    "check_cpp_sources",
    "defined_kernel_names",
    "exposed_cpp_names",
    "find_functions",
    "find_kernels",
    "pybind_class_names",
    "pybind_python_names",
]


def check_cpp_sources(
    sources: Sequence[CppSource],
    exposed: Sequence[str] | None,
    level: Strictness,
    *,
    reference_low_precision: bool = False,
    check_launches: bool = True,
) -> list[Diagnostic]:
    """All C++/CUDA findings for the sources of one candidate (all `load_inline` calls together).

    `exposed` is the `functions=` list (None when absent). A kernel counts as launched when a
    host function reachable from an exposed one contains `kernel<<<` or a `cudaLaunch*` naming it.
    `check_launches=False` skips that (raw `.cu` kernels are launched by the harness; sources that
    are partly built at run time cannot be judged). In a C++ source (`is_cuda=False`, built by the
    host compiler) every function is host code, `__device__` or not.
    """
    units = [Unit.of(s) for s in sources]
    for u in units:
        u.functions, u.blocks = scan_blocks(u.code)
        if not u.src.is_cuda:  # the host compiler reads `__device__` as an ignored attribute: host code
            u.functions = [dataclasses.replace(f, is_device=False) for f in u.functions]
    known = defined_names(units)
    diags: list[Diagnostic] = []
    for u in units:
        diags += pattern_findings(u, level, known)
        seen = {(d.code, d.location) for d in diags}
        for v in u.variants():  # a macro defined in both branches of an `#if`: each reading counts
            v.functions, v.blocks = scan_blocks(v.code)
            if not u.src.is_cuda:
                v.functions = [dataclasses.replace(f, is_device=False) for f in v.functions]
            for d in pattern_findings(v, level, known):
                if (d.code, d.location) not in seen:
                    seen.add((d.code, d.location))
                    diags.append(d)
        if not reference_low_precision:
            m = _low_precision(u.code)
            if m:
                diags.append(
                    diag(
                        u,
                        m.start(),
                        "static.precision_downgrade",
                        f"`{m.group(0)}`: half-precision arithmetic in a kernel for a float32 reference; "
                        "the result may pass the tolerance while computing less precisely (and faster) "
                        "than asked.",
                        Severity.WARNING,
                    )
                )
    if check_launches:
        diags += _launch_findings(units, exposed, level)
    return diags


_DISPATCH_CALL = re.compile(r"\bAT_DISPATCH_\w*\s*\(")


def _low_precision(code: str) -> re.Match[str] | None:
    """The first half-precision use, leaving out `at::kHalf`-style dtype names given to an
    `AT_DISPATCH_*` macro: they add the types the kernel is instantiated for (it still computes
    in the input's dtype), so an honest `AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, ...)` is no
    downgrade."""
    spans = []
    for d in _DISPATCH_CALL.finditer(code):
        depth, i = 1, d.end()
        while i < len(code) and depth:
            depth += {"(": 1, ")": -1}.get(code[i], 0)
            i += 1
        spans.append((d.end(), i))
    for m in LOW_PRECISION.finditer(code):
        if "::k" in m.group(0) and any(a <= m.start() < b for a, b in spans):
            continue
        return m
    return None


def _launches(body: str, kernel: str) -> bool:
    k = re.escape(kernel)
    if re.search(rf"\b{k}\b[^;{{}}]*?<<<", body):
        return True
    return re.search(rf"\b(?:cudaLaunch\w*|cuLaunch\w*)\s*\([^;]*\b{k}\b", body) is not None


# `<float>`, `<void (*)(float*)>`, `<std::pair<int, int>>`: template arguments, one level of nesting
_TEMPLATE_ARGS = r"<(?:[^;{}()<>]|\([^;{}()]*\)|<[^;{}()<>]*>)*>"
_LAUNCH_SITE = re.compile(r"\b([A-Za-z_]\w*)\s*(?:<[^;{}()<>]*>\s*)?<<<")


def _param_names(header: str) -> list[str]:
    """Parameter names of a function header `... name(T a, U* b = 0, A... rest)`, in order."""
    header = strip_template_prefix(header)
    open_paren = header.find("(")
    if open_paren < 0:
        return []
    depth, start, params = 0, open_paren + 1, []
    for i in range(open_paren, len(header)):
        ch = header[i]
        if ch in "(<[":
            depth += 1
        elif ch in ")>]":
            depth -= 1
            if depth == 0 and ch == ")":
                params.append(header[start:i])
                break
        elif ch == "," and depth == 1:
            params.append(header[start:i])
            start = i + 1
    names = []
    for p in params:
        ids = re.findall(r"[A-Za-z_]\w*", p.split("=")[0])
        names.append(ids[-1] if ids else "")
    return names


def _launched_params(header: str, code: str, f: CppFunction) -> set[int] | None:
    """Positions of the parameters a host function launches (`template <class K> void launch(K k, ...)
    { k<<<...>>>(...); }`), or None when it launches none of them."""
    body = code[f.body_start : f.body_end]
    idx = {i for i, p in enumerate(_param_names(header)) if p and _launches(body, p)}
    return idx or None


_LAMBDA = re.compile(r"\bauto\s*&?\s*([A-Za-z_]\w*)\s*=\s*\[[^\]]*\]\s*(\([^)]*\))[^{;]*\{")


def _lambda_launchers(code: str) -> dict[str, set[int]]:
    """Lambdas bound to a name that launch one of their parameters, with those parameters' positions."""
    out: dict[str, set[int]] = {}
    for m in _LAMBDA.finditer(code):
        depth, end = 0, len(code)
        for i in range(m.end() - 1, len(code)):
            depth += {"{": 1, "}": -1}.get(code[i], 0)
            if depth == 0:
                end = i + 1
                break
        body = code[m.end() - 1 : end]
        idx = {i for i, p in enumerate(_param_names(m.group(2))) if p and _launches(body, p)}
        if idx:
            out[m.group(1)] = idx
    return out


def _passed_to_launcher(body: str, kernel: str, launchers: dict[str, set[int]]) -> bool:
    """`launch(relu_kernel, grid, block, ...)` where `launch` launches that parameter."""
    for name, positions in launchers.items():
        for m in re.finditer(rf"\b{re.escape(name)}\s*(?:{_TEMPLATE_ARGS}\s*)?\(", body):
            args = _call_args(body, m.end() - 1)
            for i in positions:
                if i < len(args) and re.fullmatch(
                    rf"&?\s*{re.escape(kernel)}\s*(?:{_TEMPLATE_ARGS})?", args[i].strip()
                ):
                    return True
    return False


def _call_args(text: str, open_paren: int) -> list[str]:
    depth, start = 0, open_paren + 1
    args: list[str] = []
    for i in range(open_paren, min(len(text), open_paren + 4000)):
        ch = text[i]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                return [*args, text[start:i]]
        elif ch == "," and depth == 1:
            args.append(text[start:i])
            start = i + 1
    return args


def _undefined_launches(
    host: dict[str, list[tuple[Unit, CppFunction]]], reachable: set[str], kernels: set[str]
) -> list[Diagnostic]:
    """`relu_kernl<<<...>>>` where no kernel, parameter or local of that name exists: the launch of a
    kernel that is not defined (the compiler will reject it), reported where it is written."""
    diags: list[Diagnostic] = []
    for u, f in (d for h in sorted(reachable) for d in host[h]):
        body = u.code[f.body_start : f.body_end]
        text = f.header + " " + body
        for m in _LAUNCH_SITE.finditer(body):
            name = m.group(1)
            if name in kernels or name in host or len(re.findall(rf"\b{re.escape(name)}\b", text)) > 1:
                continue  # a kernel, or a name declared elsewhere here (a parameter, a local, a lambda's)
            close = difflib.get_close_matches(name, sorted(kernels), n=1)
            hint = f" Did you mean `{close[0]}`?" if close else ""
            diags.append(
                diag(
                    u,
                    f.body_start + m.start(),
                    "static.kernel_never_launched",
                    f"launches `{name}`, which is not defined in these sources: no `__global__` function "
                    f"of that name exists, so this launch cannot run.{hint}",
                )
            )
    return diags


_PYBIND_DEF = re.compile(r"\.def\s*\(\s*\"(\w*)\"\s*,\s*&?\s*([\w:]+)")


def exposed_cpp_names(units: Sequence[Unit], functions: Sequence[str] | None) -> set[str]:
    """C++ function names Python can call: `functions=`, else `m.def(...)`, else all host functions."""
    if functions:
        return set(functions)
    names: set[str] = set()
    for u in units:
        for m in _PYBIND_DEF.finditer(u.code):
            names.add(m.group(2).split("::")[-1])
    if names:
        return names
    return {f.name for u in units for f in u.functions if not f.is_device}


def pybind_python_names(sources: Sequence[CppSource]) -> set[str]:
    """Python-side names bound with `m.def("name", ...)` (used when `functions=` is absent)."""
    names: set[str] = set()
    for s in sources:
        names.update(m.group(1) for m in _PYBIND_DEF.finditer(blank_comments_and_strings(s.text)))
    return names


_PYBIND_CLASS = re.compile(r"\bclass_\s*<[^;{}()]*>\s*\(\s*[A-Za-z_]\w*\s*,\s*\"([^\"\n]*)\"")


def pybind_class_names(sources: Sequence[CppSource]) -> set[str]:
    """Python-side names of the classes a `PYBIND11_MODULE` binds (`py::class_<ReluOp>(m, "ReluOp")`):
    calling one on the extension (`ext.ReluOp()`) builds an object whose methods are the extension's."""
    names: set[str] = set()
    for s in sources:
        for m in _PYBIND_CLASS.finditer(blank_comments_and_strings(s.text)):
            names.add(s.text[m.start(1) : m.end(1)])
    return {n for n in names if n.isidentifier()}


def _skip_template_args(text: str, i: int) -> int:
    """The offset just past the template argument list that opens at `text[i] == "<"` (nested
    brackets, parenthesised expressions such as `(N > 2)`), or -1 when none closes before a `;`,
    `{` or `}` (then `<` is a comparison)."""
    depth = 0
    while i < len(text):
        ch = text[i]
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
            if depth == 0:
                return i + 1
        elif ch == "(":
            depth_p, j = 0, i
            while j < len(text):
                depth_p += {"(": 1, ")": -1}.get(text[j], 0)
                if depth_p == 0 or text[j] in ";{}":
                    break
                j += 1
            if depth_p:
                return -1
            i = j
        elif ch in ";{})":
            return -1
        i += 1
    return -1


def calls_function(body: str, name: str) -> bool:
    """Whether `body` calls the function `name` or takes it as a value, however the call is spelt:
    `f(...)`, `f<float>(...)`, `f<scalar_t, 4>(...)`, `f<std::pair<int, int>>(...)`, `ns::f<T>(...)`,
    `this->template f<T>(...)`, inside a lambda given to a macro (`AT_DISPATCH_*(..., [&] { f<scalar_t>(...);
    })`), or as a function pointer (`&f<float>`, `std::invoke(f<float>, ...)`). Which overload or
    instantiation runs is not resolved: any spelling of the name counts."""
    for m in re.finditer(rf"\b{re.escape(name)}\b", body):
        i = m.end()
        while i < len(body) and body[i].isspace():
            i += 1
        if i < len(body) and body[i] == "<":
            end = _skip_template_args(body, i)
            if end < 0:
                continue
            i = end
            while i < len(body) and body[i].isspace():
                i += 1
        if i < len(body) and body[i] == "(":
            return True
        before = body[max(0, m.start() - 200) : m.start()].rstrip()
        before = re.sub(r"(?:[A-Za-z_]\w*\s*::\s*)+$", "", before).rstrip()  # `&ns::f`
        if before.endswith("&") or (before[-1:] in ("(", ",", "=") and body[i : i + 1] in (")", ",", ";")):
            return True
    return False


def _host_functions(units: Sequence[Unit]) -> dict[str, list[tuple[Unit, CppFunction]]]:
    """Host functions by name; overloads and template specialisations share a name, and all count.
    A member function defined in its class body is listed under its own name (`obj.run(...)` calls
    `run`), except a functor's `operator()` and a constructor or destructor, listed as `C::operator()`
    and `C::C` (`_reaches` says what calls them)."""
    host: dict[str, list[tuple[Unit, CppFunction]]] = {}
    for u in units:
        for f in u.functions:
            if not f.is_device:
                key = f.qualname if f.cls and f.name in ("operator()", f.cls) else f.name
                host.setdefault(key, []).append((u, f))
    return host


def _reaches(body: str, key: str) -> bool:
    """Whether `body` calls the host function listed as `key` (`_host_functions`): `C::operator()` and
    `C::C` when the body names the class `C` (`C{}(x)`, `C f; f(x)`, `C obj(256)`: which member of it
    runs is not resolved), any other by `calls_function`."""
    cls, sep, member = key.rpartition("::")
    if sep and (member == "operator()" or member == cls):
        return re.search(rf"\b{re.escape(cls)}\b", body) is not None
    return calls_function(body, key)


def reachable_host_functions(host: dict[str, list[tuple[Unit, CppFunction]]], roots: set[str]) -> set[str]:
    """Names of the host functions `roots` call, directly or through other host functions
    (`calls_function`: explicit template arguments, qualified names, lambdas given to macros)."""
    reachable: set[str] = set()
    todo = [r for r in roots if r in host]
    while todo:
        name = todo.pop()
        if name in reachable:
            continue
        reachable.add(name)
        for u, f in host[name]:
            body = u.code[f.body_start : f.body_end]
            todo += [g for g in host if g not in reachable and _reaches(body, g)]
    return reachable


def _launch_findings(
    units: Sequence[Unit], exposed: Sequence[str] | None, level: Strictness
) -> list[Diagnostic]:
    host = _host_functions(units)
    reachable = reachable_host_functions(host, exposed_cpp_names(units, exposed))
    kernels = [(u, name, off) for u in units for name, off in find_kernels(u.code)]
    # A launch hidden in a macro (`#define LAUNCH(k) k<<<g, b>>>(...)`) cannot be seen without a
    # preprocessor: then a kernel named in a reachable host body counts as launched (no false alarm).
    macro_launch = any(
        re.search(r"^\s*#\s*define\b.*(?:<<<|cudaLaunch)", u.code, re.MULTILINE) for u in units
    )
    bodies = [u.code[f.body_start : f.body_end] for h in sorted(reachable) for u, f in host[h]]
    launchers: dict[str, set[int]] = {}
    for g, defs in host.items():
        for u, f in defs:
            if (idx := _launched_params(f.header, u.code, f)) is not None:
                launchers.setdefault(g, set()).update(idx)
    for u in units:  # `auto launch = [](auto k, dim3 g, dim3 b, auto... a) { k<<<g, b>>>(a...); };`
        launchers.update(_lambda_launchers(u.code))
    launched = {
        name
        for _, name, _ in kernels
        for body in bodies
        if _launches(body, name)
        or (macro_launch and re.search(rf"\b{re.escape(name)}\b", body))
        or _passed_to_launcher(body, name, launchers)
    }
    kernel_names = {name for _, name, _ in kernels}
    diags = _undefined_launches(host, reachable, kernel_names)
    if diags:  # a misspelt launch explains the unlaunched kernel: say that, not "decoy"
        return diags
    any_launched = bool(launched)
    sev = Severity.ERROR if (level is Strictness.STRICT or not any_launched) else Severity.WARNING
    for u, name, off in kernels:
        if name in launched:
            continue
        diags.append(
            diag(
                u,
                off,
                "static.kernel_never_launched",
                f"kernel `{name}` is defined but no host function that Python can call launches it"
                + ("" if any_launched else " (no kernel of this file is launched at all)")
                + ": a decoy kernel does none of the work. Launch it with `<<<...>>>` from a function listed "
                "in `functions=`.",
                sev,
            )
        )
    return diags
