"""The full build: what `load_inline` does, with torch's own flags, but faster and cancellable.

Levers: an explicit arch list (`-gencode arch=compute_90,code=sm_90` via TORCH_CUDA_ARCH_LIST);
one directory per content hash (no shared build directory to race on,
https://github.com/pytorch/pytorch/issues/155344); an object-level cache (build/objects.py) so an
unchanged source never rebuilds, an edit of the CUDA string recompiles only `cuda.cu`, and
candidates sharing a module name and C++ declarations share `main.o` (errors are cached too:
same text, same errors); the C++ and CUDA objects compile in parallel and both report their
errors; compile-only mode stops before linking (machines without a CUDA torch).

Fast path (build/headers.py): each object is first compiled against a slim set of torch's
own headers (the torch/extension.h of the full build parses the whole C++ frontend, autograd
and pybind11; the slim set keeps `at::Tensor`, the factories, the checks and dispatch macros).
An object whose slim compile fails is compiled again with the full headers, and only that
outcome counts, so an error and its location are the full build's; a slim object that
compiled is kept (the slim headers are a subset of the full ones: what compiles against them
compiles against the full set, `slim_blocker` sends the lookups where that could fail to the
full build). One exception keeps an error verdict as fast as a good build: a slim failure
whose every error is structural (a missing `;`, `)` or `}`, an extra `}`, a stray character,
an unterminated string), located in the generated file itself, in a file that names no macro
the two header sets define differently (`slim_errors_stand`), is the verdict without the full
rebuild: both builds read the same tokens there, and a declaration the slim set lacks shows
as a lookup, type or overload error, never as a structural one alone, so the full build
reports the same errors at the same places. An undeclared name (`identifier "vv" is
undefined`, g++'s `'vv' was not declared in this scope`) stands too when no full header spells
it at a scope a lookup could search (headers.full_header_names: the full headers
preprocessed, their namespace/class/enum-scope words and macro names) and it sits where it can
only be read: a name that no header declares is undeclared in the full build as well, with the
same message (details and limits in `slim_errors_stand`). So do the user's own `#error` lines,
and any error (a type error, a redefinition, a wrong argument count) inside file-scope
declarations where every name is the user's own, a local, a keyword or a CUDA built-in, and
every declaration of those names is such too (`_only_user_declarations`: a header cannot
declare, overload or hide a name it never spells). So does nvcc's "too few/many arguments in
function call" at a launch or call of the user's own function that no header spells, declared
once, whose parameter and argument lists split the same way under any reading of the names
around them, also inside a host function that takes tensors (`_arity_error_stands`). Every other
failure (names the full headers spell, qualified or member names, no member, incomplete types,
overloads, templates, errors in headers, other errors in host functions that take tensors) still
gets the full rebuild.
The macro comparison and the name list cost a few preprocessor runs (seconds of CPU, run side
by side: `_fill_lists`; docs/benchmarks.md) the first time per toolchain and set of `#include`
lines, then are read from the overlay folder. `prepare_error_lists` computes them ahead for a
module's include sets (api.prepare_first_error, which the editor's verify workers run when idle);
a set cancel token stops it and a build's own computation, killing the preprocessors as a group.
CUDA-library headers missing on this machine (a CPU-only torch, a minimal CUDA toolkit) are
replaced by stand-ins searched last; when a failure comes from what they lack,
the result is `undecided` (compile.headers_unavailable), never a compile error.

Symbols (build/host_symbols.py): after a successful compile, the undefined symbols of the
candidate's host objects name what it calls whatever the spelling (`at::_ops::relu::call` for any
spelling of `at::relu`); ATen compute ops, torch modules and threads there are static findings
(`BuildResult.violation`). Only builds that link have objects to read: a compile-only check
writes none (building them cost ~5 s more on examples/relu_cuda.py, ~50 %), so it relies on the
source rules alone; `VerifyConfig.host_symbols=False` skips the symbol check.

Binding (build/cabi.py): a module whose `cpp_sources` only declare the bound functions is built as
`cuda.cu` plus a CPython C-API binding, without `main.cpp` and pybind11 (build_path
"cabi-fast" / "cabi-fallback"); a shim that fails to compile sends it to the pybind11 build.

Compiler messages are parsed (build/messages.py) and mapped through the generated files'
line map (build/generated.py) into the `.py` document (so are the lines nvcc quotes: "previous
definition at line N"); messages on lines cudice wrote (implicit headers, pybind glue) or in
unmappable sources point at the `load_inline` call.

Not covered: errors about the user's own declarations where a header name is near (a type
error in a host function that takes `torch::Tensor`, a kernel calling `fmaxf`), and undeclared
names the full headers spell anywhere at an outer scope (also as a template argument or in a
class body), still pay the full rebuild; the macro
comparison takes nvcc's host pass as its device pass with `-U__CUDA_ARCH__` (not the exact
defines of cudafe's host pass; the name list undefines `CUDA_DOUBLE_MATH_FUNCTIONS` too, the
other define `nvcc --dryrun` shows only the device pass gets), and compares the macros at
the end of the includes, not at each line (a macro the full headers define and a user's later
`#include` also defines is checked before that include); ccache/sccache, precompiled headers
(gcc's PCH of torch/extension.h is huge and still slow per check; nvcc has none),
`extra_cflags` given in the call (not read from the document).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import shlex
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cudice.verifier.build.cabi import Signature, shim
from cudice.verifier.build.generated import CUDA_CU, MAIN_CPP, GeneratedModule, Piece
from cudice.verifier.build.headers import (
    HeaderNames,
    Overlay,
    aten_op_names,
    ensure_host_pch,
    ensure_overlay,
    full_header_names,
    include_dirs,
    macro_differences,
    slim_blocker,
    undecidable_reason,
)
from cudice.verifier.build.messages import CompilerMessage, caret_column, parse_messages
from cudice.verifier.build.objects import StepResult, compile_object, link_library, run_process
from cudice.verifier.build.toolchain import PROBE_NAME, Toolchain, ToolchainError, probe_toolchain
from cudice.verifier.config import VerifyConfig
from cudice.verifier.process import CancelToken
from cudice.verifier.source.document import Document
from cudice.verifier.source.result import Diagnostic, Location, Severity, Stage
from cudice.verifier.static.cpp_scan import blank_directives

OUTCOME = "cudice_outcome.json"


@dataclass(frozen=True, slots=True)
class BuildResult:
    """Outcome of building one generated module."""

    ok: bool
    build_dir: Path
    library: Path | None  # the linked .so (None in compile-only mode or on failure)
    diagnostics: tuple[Diagnostic, ...]
    output: str  # raw compiler output (full precision, for logs)
    wall_s: float
    cached: bool
    cancelled: bool = False
    timed_out: bool = False
    # "fast": every object's outcome is its slim compile (a failed one only when the full build's
    # errors would be the same: `slim_errors_stand`); "fallback": a slim object failed and was
    # rebuilt with the full headers; "full": no slim attempt (mode="full" or `slim_blocker` said why)
    build_path: str = "full"
    step_wall_s: dict[str, float] = field(
        default_factory=dict
    )  # "main.cpp", "cuda.cu", "slim.<file>", "link"
    undecided: bool = False  # failed only for want of CUDA headers this machine lacks (build/headers.py)
    slim_blocker: str | None = None
    binding: tuple[Signature, ...] | None = None  # set: the library has no PyInit; load it with cabi.bind
    # built, but its host objects call what the static checks forbid (build/host_symbols.py): the
    # verdict is `static_violation` (the findings are among `diagnostics`)
    violation: bool = False


BUILD_MODES = ("auto", "full", "fast")


def build_module(
    module: GeneratedModule,
    path: str,
    config: VerifyConfig,
    *,
    link: bool,
    cancel: CancelToken | None = None,
    on_output: Callable[[str], None] | None = None,
    mode: str = "auto",
    symbols: bool | None = None,
) -> BuildResult:
    """Compile (and with `link`, link) `module`; diagnostics are located in the document at `path`.
    Without `link` it is a check: every compiler step that reads the source runs and reports, but
    the host compiler's pass over nvcc's front-end output is skipped and no object is kept
    (objects.compile_object's `check_only`), so a compile-only verdict costs the front ends.

    After a successful compile that links (or with `symbols=True`, which builds the objects of a
    check too), `config.host_symbols` reads what the candidate's host objects call
    (build/host_symbols.py): ATen compute ops, torch modules, threads, however spelled. Its
    findings are among the diagnostics and set `BuildResult.violation` (an error among them).

    `mode="auto"` compiles each object with the slim headers first (build/headers.py) and
    rebuilds an object whose slim compile failed with torch's full headers, so every error and
    its location are the full build's (the rebuild is skipped only for errors that the full
    build reports identically: `slim_errors_stand`); `"full"` skips the slim attempt;
    `"fast"` reports the slim outcome without falling back (tests compare the two). `main.cpp`
    and `cuda.cu` compile in parallel, each through the object cache (build/objects.py). Blocks
    until done; `cancel.is_set()` is polled and kills the compilers.

    A module whose `main.cpp` only declares the bound functions (`module.binding`, build/cabi.py) is
    first built as `cuda.cu` plus the C-ABI shim, without `main.cpp` (`_cabi_first`).
    `config.cabi_binding=False` skips it.
    """
    if mode not in BUILD_MODES:
        raise ValueError(f"build_module(mode={mode!r}) must be one of {BUILD_MODES}; use 'auto'.")
    if module.binding is not None and mode != "full" and config.cabi_binding:
        return _cabi_first(
            module,
            lambda m: build_module(
                m, path, config, link=link, cancel=cancel, on_output=on_output, mode=mode, symbols=symbols
            ),
        )
    t0 = time.perf_counter()
    try:
        tc = probe_toolchain(config.cache_dir, config.arch_list_env, cancel=cancel)
    except ToolchainError as exc:
        diag = Diagnostic(
            Severity.ERROR, str(exc), "compile.toolchain", Stage.COMPILE, _call_location(module, path)
        )
        return BuildResult(False, config.cache_dir, None, (diag,), str(exc), time.perf_counter() - t0, False)
    overlay = ensure_overlay(config.cache_dir, tc.cflags)
    cflags, cuda_cflags = tc.flags_for(module.name)
    standins = shlex.quote(
        str(overlay.standins)
    )  # nvcc passes it to gcc, whose preprocessor resolves includes
    full = {
        MAIN_CPP: (tc.cxx, f"{cflags} -idirafter {standins}"),
        CUDA_CU: (tc.nvcc, f"{cuda_cflags} -Xcompiler -idirafter,{standins}"),
    }
    names = [f.name for f in module.files]  # main.cpp, then cuda.cu; the C-ABI build has only cuda.cu
    walls: dict[str, float] = {}
    blocker = module_slim_blocker(module, tc.cflags) if mode != "full" else "mode='full'"
    # a check (nothing linked) writes no objects: the symbol check then does not run (a compile-only
    # verdict claims no correctness and no speed; building the objects for it cost ~50 % more there)
    read_symbols = config.host_symbols and (link if symbols is None else symbols)
    check = not link and not read_symbols
    steps: dict[str, StepResult] = {}
    used = {n: full[n] for n in names}  # the compiler and flags each file's outcome came from
    build_path = "full"
    if blocker is None:
        host = overlay.host
        if config.host_pch:
            probe_flags = tc.cflags.replace(f"-DTORCH_EXTENSION_NAME={PROBE_NAME}", "")
            host = ensure_host_pch(overlay, tc.cxx, f"{probe_flags} -idirafter {standins}") or host
        slim = {
            MAIN_CPP: (tc.cxx, f"-I{shlex.quote(str(host))} {full[MAIN_CPP][1]}"),
            CUDA_CU: (tc.nvcc, f"-I{shlex.quote(str(overlay.device))} {full[CUDA_CU][1]}"),
        }
        steps = _compile_all(
            module, config, {n: slim[n] for n in names}, cancel, on_output, walls, "slim.", check
        )
        build_path = "fast"
        used = {n: slim[n] for n in names}
        if mode == "auto" and not any(s.cancelled or s.timed_out for s in steps.values()):
            redo = [n for n in names if not steps[n].ok]
            # a gap of the CUDA-library stand-ins fails the full build the same way: no rebuild for it
            if redo and undecidable_reason(overlay, "".join(steps[n].output for n in redo)) is None:
                differing, declared = _error_lists(tc, overlay, standins, cancel)
                _fill_lists(module, {n: steps[n].output for n in redo}, differing, declared)
                redo = [
                    n for n in redo if not slim_errors_stand(module, n, steps[n].output, differing, declared)
                ]
                if redo:
                    build_path = "fallback"
                    used.update({n: full[n] for n in redo})
                    steps.update(
                        _compile_all(
                            module, config, {n: full[n] for n in redo}, cancel, on_output, walls, "", check
                        )
                    )
    else:
        steps = _compile_all(module, config, {n: full[n] for n in names}, cancel, on_output, walls, "", check)
    ordered = [steps[n] for n in names]
    output = "".join(s.output for s in ordered)
    ok = all(s.ok for s in ordered)
    findings: tuple[Diagnostic, ...] = ()
    if ok and read_symbols:
        findings = _symbol_findings(module, path, config, tc, used, steps, cancel, walls)
    lib: Path | None = None
    build_dir = config.cache_dir / "objects"
    if ok and link:
        t_link = time.perf_counter()
        ldflags = tc.ldflags if module.has_cuda else host_only_ldflags(tc.ldflags)
        linked = link_library(
            config.cache_dir,
            tc.cxx,
            ldflags,
            [s.path for s in ordered if s.path],
            module.name,
            config.compile_timeout_s,
            cancel,
        )
        walls["link"] = time.perf_counter() - t_link
        ordered.append(linked)
        output += linked.output
        ok, lib = linked.ok, linked.path
        build_dir = lib.parent if lib else build_dir
    wall = time.perf_counter() - t0
    cancelled = any(s.cancelled for s in ordered)
    timed_out = any(s.timed_out for s in ordered)

    def done(res: BuildResult) -> BuildResult:
        return dataclasses.replace(res, build_path=build_path, step_wall_s=walls, slim_blocker=blocker)

    if cancelled or timed_out:
        what = "cancelled" if cancelled else f"timed out after {config.compile_timeout_s:.0f} s"
        diag = Diagnostic(
            Severity.ERROR,
            f"The build {what}.",
            "compile.timeout" if timed_out else "compile.cancelled",
            Stage.COMPILE,
            _call_location(module, path),
        )
        return done(BuildResult(False, build_dir, None, (diag,), output, wall, False, cancelled, timed_out))
    cached = all(s.cached for s in ordered)
    if not ok and (why := undecidable_reason(overlay, output)) is not None:
        diag = Diagnostic(
            Severity.WARNING, why, "compile.headers_unavailable", Stage.COMPILE, _call_location(module, path)
        )
        return done(BuildResult(False, build_dir, None, (diag,), output, wall, cached, undecided=True))
    diags = map_messages(module, path, parse_messages(output))
    if not ok and not any(d.severity is Severity.ERROR for d in diags):
        tail = "\n".join(output.strip().splitlines()[-15:])
        diags += (
            Diagnostic(
                Severity.ERROR,
                f"The build failed without a compiler message cudice understands:\n{tail}",
                "compile.failed",
                Stage.COMPILE,
                _call_location(module, path),
            ),
        )
    violation = any(d.severity is Severity.ERROR for d in findings)
    return done(BuildResult(ok, build_dir, lib, diags + findings, output, wall, cached, violation=violation))


def _symbol_findings(
    module: GeneratedModule,
    path: str,
    config: VerifyConfig,
    tc: Toolchain,
    used: dict[str, tuple[str, str]],
    steps: dict[str, StepResult],
    cancel: CancelToken | None,
    walls: dict[str, float],
) -> tuple[Diagnostic, ...]:
    """What the candidate's compiled host objects call (build/host_symbols.py), as static findings.
    An object the steps did not leave (a cached outcome whose object is gone) is compiled here,
    through the object cache, with the flags whose outcome stood. Nothing when an object still
    cannot be had or its symbols are unreadable."""
    from cudice.verifier.build.host_symbols import find_nm, symbol_findings
    from cudice.verifier.static.policy import parse_strictness

    if find_nm() is None:
        return ()
    objects = {n: s.path for n, s in steps.items() if s.path is not None}
    if len(objects) < len(steps):
        missing = {n: used[n] for n in steps if n not in objects}
        built = _compile_all(module, config, missing, cancel, None, walls, "symbols.", False)
        objects.update({n: s.path for n, s in built.items() if s.ok and s.path is not None})
        if len(objects) < len(steps):
            return ()
    t = time.perf_counter()
    torch_include = next((d for d in include_dirs(tc.cflags) if (d / "ATen" / "ops").is_dir()), None)
    ops = aten_op_names(str(torch_include)) if torch_include else frozenset()
    found = symbol_findings(
        [objects[n] for n in steps], parse_strictness(config.static_policy), _call_location(module, path), ops
    )
    walls["symbols"] = time.perf_counter() - t
    return found


def _cabi_first(module: GeneratedModule, build: Callable[[GeneratedModule], BuildResult]) -> BuildResult:
    """`module` built as `cuda.cu` plus the C-ABI shim; its `BuildResult.binding` then tells the
    loader to use `cabi.bind`. When that build fails on a line of the shim (or without a located
    error in the user's lines), the module is built the pybind11 way, so the shim can cost time
    but never a verdict. `build` builds a module as given (its `binding` is None).
    """
    shimmed = cabi_module(module)
    res = build(dataclasses.replace(shimmed, binding=None))
    if res.ok:
        return dataclasses.replace(res, binding=module.binding, build_path=f"cabi-{res.build_path}")
    if res.cancelled or res.timed_out or res.undecided or _fails_in_user_lines(shimmed, res):
        return dataclasses.replace(res, build_path=f"cabi-{res.build_path}")
    return build(dataclasses.replace(module, binding=None))


def cabi_module(module: GeneratedModule) -> GeneratedModule:
    """`module` as the C-ABI build compiles it: `cuda.cu` with the shim appended, no `main.cpp`."""
    assert module.binding is not None
    cu = module.file(CUDA_CU)
    assert cu is not None
    shimmed = dataclasses.replace(cu, text=cu.text + "\n" + shim(module.binding))
    return dataclasses.replace(module, files=(shimmed,))


def _fails_in_user_lines(shimmed: GeneratedModule, res: BuildResult) -> bool:
    """Every compiler error of a failed shim build lies in the user's own lines of `cuda.cu`.

    Then the plain build fails the same way (the shim comes after them and cannot change how
    they parse), and the result stands; an error in the shim's lines, in a header reached only
    from them, or with no position sends the module to the pybind11 build.
    """
    cu = shimmed.file(CUDA_CU)
    assert cu is not None

    def users(line: int) -> bool:
        return any(p.first_line <= line < p.first_line + p.num_lines for p in cu.pieces)

    errors = [m for m in parse_messages(res.output) if m.severity == "error"]
    if not errors:
        return False
    for m in errors:
        if m.file is None or m.line is None or Path(m.file).name != CUDA_CU:
            chain = [ln for f, ln in m.include_chain if Path(f).name == CUDA_CU]
            if not chain or not users(chain[-1]):
                return False
        elif not users(m.line):
            return False
    return True


def _error_lists(
    tc: Toolchain, overlay: Overlay, standins: str, cancel: CancelToken | None = None
) -> tuple[
    Callable[[str, tuple[str, ...]], frozenset[str] | None],
    Callable[[str, tuple[str, ...]], HeaderNames | None],
]:
    """The two cached lists `slim_errors_stand` reads, as functions of (file name, its `#include`s):
    the macros the slim and full headers define differently, and the names the full headers
    declare. Both use the toolchain's flags without a module's name, so one computation serves
    every candidate with the same include set. Once `cancel` is set a list not yet cached is None
    (its preprocessor runs are killed)."""
    probe = {
        MAIN_CPP: f"{tc.cflags} -idirafter {standins}",
        CUDA_CU: f"{tc.cuda_cflags} -Xcompiler -idirafter,{standins}",
    }
    compilers = {MAIN_CPP: tc.cxx, CUDA_CU: tc.nvcc}

    def differing(name: str, includes: tuple[str, ...]) -> frozenset[str] | None:
        cuda = name == CUDA_CU
        folder = overlay.device if cuda else overlay.host
        slim_probe = f"-I{shlex.quote(str(folder))} {probe[name]}"
        return macro_differences(
            overlay, compilers[name], probe[name], slim_probe, cuda, includes, cancel=cancel
        )

    def declared(name: str, includes: tuple[str, ...]) -> HeaderNames | None:
        return full_header_names(
            overlay, compilers[name], probe[name], name == CUDA_CU, includes, cancel=cancel
        )

    return differing, declared


def prepare_error_lists(
    config: VerifyConfig, module: GeneratedModule, cancel: CancelToken | None = None
) -> bool:
    """Compute, ahead of any error, the lists a slim build's error verdict needs for files with
    `module`'s include sets (`_fill_lists`), so the first error verdict of a session costs what
    every later one does. For a long-lived process (the editor's verify worker) to call while it
    waits: the toolchain probe (cached), then a few compiler preprocessor runs and a scan, cached in
    the build cache; failures are left to the build that needs the lists. `cancel` set stops it:
    the toolchain probe and the preprocessor runs (nvcc and its children) are killed as a group,
    nothing half-done is cached, and the call returns False soon after (a scan under way ends its
    pass first). True when it ran to the end."""

    def cancelled() -> bool:
        return cancel is not None and cancel.is_set()

    with contextlib.suppress(ToolchainError, OSError):
        tc = probe_toolchain(config.cache_dir, config.arch_list_env, cancel=cancel)
        if cancelled():
            return False
        overlay = ensure_overlay(config.cache_dir, tc.cflags)
        standins = shlex.quote(str(overlay.standins))
        differing, declared = _error_lists(tc, overlay, standins, cancel)
        if module.binding is not None and config.cabi_binding:  # the files build_module compiles first
            module = cabi_module(module)
        _fill_lists(module, {f.name: "" for f in module.files}, differing, declared, every_list=True)
    return not cancelled()


def _fill_lists(
    module: GeneratedModule,
    outputs: dict[str, str],
    differing: Callable[[str, tuple[str, ...]], frozenset[str] | None],
    declared: Callable[[str, tuple[str, ...]], HeaderNames | None],
    every_list: bool = False,
) -> None:
    """Compute, side by side, the cached lists `slim_errors_stand` may read for these files
    (`every_list`: also the name list of a file whose output has no error, ahead of one).

    The macro comparisons (with and without the file's `#include`s) and the full headers' name
    list are preprocessor runs and a Python scan, cached in the overlay folder the first time per
    toolchain and include set (most of a first error verdict when run one after the other); in
    threads they overlap. The comparison without the file's `#include`s follows the one with
    them in the same thread: that one usually caches it on the way, with fewer runs
    (headers.macro_differences). The name list only for a file with a non-structural
    error (a structural one never reads it). Failures are left to the sequential calls after.
    """
    from concurrent.futures import ThreadPoolExecutor

    def both(n: str, includes: tuple[str, ...]) -> None:
        differing(n, includes)
        differing(n, ())  # usually cached by the call above, which shares the full side's runs

    jobs: list[tuple[Callable[..., object], str, tuple[str, ...]]] = []
    for n, output in outputs.items():
        f = module.file(n)
        if f is None:
            continue
        includes = tuple(m.group(1) for m in _INCLUDE.finditer(f.text))
        jobs.append((both if includes else differing, n, includes))
        errors = [m.message for m in parse_messages(output) if m.severity == "error"]
        if every_list or any(not any(r.match(e) for r in _STRUCTURAL) for e in errors):
            jobs.append((declared, n, includes))
    with ThreadPoolExecutor(max_workers=max(1, len(jobs))) as pool:
        for job in [pool.submit(fn, n, inc) for fn, n, inc in jobs]:
            job.exception()  # wait; an error is met again, and handled, by the caller's own call


# Compiler errors about the token structure alone (gcc/g++ with LC_ALL=C, and nvcc's EDG front end):
# given the same tokens, no declaration a header adds or lacks changes them. Name lookups, types,
# overloads, templates and `#error` are not among them (a missing declaration can cause those).
_Q = "['\u2018\u2019]"  # gcc quotes: ASCII under LC_ALL=C, typographic otherwise
_PUNCT = r"[;,:()\[\]{}]"
_STRUCTURAL = (
    re.compile(
        rf"^expected {_Q}{_PUNCT}{_Q}(?: or {_Q}{_PUNCT}{_Q})*"
        rf"(?: before (?:{_Q}[^\s'\u2018\u2019]+{_Q}(?: token)?|numeric constant|string constant)"
        r"| at end of input| at end of member declaration| after (?:class|struct|union) definition)$"
    ),
    re.compile(
        rf"^expected (?:primary-expression|declaration) (?:before {_Q}{_PUNCT}{_Q} token|at end of input)$"
    ),
    re.compile(rf"^missing terminating {_Q}?[\"']{_Q}? character$"),
    re.compile(rf"^stray {_Q}[^\s]+{_Q} in program$"),
    re.compile(r'^expected an? "[;,:()\[\]{}]"$'),  # nvcc (EDG)
    re.compile(rf"^a function-definition is not allowed here before {_Q}{{{_Q} token$"),  # an unclosed `{`
    re.compile(r"^(?:expected a declaration|missing closing quote|unrecognized token)$"),
)
_END_OF_SOURCE = re.compile(r'^At end of source: error: expected an? "[;,)\]}]"$')  # EDG: an unclosed `{`
# EDG's "expected an expression" is structural only where it stops at a punctuator (`x = ;`): on a
# name (`foo<int>(x)` with a non-template `foo`) it can come from a declaration the slim set lacks
_EXPECTED_EXPRESSION = re.compile(r"^expected an expression$")
_IDENTIFIER = re.compile(r"\b[A-Za-z_]\w*")
_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*(<[^>\n]+>|"[^"\n]+")', re.M)


# An unqualified name that lookup did not find: gcc/g++, clang, nvcc (EDG). gcc and clang may append
# a spelling suggestion, which depends on the names in scope (`_suggestion_unchanged`).
_UNDECLARED = (
    re.compile(
        rf"^{_Q}(?P<name>[A-Za-z_]\w*){_Q} was not declared in this scope"
        rf"(?:; did you mean {_Q}(?P<hint>[A-Za-z_]\w*){_Q}\?)?$"
    ),
    re.compile(
        rf"^use of undeclared identifier {_Q}(?P<name>[A-Za-z_]\w*){_Q}"
        rf"(?:; did you mean {_Q}(?P<hint>[A-Za-z_]\w*){_Q}\?)?$"
    ),
    re.compile(r'^identifier "(?P<name>[A-Za-z_]\w*)" is undefined$'),
)
_DIRECTIVE = re.compile(r"^[ \t]*#[ \t]*(\w*)(.*)$", re.M)


def slim_errors_stand(
    module: GeneratedModule,
    name: str,
    output: str,
    differing: Callable[[str, tuple[str, ...]], frozenset[str] | None],
    declared: Callable[[str, tuple[str, ...]], HeaderNames | None] | None = None,
) -> bool:
    """The failed slim compile of `name` is the full build's verdict: no full rebuild needed.

    True only when every error message (and its notes) lies in the file `name` itself, the text
    both builds compile (the user's lines, or cudice's implicit lines after an unclosed brace;
    none in a header, none unlocated), each is a structural error (`_STRUCTURAL`: a missing `;`,
    `)` or `}`, an extra `}`, a stray character, an unterminated string), an undeclared name
    the full headers cannot declare (below), an `#error` on one of the file's own lines (no
    `#define` or `#if` before the file's last `#include`: one there could make a header only the
    full build reads fail too), or an error without a spelling hint inside declarations only
    the user's names make up (`_only_user_declarations`, with `declared` and the `#include`
    rule as below), and no identifier anywhere in the file is a macro
    that the full and slim headers define differently (`differing(name, includes)`,
    headers.macro_differences: with the file's own `#include`s for the whole file, and
    without them for the text up to its last `#include`, where a macro the full headers define
    before a later include defines it on both sides still differs; None counts as a
    difference). Then both builds read the same tokens in that file; the slim headers declare a
    subset of what the full ones do, so a name there can only be missing or have fewer
    overloads, and that shows as a lookup, type or overload error, which is not structural and
    sends the object to the full build. A structural error where both builds read the same
    tokens is reported by both, with the same text at the same position.

    Undeclared names (g++ `'vv' was not declared in this scope`, clang `use of undeclared
    identifier 'vv'`, nvcc `identifier "vv" is undefined`), with `declared(name, includes)`
    (headers.full_header_names: the words the full headers, the file's own includes
    after them, put at namespace, class, enum or linkage scope, in both nvcc passes, plus every
    macro they define; None counts as "maybe declared"). The error stands when the message has
    no notes and its name X
      - is not in that set and is not the module's name (the full build's `TORCH_EXTENSION_NAME`);
      - occurs in the file, never on a preprocessor line, never after `.`, `->` or `::` and
        never before `::`, and every occurrence sits where no parse makes it a declarator
        (`_only_a_use`: after `=`, an arithmetic or logical operator, `?`, `:`, `[`, `return`,
        or at the start of a statement or condition; as an argument of a call whose callee is
        itself in such a place or after `.`/`->`; never after a name, `*`, `&`, `<`, `>`);
      - the file has no preprocessor line but `#include` / `#pragma once` before its last
        `#include` (a `#define` or `#if` there could change what a later header declares);
      - for g++/clang, no name of the set (the words of the overlay's own headers are in it) is
        within the spelling-suggestion distance of X, and no word of the file but the suggested
        one is (`_suggestion_unchanged`: the appended `did you mean` is then the same).
    Why the full build then reports the same error: a name is declared only by tokens that
    spell it (a declaration, a using-declaration, an enumerator, a member a user class
    inherits, a macro); the full build adds the header text `declared` tokenised, and nothing
    at a scope the user's code can see spells X, so the full build's lookup of X, unqualified
    and in the same place of the same tokens (macros checked as above), finds what the slim
    one found: nothing. The tokens before X are the same too, but a name among them that the
    full headers declare as a type could turn the statement into a declaration of X
    (`F (vv);`); `_only_a_use` admits only places where X is read, whatever the names around it
    are, and since it holds for every occurrence of X in the file, no declaration of X by the
    user's own code can appear in one build and not the other. The message is X's name alone
    (EDG) or carries a suggestion both builds compute from the same candidates.
    Not covered (full rebuild): undeclared names among those words (a header's parameter or
    local names are left out, but names in templates' default arguments, initializers and
    class bodies count), qualified (`at::vv`) or member (`x.vv`) names, names with notes,
    names whose only place is after a type-like token or in a template argument or a
    `sizeof`, files with a `#define` before an `#include`, and a full-header declaration that
    hides a slim one from an inner scope (a header type in a namespace or base class the
    user's code opens or derives from) beside a structural error.
    """
    f = module.file(name)
    if f is None:
        return False
    errors = [m for m in parse_messages(output) if m.severity == "error"]
    if not errors:
        return False

    def in_file(file: str | None, line: int | None) -> bool:
        return file is not None and line is not None and Path(file).name == name

    undeclared: dict[str, str | None] = {}  # name -> the suggestion of a g++/clang message ("" for EDG)
    others: list[CompilerMessage] = []  # errors for `_only_user_declarations`
    hash_error = False  # an `#error` line of the file's own
    for m in errors:
        if m.tool == "other" and _END_OF_SOURCE.match(m.message):
            continue  # nvcc's end of the translation unit: after the file's last line in both builds
        if not in_file(m.file, m.line) or m.include_chain:
            return False
        if not all(in_file(n.file, n.line) for n in m.notes if n.file is not None):
            return False
        if any(r.match(m.message) for r in _STRUCTURAL) or (
            _EXPECTED_EXPRESSION.match(m.message) and _caret_on_punctuator(m)
        ):
            continue
        if _HASH_ERROR.match(m.message) and m.line is not None and _is_error_directive(f.text, m.line):
            hash_error = True
            continue  # the user's own `#error` line: the same tokens and macros decide it in both builds
        u = next((hit for r in _UNDECLARED if (hit := r.match(m.message))), None)
        if u is None:
            if declared is None or _SUGGESTION.search(m.message):
                return False
            others.append(m)
            continue
        if m.notes or declared is None:
            return False
        hint: str | None = u.groupdict().get("hint") if u.re is not _UNDECLARED[2] else ""
        if undeclared.setdefault(u.group("name"), hint) != hint:
            return False
    found = list(_INCLUDE.finditer(f.text))
    at_end = differing(name, tuple(m.group(1) for m in found))
    if at_end is None or not at_end.isdisjoint(_IDENTIFIER.findall(f.text)):
        return False
    if found:
        before = differing(name, ())
        if before is None or not before.isdisjoint(_IDENTIFIER.findall(f.text[: found[-1].end()])):
            return False
    if not undeclared and not others and not hash_error:
        return True
    # a `#define` (or `#if`) before an `#include` could make a header only the full build reads
    # fail too, or declare other names; the file's own `#error` lines change no header
    if found and any(
        d.group(1) not in ("include", "pragma", "", "error")
        or (d.group(1) == "pragma" and d.group(2).strip() != "once")
        for d in _DIRECTIVE.finditer(f.text[: found[-1].start()])
    ):
        return False
    if not undeclared and not others:
        return True
    assert declared is not None
    names = declared(name, tuple(m.group(1) for m in found))
    if names is None:
        return False
    user_macros = frozenset(re.findall(r"^[ \t]*#[ \t]*define[ \t]+(\w+)", f.text, re.M))
    others = [
        m
        for m in others
        if not _arity_error_stands(f.text, m, names.identifiers, names.macros | user_macros, module.name)
    ]
    if others and not _only_user_declarations(f.text, others, names, module.name):
        return False
    code, directive_words = _code_tokens(f.text)
    macros = names.macros | user_macros
    words = frozenset(t for t in code if _IDENTIFIER.fullmatch(t))
    for x, hint in undeclared.items():
        if x in names.identifiers or x == module.name or x in directive_words or x in user_macros:
            return False
        where = [i for i, t in enumerate(code) if t == x]
        if not where or any(i + 1 < len(code) and code[i + 1] == "::" for i in where):
            return False
        if not all(_only_a_use(code, i, macros) for i in where):
            return False
        if hint != "" and not _suggestion_unchanged(x, hint, names.identifiers, words):
            return False
    return True


_CODE_TOKEN = re.compile(
    r"""(?P<skip>//[^\n]*|/\*.*?\*/|\s+)"""
    r"""|(?P<lit>(?:\b(?:u8|u|U|L))?R"(?P<d>[^()\\\s]{0,16})\(.*?\)(?P=d)"""
    r"""|(?:\b(?:u8|u|U|L))?"(?:[^"\\\n]|\\.)*"|(?:\b(?:u8|u|U|L))?'(?:[^'\\\n]|\\.)*'"""
    r"""|\.?\d(?:[\w.']|[eEpP][+-])*)"""
    r"""|(?P<word>[A-Za-z_$][\w$]*)"""
    r"""|(?P<punct>::|->\*?|\.\*|\.\.\.|<<=|>>=|<=>|[-+*/%^&|=!<>]=|&&|\|\||<<|>>|\+\+|--|\S)""",
    re.S,
)


def _code_tokens(text: str) -> tuple[list[str], frozenset[str]]:
    """The tokens of `text` outside preprocessor lines (literals as `0`), and the words on those lines."""
    text = text.replace("\\\n", "")
    code: list[str] = []
    directive_words: set[str] = set()
    for m in _CODE_TOKEN.finditer(text):
        if m.lastgroup == "skip":
            continue
        code.append("0" if m.lastgroup == "lit" else m.group(0))
    # preprocessor lines: found line by line (a `#` opens one only at the start of a line)
    kept: list[str] = []
    for line in text.splitlines(keepends=True):
        if re.match(r"[ \t]*#", line):
            directive_words.update(_IDENTIFIER.findall(line))
            kept.append("\n")
        else:
            kept.append(line)
    if directive_words:
        code = [
            "0" if m.lastgroup == "lit" else m.group(0)
            for m in _CODE_TOKEN.finditer("".join(kept))
            if m.lastgroup != "skip"
        ]
    return code, frozenset(directive_words)


# tokens after which the next token begins an operand, never a declarator
_OPERAND_AFTER = frozenset(
    "= += -= *= /= %= ^= |= &= <<= >>= == != <= >= + - / % ^ | || ! ? : << [ return case throw co_return"
    " co_yield".split()
)
_STATEMENT_START = frozenset({";", "{", "}"})
_CONDITION = frozenset({"if", "while", "switch", "for"})
_KEYWORDS = frozenset(
    "alignas alignof and asm auto bool break case catch char char8_t char16_t char32_t class concept const"
    " consteval constexpr constinit const_cast continue co_await co_return co_yield decltype default"
    " delete do double dynamic_cast else enum explicit export extern false float for friend goto if"
    " inline int long mutable namespace new noexcept not nullptr operator or private protected public"
    " register reinterpret_cast requires return short signed sizeof static static_assert static_cast"
    " struct switch template this thread_local throw true try typedef typeid typename union unsigned"
    " using virtual void volatile wchar_t while __global__ __device__ __host__ __shared__"
    " __constant__ __restrict__ __forceinline__ __launch_bounds__ __attribute__ __declspec".split()
)


def _only_a_use(code: list[str], i: int, macros: frozenset[str]) -> bool:
    """`code[i]` (a name no header declares) is read there under any parse of the tokens before it."""
    start_ok = True  # the name itself may begin a statement or condition: it is then an expression
    j = i - 1
    while j >= 0:
        p = code[j]
        if p in _OPERAND_AFTER:
            return True
        if p in _STATEMENT_START:
            return start_ok
        if p == ",":
            k = _opener(code, j)
            if k < 0:
                return False
            if code[k] == "[":
                return True
            if code[k] == "{":
                return k > 0 and code[k - 1] in ("=", "(", ",", "return")
            j, p = k, "("
        if p != "(":
            return False
        q = code[j - 1] if j > 0 else ";"
        if q in _OPERAND_AFTER:
            return True
        if q in _CONDITION:
            return start_ok
        if q == "(":
            j, start_ok = j - 1, False
            continue
        if not _IDENTIFIER.fullmatch(q) or q in _KEYWORDS or q in macros:
            return False
        # a call `q(...)`, `a::b::q(...)`, `x.q(...)`: an expression wherever the callee is read
        k = j - 2
        while k >= 1 and code[k] == "::" and _IDENTIFIER.fullmatch(code[k - 1]) and code[k - 1] not in macros:
            k -= 2
        if k >= 0 and code[k] in (".", "->"):
            return True
        if k >= 0 and code[k] == "::":
            return False
        j, start_ok = k, False
    return False


def _opener(code: list[str], j: int) -> int:
    """Index of the unclosed `(`, `[` or `{` around `code[j]`, or -1 (a `;` or the start first)."""
    depth = 0
    for k in range(j - 1, -1, -1):
        t = code[k]
        if t in (")", "]", "}"):
            depth += 1
        elif t in ("(", "[", "{"):
            if depth == 0:
                return k
            depth -= 1
        elif t == ";" and depth == 0:
            return -1
    return -1


def _suggestion_unchanged(
    x: str, hint: str | None, header_names: frozenset[str], file_words: frozenset[str]
) -> bool:
    """g++/clang would suggest the same spelling fix in both builds.

    Both compilers suggest the closest visible name within an edit distance that grows with the
    length (gcc: at most (len + 2) // 3 edits of the longer name; case changes cost less). Here
    any header name within that distance (ignoring case) might win in the full build, and any
    other word of the file might tie with the suggestion in another order: then no.
    """
    for n in header_names:
        if n != x and _close(x, n):
            return False
    return all(n in (x, hint) or not _close(x, n) for n in file_words)


def _close(a: str, b: str) -> bool:
    """Damerau (adjacent transposition) edit distance of the lower-cased names within (longer + 2) // 3."""
    cutoff = (max(len(a), len(b)) + 2) // 3
    if abs(len(a) - len(b)) > cutoff:
        return False
    a, b = a.lower(), b.lower()
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        cur = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                cur[j] = min(cur[j], prev2[j - 2] + 1)
        if min(cur) > cutoff:
            return False
        prev2, prev = prev, cur
    return prev[len(b)] <= cutoff


def _caret_on_punctuator(m: CompilerMessage) -> bool:
    if m.caret_text is None:
        return False
    printed, caret = m.caret_text
    at = caret.find("^")
    return 0 <= at < len(printed) and printed[at] in ";,)]}"


# `#error` in the user's own lines (gcc's preprocessor, also nvcc's) and the spelling hints of other
# g++/clang errors (they are drawn from every visible name, the headers' too)
_HASH_ERROR = re.compile(r"^#error\b")
_SUGGESTION = re.compile(r"did you mean|suggested alternative")
# names the full and slim builds declare alike: nvcc's built-in variables and `__syncthreads`
# (cuda_runtime.h, which nvcc includes before any user or torch header) and the C fixed-width and
# size typedefs (a second declaration of one at global scope could only repeat it)
_SAME_IN_BOTH = frozenset(
    "threadIdx blockIdx blockDim gridDim warpSize __syncthreads __noinline__ size_t int8_t int16_t int32_t"
    " int64_t uint8_t uint16_t uint32_t uint64_t".split()
)
# words that reach declarations the tokens do not spell (operator functions, allocation, exception
# and type-info classes, templates instantiated from elsewhere, using-directives)
_NOT_USER_ONLY = frozenset(
    "template using operator asm __asm__ friend new delete throw try catch typeid concept requires"
    " co_await co_return co_yield export".split()
)
_LOCAL_TYPE = frozenset(
    "const volatile unsigned signed int float double char short long bool void auto register static"
    " constexpr __shared__ __restrict__ size_t int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t"
    " uint64_t * &".split()
)
_CONDITIONAL = re.compile(r"^[ \t]*#[ \t]*(?:if|ifdef|ifndef|elif|elifdef|elifndef|else)\b", re.M)


def _is_error_directive(text: str, line: int) -> bool:
    """Line `line` (1-based) of `text` is an `#error` directive."""
    lines = text.splitlines()
    return 1 <= line <= len(lines) and re.match(r"[ \t]*#[ \t]*error\b", lines[line - 1]) is not None


@dataclass(frozen=True, slots=True)
class _Region:
    """One declaration at file scope: its tokens, their lines and bracket depth, matching brackets."""

    tokens: tuple[str, ...]
    lines: tuple[int, ...]
    depths: tuple[int, ...]  # open brackets around each token (0: at file scope)
    match: dict[int, int]  # index of each bracket -> index of its partner


def _file_regions(text: str) -> list[_Region] | None:
    """`text`'s file-scope declarations (preprocessor lines left out), or None if brackets do not balance.

    A declaration ends at a `;` outside brackets, or at the `}` that closes its outermost brace
    unless it is a class, struct, union or enum or has an `=` (then at the `;` after it).
    """
    masked = blank_directives(text)
    starts = [0, *(i + 1 for i, c in enumerate(masked) if c == "\n")]
    regions: list[_Region] = []
    toks: list[str] = []
    lines: list[int] = []
    depths: list[int] = []
    stack: list[int] = []
    match: dict[int, int] = {}
    line = 1
    closers = {")": "(", "]": "[", "}": "{"}
    for m in _CODE_TOKEN.finditer(masked):
        if m.lastgroup == "skip":
            continue
        while line < len(starts) and starts[line] <= m.start():
            line += 1
        tok = "0" if m.lastgroup == "lit" else m.group(0)
        if tok in closers:
            if not stack or toks[stack[-1]] != closers[tok]:
                return None
            match[stack[-1]] = len(toks)
            match[len(toks)] = stack.pop()
        depths.append(len(stack))
        toks.append(tok)
        lines.append(line)
        if tok in ("(", "[", "{"):
            stack.append(len(toks) - 1)
        if stack:
            continue
        top = {t for t, d in zip(toks, depths, strict=True) if d == 0}
        if tok == ";" or (tok == "}" and top.isdisjoint({"class", "struct", "union", "enum", "="})):
            regions.append(_Region(tuple(toks), tuple(lines), tuple(depths), dict(match)))
            toks, lines, depths, match = [], [], [], {}
    if stack:
        return None
    if toks:
        regions.append(_Region(tuple(toks), tuple(lines), tuple(depths), dict(match)))
    return regions


def _local_scope(r: _Region, d: int) -> tuple[int, int] | None:
    """Where the name `r.tokens[d]` means the local or parameter declared there, if it is one.

    A declaration here: fundamental type words, `*` and `&` before the name (at least one word),
    after `;`, `{`, `}` (a block's statement), `(` or `,` (a parameter of the region's function,
    whose body follows its `)`), or `for (`; then `=`, `;`, `,`, `[` or `)`. Its scope: to the end of
    the enclosing block, the function body, or the `for` statement's braced body.
    """
    t = r.tokens
    if d + 1 >= len(t) or t[d + 1] not in ("=", ";", ",", "[", ")"):
        return None
    k = d - 1
    while k >= 0 and t[k] in _LOCAL_TYPE:
        k -= 1
    if k == d - 1 or all(x in ("*", "&") for x in t[k + 1 : d]) or k < 0:
        return None
    opener = next((j for j in range(k, -1, -1) if t[j] in "([{" and r.match.get(j, -1) > d), None)
    if opener is None:
        return None
    if t[opener] == "{":
        return (d, r.match[opener]) if t[k] in (";", "{", "}") else None
    if t[opener] != "(" or t[k] not in ("(", ","):
        return None
    after = r.match[opener] + 1
    if after >= len(t) or t[after] != "{":
        return None
    if opener > 0 and t[opener - 1] == "for":
        return (d, r.match[after]) if t[k] == "(" else None
    if r.depths[opener] != 0:
        return None  # a lambda's or a nested function-like group: not followed here
    return d, r.match[after]


def _only_user_declarations(
    text: str, errors: list[CompilerMessage], names: HeaderNames, module_name: str
) -> bool:
    """Every error lies in file-scope declarations whose names only the user's code can declare.

    Why both builds then report the same errors: the regions holding the errors and their notes
    (`_file_regions`), and every file-scope declaration that spells a name of theirs outside
    brackets (a declaration of it; a namespace or linkage block that spells it anywhere), and the
    `#define` of each such name, are "user-only": every word is a keyword, a name both builds
    declare alike (`_SAME_IN_BOTH`), a member after `.`/`->`, a name no full header spells at any
    scope a lookup could search (`names`, headers.full_header_names) or a local variable or
    parameter declared with fundamental types, used in its scope (`_local_scope`). So each name's
    lookup finds the same declarations in both builds (a header cannot declare, overload or
    hide what it never spells, argument-dependent lookup included; a local hides every outer
    name), every type there is fundamental or the user's, and the compiler's reading of those
    tokens, errors included, is the same. Not covered (full rebuild): templates, operators,
    `new`/`delete`, exceptions, `using`, conditional directives in those declarations, header
    names such as `fmaxf` or `at::Tensor` (a type error in a host function that takes a tensor;
    a wrong argument count there is `_arity_error_stands`'s), locals declared with a user type or
    after a comma.
    """
    regions = _file_regions(text)
    if regions is None:
        return False
    spans = [(min(r.lines), max(r.lines)) for r in regions]
    conditional = [text[: m.start()].count("\n") + 1 for m in _CONDITIONAL.finditer(text)]
    defines = {
        m.group(1): m.group(2) for m in re.finditer(r"^[ \t]*#[ \t]*define[ \t]+(\w+)(.*)$", text, re.M)
    }
    wanted: set[int] = set()
    for m in errors:
        for loc in (m, *m.notes):
            if loc.line is None:
                continue
            hit = [i for i, r in enumerate(regions) if loc.line in r.lines]
            if not hit:
                return False
            wanted.update(hit)
    user: set[str] = set()
    checked: set[int] = set()
    seen_macros: set[str] = set()

    def word_ok(w: str) -> bool:
        if w in _NOT_USER_ONLY:
            return False
        if w in _KEYWORDS or w in _SAME_IN_BOTH:
            return True
        if w in names.identifiers or w == module_name:
            return False
        user.add(w)
        return True

    while wanted:
        i = wanted.pop()
        checked.add(i)
        r = regions[i]
        lo, hi = spans[i]
        if any(lo <= c <= hi for c in conditional):
            return False
        t = r.tokens
        for j, w in enumerate(t):
            if not _IDENTIFIER.fullmatch(w):
                continue
            prev = t[j - 1] if j else ""
            if prev in (".", "->") and w not in _NOT_USER_ONLY:
                continue
            if word_ok(w):
                continue
            if prev == "::" or (j + 1 < len(t) and t[j + 1] == "::"):
                return False
            scopes = [_local_scope(r, d) for d, x in enumerate(t) if x == w]
            if not any(s is not None and s[0] <= j <= s[1] for s in scopes):
                return False
        while pending := sorted(user & defines.keys() - seen_macros):
            seen_macros.update(pending)
            if not all(word_ok(w) for m_name in pending for w in _IDENTIFIER.findall(defines[m_name])):
                return False
        for k, other in enumerate(regions):
            if k in checked or k in wanted:
                continue
            pairs = list(zip(other.tokens, other.depths, strict=True))
            block = any(d == 0 and x in ("namespace", "extern") for x, d in pairs)
            if any(x in user and (block or d == 0) for x, d in pairs):
                wanted.add(k)
    return True


# EDG's message when a call names one function (not an overload set) and the argument count is wrong
_ARITY = re.compile(r"^too (few|many) arguments in function call$")
# words before a file-scope `k(...) {` that make it something else than one plain function's definition
_NOT_A_PLAIN_DEFINITION = frozenset(
    "template typedef using friend operator = , :: . -> < > << >> ? :".split()
)


def _arity_error_stands(
    text: str, m: CompilerMessage, header_names: frozenset[str], macros: frozenset[str], module_name: str
) -> bool:
    """nvcc's "too few/many arguments in function call" at a call (a kernel launch `k<<<...>>>(...)`
    or a plain `k(...)`) whose every piece both builds read alike, wherever the call sits (also in
    a host function that takes tensors).

    EDG reports that message, and nothing else about the call, when the callee's lookup finds one
    function and the argument count is outside its parameter count (less the defaulted ones).
    Both builds see the same counts and the same single function when:
      - the callee `k` is an unqualified name no full header spells (`header_names`, which holds
        their macros too), not a macro of the file's own, not the module's name, so its lookup
        (argument-dependent lookup included) finds only the user's declarations of it;
      - `k` is declared once, at file scope (outside every bracket), as a definition
        `... k(params) {` with no `template`, `typedef`, `using`, `operator`, qualifier, `=` or macro
        but CUDA's own keywords (`__global__`, `__launch_bounds__`, ...) before it (the file names no
        macro the two builds define apart, `slim_errors_stand`'s first check), and every other `k`
        in the file is a call of it inside a function body (after
        an operator, `(`, `,` or at a statement's start; followed by `<<<...>>>(` or `(`): no other
        declaration, no overload, no local hiding it;
      - the parameter and argument lists split into the same items under any reading: no `...`,
        no macro among their words but those keywords, and no comma between a `<` and a later `>` at their own
        bracket depth (a `<` that opens template arguments in one build and compares in the other
        could hide a comma; `x.data_ptr<float>()` has none);
      - those counts give the message's own verdict (fewer arguments than parameters without a
        default, or more than all of them).
    Every other word around the call is left to the rule every slim verdict rests on (the slim
    headers are torch's own text, a subset of the full set: what the slim build read without an
    error, the full one reads alike). Not covered: overloaded or templated callees, member and
    qualified calls, callees declared apart from their definition or inside a namespace, g++'s
    messages (they print the callee's signature, whose types the headers spell).
    """
    hit = _ARITY.match(m.message)
    if hit is None or m.line is None or m.caret_text is None or m.notes:
        return False
    lines = text.split("\n")
    if not 1 <= m.line <= len(lines):
        return False
    caret = sum(len(x) + 1 for x in lines[: m.line - 1]) + caret_column(*m.caret_text, lines[m.line - 1]) - 1
    masked = blank_directives(text)
    toks: list[str] = []
    starts: list[int] = []
    for found in _CODE_TOKEN.finditer(masked):
        if found.lastgroup != "skip":
            toks.append("0" if found.lastgroup == "lit" else found.group(0))
            starts.append(found.start())
    match: dict[int, int] = {}
    nest: list[int] = []  # brackets open around each token
    stack: list[int] = []
    for i, t in enumerate(toks):
        if t in (")", "]", "}"):
            if not stack or toks[stack[-1]] != {")": "(", "]": "[", "}": "{"}[t]:
                return False
            match[stack[-1]], match[i] = i, stack[-1]
            stack.pop()
        nest.append(len(stack))
        if t in ("(", "[", "{"):
            stack.append(i)
    if stack:
        return False
    # the innermost `( ... )` around the caret (on its `)` for "too few", on an argument for "too many")
    around = [i for i, t in enumerate(toks) if t == "(" and starts[i] < caret <= starts[match[i]]]
    callee = _callee(toks, max(around)) if around else None
    if callee is None:
        return False
    k = toks[callee]
    if k in header_names or k in macros or k in _KEYWORDS or k == module_name:
        return False
    definition: int | None = None
    for i, t in enumerate(toks):
        if t != k:
            continue
        if nest[i] == 0:
            close = match.get(i + 1, -1) if toks[i + 1 : i + 2] == ["("] else -1
            if definition is not None or close < 0 or toks[close + 1 : close + 2] != ["{"]:
                return False
            j = i - 1
            while j >= 0 and not (nest[j] == 0 and toks[j] in (";", "}")):
                if nest[j] == 0 and (toks[j] in _NOT_A_PLAIN_DEFINITION or toks[j] in macros - _KEYWORDS):
                    return False
                j -= 1
            definition = i
            continue
        before = toks[i - 1]
        paren = i + 1 if toks[i + 1 : i + 2] == ["("] else _launch_paren(toks, i)
        if _callee(toks, paren) != i or not (
            before in _OPERAND_AFTER or before in _STATEMENT_START or before in ("(", ",")
        ):
            return False
    if definition is None or callee == definition:
        return False
    params = _items(toks, definition + 1, match, macros)
    args = _items(toks, max(around), match, macros)
    if params is None or args is None:
        return False
    if params == [["void"]]:
        params = []
    required = sum(1 for p in params if "=" not in p)
    return len(args) < required if hit.group(1) == "few" else len(args) > len(params)


def _launch_paren(toks: list[str], i: int) -> int:
    """Index of the `(` after `toks[i] <<< ... >>>`, or -1."""
    if toks[i + 1 : i + 3] != ["<<", "<"]:
        return -1
    depth = 0
    for j in range(i + 3, len(toks)):
        t = toks[j]
        if t in ("(", "[", "{"):
            depth += 1
        elif t in (")", "]", "}"):
            depth -= 1
        elif depth == 0 and t in ("<", "<<", ">", ">>", ";"):
            return j + 2 if toks[j : j + 3] == [">>", ">", "("] else -1
    return -1


def _callee(toks: list[str], paren: int) -> int | None:
    """Index of the unqualified name called at the `(` `toks[paren]` (`k(` or `k<<<...>>>(`), or None."""
    if paren < 1 or toks[paren] != "(":
        return None
    j = paren - 1
    if toks[j] == ">" and toks[j - 1] == ">>":  # the end of a launch's `<<<...>>>`
        depth = 0
        j -= 2
        while j >= 1:
            t = toks[j]
            if t in (")", "]", "}"):
                depth += 1
            elif t in ("(", "[", "{"):
                depth -= 1
            elif depth == 0 and t == "<" and toks[j - 1] == "<<":
                break
            elif depth == 0 and t in ("<", "<<", ">", ">>", ";"):
                return None
            j -= 1
        j -= 2
    if j < 0 or not _IDENTIFIER.fullmatch(toks[j]) or (j > 0 and toks[j - 1] in ("::", ".", "->")):
        return None
    return j


def _items(
    toks: list[str], paren: int, match: dict[int, int], macros: frozenset[str]
) -> list[list[str]] | None:
    """The comma-separated items of the list opened at `toks[paren]` (tokens each), or None when a
    reading could split them otherwise: a `...`, a macro, an empty item, or a comma at the list's
    depth that template arguments could enclose (`_enclosable`)."""
    items: list[list[str]] = [[]]
    angles: list[str] = []  # `<`, `>`, `>>` and `,` at the list's own depth, in order
    depth = 0
    for t in toks[paren + 1 : match[paren]]:
        if t == "..." or (t in macros and t not in _KEYWORDS):
            return None
        if t in ("(", "[", "{"):
            depth += 1
        elif t in (")", "]", "}"):
            depth -= 1
        elif depth == 0 and t in ("<", ">", ">>", ","):
            angles.append(t)
        if depth == 0 and t == ",":
            items.append([])
        else:
            items[-1].append(t)
    if items == [[]]:
        return []
    return None if _enclosable(angles) or any(not item for item in items) else items


def _enclosable(seq: list[str]) -> bool:
    """Some comma of `seq` (the `<`, `>`, `>>`, `,` of one bracket level) lies inside template
    arguments under some reading: after a `<` whose list no `>` between them must close (each `<`
    between may open one of its own), with a `>` after it that could close the list."""
    for c, t in enumerate(seq):
        if t != "," or not any(x in (">", ">>") for x in seq[c + 1 :]):
            continue
        for a in range(c):
            if seq[a] != "<":
                continue
            open_lists = 1
            for x in seq[a + 1 : c]:
                open_lists += {"<": 1, ">": -1, ">>": -2}.get(x, 0)
                if open_lists <= 0:
                    break
            else:
                return True
    return False


_CUDA_LIBS = ("-lc10_cuda", "-ltorch_cuda", "-lcudart")


def host_only_ldflags(ldflags: str) -> str:
    """Link flags for a module without CUDA sources when torch has no CUDA libraries (a CPU-only torch).

    torch's `load_inline` links such a module without its CUDA libraries (`with_cuda` is false);
    the probed flags name them, and a CPU-only torch lacks them, so linking would fail. With a CUDA
    torch the flags are kept as they are (same link, same cache key as before).
    """
    args = shlex.split(ldflags)
    torch_lib = next(
        (a[2:] for a in args if a.startswith("-L") and Path(a[2:], "libtorch_cpu.so").exists()), None
    )
    if torch_lib is None or Path(torch_lib, "libc10_cuda.so").exists():
        return ldflags
    kept = [
        a
        for a in args
        if a not in _CUDA_LIBS
        and not (a.startswith("-L") and "cuda" in Path(a[2:]).as_posix() and a[2:] != torch_lib)
    ]
    return shlex.join(kept)


def module_slim_blocker(module: GeneratedModule, cflags: str) -> str | None:
    """Why `module` skips the slim headers (headers.slim_blocker), or None."""
    torch_include = next((d for d in include_dirs(cflags) if (d / "ATen" / "ops").is_dir()), None)
    ops = aten_op_names(str(torch_include)) if torch_include else frozenset()
    texts = [p_text for f in module.files for p_text in _user_texts(f.text, f.pieces)]
    return slim_blocker(texts, ops)


def _user_texts(text: str, pieces: tuple[Piece, ...]) -> list[str]:
    lines = text.split("\n")
    return ["\n".join(lines[p.first_line - 1 : p.first_line - 1 + p.num_lines]) for p in pieces]


def _compile_all(
    module: GeneratedModule,
    config: VerifyConfig,
    jobs: dict[str, tuple[str, str]],
    cancel: CancelToken | None,
    on_output: Callable[[str], None] | None,
    walls: dict[str, float],
    prefix: str,
    check_only: bool,
) -> dict[str, StepResult]:
    """Compile the named files of `module` in parallel (compiler, flags per file); walls[prefix+name] in s.
    `check_only` (nothing will be linked): objects.compile_object's check, no objects written."""
    results: dict[str, StepResult] = {}

    def one(name: str, compiler: str, flags: str) -> None:
        f = module.file(name)
        assert f is not None
        t = time.perf_counter()
        results[name] = compile_object(
            config.cache_dir,
            compiler,
            flags,
            name,
            f.text,
            config.compile_timeout_s,
            cancel,
            on_output,
            split_nvcc=config.split_nvcc,
            check_only=check_only,
        )
        walls[prefix + name] = time.perf_counter() - t

    threads = [threading.Thread(target=one, args=(n, *cj), daemon=True) for n, cj in jobs.items()]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return results


def map_messages(
    module: GeneratedModule, path: str, messages: list[CompilerMessage]
) -> tuple[Diagnostic, ...]:
    """Turn compiler messages into document diagnostics (errors and warnings; notes become related info)."""
    out: list[Diagnostic] = []
    seen: set[tuple[object, ...]] = set()
    for msg in messages:
        if msg.severity not in ("error", "warning"):
            continue
        loc, where = _locate(module, path, msg)
        if loc is None and msg.severity == "warning":
            continue  # warnings inside torch/CUDA headers are not the user's business
        related = []
        for note in msg.notes:
            nloc, _ = _locate(module, path, note)
            if nloc is not None:
                related.append((nloc, note.message))
        text = _document_lines(module, msg)
        text = text if where == "" else f"{text} ({where})"
        code = f"compile.{msg.severity}"
        if msg.tool == "other":
            code = (
                "compile.link_error" if "undefined" in msg.message or "ld returned" in msg.message else code
            )
        final = loc or _call_location(module, path)
        key = (final.line, final.column, text)
        if key in seen:
            continue
        seen.add(key)
        sev = Severity.ERROR if msg.severity == "error" else Severity.WARNING
        out.append(Diagnostic(sev, text, code, Stage.COMPILE, final, tuple(related)))
    return tuple(out)


# nvcc (EDG) names another line of the same file: "(previous definition at line 8)", "(declared at
# line 5)"; "at line N of <file>" names another file and is left alone
_SAME_FILE_LINE = re.compile(r"\bat line (\d+)\b(?! of )")


def _document_lines(module: GeneratedModule, msg: CompilerMessage) -> str:
    """`msg`'s text with the generated file's line numbers it quotes turned into the document's."""
    if msg.file is None or (base := Path(msg.file).name) not in (MAIN_CPP, CUDA_CU) or not module.file(base):
        return msg.message

    def to_document(m: re.Match[str]) -> str:
        pos = module.locate(base, int(m.group(1)))
        return f"at line {pos[0]}" if pos is not None else m.group(0)

    return _SAME_FILE_LINE.sub(to_document, msg.message)


def _locate(module: GeneratedModule, path: str, msg: CompilerMessage) -> tuple[Location | None, str]:
    """(location in the document, or None; a note on where the compiler saw it when not user text)."""
    if msg.file is None or msg.line is None:
        return None, ""
    base = Path(msg.file).name
    if base in (MAIN_CPP, CUDA_CU) and module.file(base) is not None:
        column = msg.column or 1
        if msg.caret_text is not None:
            column = caret_column(*msg.caret_text, module.line_text(base, msg.line))
        pos = module.locate(base, msg.line, column)
        if pos is not None:
            return Location(path, pos[0], pos[1], pos[0], pos[1] + 1), ""
        return None, f"generated {base} line {msg.line}: `{module.line_text(base, msg.line).strip()[:80]}`"
    for inc_file, inc_line in reversed(msg.include_chain):
        if Path(inc_file).name in (MAIN_CPP, CUDA_CU):
            pos = module.locate(Path(inc_file).name, inc_line)
            if pos is not None:
                return Location(path, pos[0], pos[1]), f"in {msg.file}:{msg.line}"
    return None, f"in {msg.file}:{msg.line}"


def _call_location(module: GeneratedModule, path: str) -> Location:
    return module.call_location or Location(path, 1, 1)


def _read_outcome(build_dir: Path, link: bool) -> tuple[bool, str] | None:
    """A finished earlier build of the same content that answers this request, if any."""
    try:
        data = json.loads((build_dir / OUTCOME).read_text())
    except (OSError, ValueError):
        return None
    ok, was_link = bool(data.get("ok")), bool(data.get("link"))
    if link:
        usable = (was_link and (not ok or (build_dir / str(data.get("library", ""))).is_file())) or (
            not was_link and not ok
        )
    else:
        usable = not was_link or ok
    return (ok, str(data.get("output", ""))) if usable else None


def _write_outcome(build_dir: Path, ok: bool, output: str, link: bool) -> None:
    lib = next((p.name for p in build_dir.glob("*.so")), "") if link else ""
    tmp = build_dir / f"{OUTCOME}.tmp"
    tmp.write_text(json.dumps({"ok": ok, "output": output, "link": link, "library": lib}))
    tmp.replace(build_dir / OUTCOME)


def build_raw_cu(doc: Document, config: VerifyConfig, *, cancel: CancelToken | None = None) -> BuildResult:
    """Compile a raw `.cu` document (extern "C" kernels, no torch) to a cubin with nvcc.

    Its lines are the document's lines, so messages map one to one. Cached by content hash.
    """
    import hashlib

    from cudice.verifier.build.toolchain import cuda_home

    t0 = time.perf_counter()
    nvcc = str(Path(cuda_home()) / "bin" / "nvcc")
    arch = config.arch_list[0].split("+")[0].replace(".", "")
    key = hashlib.sha256(f"{doc.text}\0{arch}\0{nvcc}".encode()).hexdigest()[:20]
    build_dir = config.cache_dir / f"rawcu-{key}"
    build_dir.mkdir(parents=True, exist_ok=True)
    cached = _read_outcome(build_dir, False)
    if cached is not None:
        ok, output = cached
        cached_hit = True
    else:
        src = build_dir / "kernel.cu"
        src.write_text(doc.text)
        cmd = [
            nvcc,
            f"-gencode=arch=compute_{arch},code=sm_{arch}",
            "-cubin",
            "-o",
            str(build_dir / "kernel.cubin"),
            str(src),
        ]
        rc, output, cancelled, timed_out = run_process(cmd, config.compile_timeout_s, cancel)
        if cancelled or timed_out:
            diag = Diagnostic(
                Severity.ERROR,
                "The build was cancelled or timed out.",
                "compile.timeout",
                Stage.COMPILE,
                Location(doc.path, 1, 1),
            )
            return BuildResult(
                False, build_dir, None, (diag,), output, time.perf_counter() - t0, False, cancelled, timed_out
            )
        ok, cached_hit = rc == 0, False
        _write_outcome(build_dir, ok, output, False)
    diags: list[Diagnostic] = []
    lines = doc.text.split("\n")
    for msg in parse_messages(output):
        if msg.severity not in ("error", "warning"):
            continue
        line = msg.line if msg.file and Path(msg.file).name == "kernel.cu" and msg.line else None
        column = msg.column or 1
        if line is not None and msg.caret_text is not None and line <= len(lines):
            column = caret_column(*msg.caret_text, lines[line - 1])
        loc = Location(doc.path, line, column, line, column + 1) if line else Location(doc.path, 1, 1)
        sev = Severity.ERROR if msg.severity == "error" else Severity.WARNING
        diags.append(Diagnostic(sev, msg.message, f"compile.{msg.severity}", Stage.COMPILE, loc))
    if not ok and not any(d.severity is Severity.ERROR for d in diags):
        diags.append(
            Diagnostic(
                Severity.ERROR,
                f"nvcc failed:\n{output.strip()[-1500:]}",
                "compile.failed",
                Stage.COMPILE,
                Location(doc.path, 1, 1),
            )
        )
    return BuildResult(ok, build_dir, None, tuple(diags), output, time.perf_counter() - t0, cached_hit)
