"""Pattern rules over a candidate's C++/CUDA text: what its host code may not do.

Codes (docs/diagnostics.md): `static.cpp_stream_create`, `static.cpp_std_thread`, `static.sleep`,
`static.timer_patch` (symbol interposition), `static.dispatcher_override` (`TORCH_LIBRARY*`),
`static.cpp_file_or_process` (files, programs, process control, `/proc`),
`static.cpp_pointer_cache` (state that outlives a call), `static.cpp_torch_op` (ATen calls —
qualified under any name of ATen's namespaces, as methods, unqualified through
argument-dependent lookup, or as C++ operators on tensors — vendor libraries, and calls back into
Python through pybind11).

Regexes over the blanked text with the file's own macros expanded (`cpp_scan.Unit.of`,
`static/cpp_preprocess.py`): `CAT(pthread_, create)` reads as `pthread_create`, `NS::relu` under
`#define NS at` as `at::relu`; findings land on the macro's invocation. A stream or a `static`
seen only through a macro is a warning (the run-time layer measures those: `dynamic.side_stream`,
`dynamic.nondeterministic`); every other finding is an error however it is spelled. A method of
the tensor API called on a tensor (`x.prelu(w)`, `x.contiguous().sum_to_size(1)`: receivers
inferred by `static/cpp_tensors.py`) is ATen work unless policy.py's glue tables allow it
(`tensor_method_is_compute`, as on the Python side); layout conversions (`.to_sparse()`) are left
to the run-time layout check. Operators on
tensors (`x * (x > 0)`, `out += b`, `-x`: arithmetic, comparison, bitwise, compound assignment)
in host code are ATen calls too (`static.cpp_torch_op`): which expressions are tensors is inferred
from declarations by `static/cpp_tensors.py` (`x.size(0)`, `x.numel()`, `x.data_ptr<float>() + i`
are not). Member functions defined in class bodies are host or device code by their own
qualifiers (`cpp_scan.scan_blocks`: a `__device__` member of a functor is device code, not host
text), and a member's unqualified calls may reach its own class's members (`class_members`).
Overloads are not resolved: a candidate's own function that shadows an ATen or libc name is
trusted to be its own.

File, process and thread functions (`banned_name_uses`) are matched by their *name* as a token in
host code, whatever the syntax around it: `fopen(`, `std::fopen(`, `::fopen(`, `(fopen)(`, `&fopen`,
`g(fopen)`, `decltype(&popen)`, `thrd_create`, `pthread_*`, `clone3`, `posix_spawn`, `exec*`,
`dlopen`/`dlsym`. Members (`x.clone()`, `f->open()`), names that merely contain the word
(`my_fopen_count`), device code and preprocessor lines (`#include <sys/syscall.h>`) are not
matches; common words that also name such functions (`open`, `remove`, `rename`, `link`, `kill`,
`signal`, `clone`) count only where they are called or taken as a value (`std::remove(first,
last, v)`, the algorithm, is not), and `std::` names (`thread`, `async`, `ofstream`, `filesystem`)
only under `std::` (or an alias of it) or after `using namespace std;`/`using std::thread;`.

libtorch's module API is ATen work (`_library_objects`): any name under `torch::nn` (also through
`namespace x = torch::nn;` or `using namespace torch;`), and `.forward(`/`->forward(` where the
candidate defines no `forward` of its own. A pointer to an ATen member (`&at::Tensor::relu`, `&T::relu`
through `using T = at::Tensor;`/`typedef`, `&decltype(x)::relu`) is an ATen reference unless it
names metadata (`&at::Tensor::numel`). Standard function objects (`std::multiplies<>{}(x, m)`,
`std::greater<>()(x, 0)`) count when applied to a tensor: at once, stored in a name and called,
through `std::invoke`, or handed to an algorithm over a tensor container
(`std::transform(ts.begin(), ...)`); on numbers they are arithmetic (common in honest code, also
on the host: `std::accumulate(sizes.begin(), sizes.end(), 1, std::multiplies<int64_t>())`).

Not covered: standard function objects that reach a tensor another way (a template parameter, a
container of function objects, an algorithm over iterators of no declared tensor container),
pointers to members whose class is reached by other means than an alias, `decltype` or an ATen
qualifier (a template parameter deduced as `at::Tensor`), and file or thread functions reached
through a name the text never spells (a symbol looked up at run time needs `dlsym`, which is
matched).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from cudice.verifier.source.result import Diagnostic, Severity
from cudice.verifier.static.cpp_names import (
    ATEN_AMBIGUOUS,
    ATEN_UNQUALIFIED,
    CPP_GLUE,
    CPP_GLUE_STRICT,
    CUDA_NS_GLUE,
    aten_patterns,
    is_glue,
    is_nn,
)
from cudice.verifier.static.cpp_preprocess import (
    ATEN_ROOTS,
    ATEN_SUBNAMESPACES,
    aten_namespaces,
    aten_using_declarations,
)
from cudice.verifier.static.cpp_scan import CppFunction, Unit, blank_directives, diag
from cudice.verifier.static.cpp_tensors import (
    method_receiver_is_tensor,
    returns_tensor,
    tensor_names,
    tensor_operators,
)
from cudice.verifier.static.policy import (
    COMPUTE_METHODS,
    TENSOR_METADATA_METHODS,
    Strictness,
    tensor_method_is_compute,
)

_HOST_RULES: tuple[tuple[str, re.Pattern[str], str], ...] = (
    (
        "static.cpp_stream_create",
        re.compile(r"\b(?:cudaStreamCreate\w*|cuStreamCreate\w*|getStreamFromPool|cudaStreamBeginCapture)\b"),
        "`{m}` creates or takes a separate CUDA stream; work on it escapes the timed stream "
        "(timing events on the current stream see ~0 ms). Launch on `at::cuda::getCurrentCUDAStream()`.",
    ),
    (
        "static.cpp_std_thread",
        re.compile(
            r"#\s*pragma\s+omp\b|\bstd::launch::async\b|"
            r"\b(?:cudaLaunchHostFunc|cudaStreamAddCallback|cuLaunchHostFunc)\b"
        ),
        "`{m}` starts host threads or processes (or runs host code on the driver's thread); work "
        "deferred to them is not measured. "
        "Do the work in CUDA kernels launched from the calling thread.",
    ),
    (
        "static.sleep",
        re.compile(r"\b(?:usleep|nanosleep|sleep|Sleep)\s*\(|\bsleep_(?:for|until)\b"),
        "`{m}` sleeps on the host; a kernel file has no reason to, and it skews timing.",
    ),
    (
        "static.timer_patch",
        re.compile(r"\bdlsym\b|\bRTLD_NEXT\b"),
        "`{m}` looks up or replaces symbols at run time (how CUDA timing/sync calls are interposed).",
    ),
    (
        "static.cpp_torch_op",
        re.compile(
            r"\bmodule_?\s*::\s*import\s*\(|\b(?:py|pybind11)::(?:eval\w*|exec|getattr|globals)\b|"
            r"\bPy(?:Import|Run|Eval|Frame|Object|Sys|Module|Code|Dict|Callable|Unicode)_\w+|"
            r"\.attr\s*\((?![^()]*\)\s*=(?!=))|\bscoped_interpreter\b|(?<![\w.>])getattr\s*\("
        ),
        "`{m}` calls back into Python from C++ (a module import, an attribute looked up on a Python "
        "object): the Python it reaches — `torch.relu`, the reference — would do the work, unseen by the "
        "Python-side checks. Compute in the kernel; pybind11 only exposes functions (`m.def`).",
    ),
    (
        "static.dispatcher_override",
        re.compile(
            r"\b_?TORCH_LIBRARY(?:_IMPL|_FRAGMENT)?\w*\s*\(|\b(?:c10|torch)::(?:RegisterOperators|Dispatcher|Library)\b|"
            r"\bRegisterOperators\s*\("
        ),
        "`{m}` registers operators with PyTorch's dispatcher: an implementation registered for `aten` "
        "replaces the op everywhere in the process, including the ops the verifier uses to compare "
        "outputs (e.g. `aten::allclose`). Expose kernels through `functions=` or `PYBIND11_MODULE` only.",
    ),
)
_PROC_PATH = re.compile(r"\"/proc/")
_PRAGMA_OMP = re.compile(r"\b_Pragma\s*\(\s*\"\s*omp\b")
_CACHE_DECL = re.compile(
    r"\bstatic\s+(?:thread_local\s+)?(?:const\s+)?(?:std::(?:unordered_map|map|vector|unordered_set|set|"
    r"optional|shared_ptr|unique_ptr|pair)\b|(?:torch|at|c10)::(?:Tensor|optional)\b|"
    r"(?:void|float|double|int|half|__half|char|uint8_t|int64_t|long|size_t|uintptr_t)\s*\*+\s*\w+\s*[;=\[{])"
)
_GLOBAL_CACHE = re.compile(
    r"^[ \t]*(?:static\s+)?(?:std::(?:unordered_map|map|unordered_set|set|vector)\s*<|"
    r"(?:torch|at)::Tensor\s+\w+\s*[;={])",
    re.MULTILINE,
)
_PTR_KEY = re.compile(r"(?:\[|\.(?:find|count|emplace|insert|at|contains)\s*\()\s*[\w.>-]*data_ptr\b")
_TIMER_FUNCS = frozenset(
    {
        "cudaEventElapsedTime",
        "cudaEventRecord",
        "cudaEventSynchronize",
        "cudaDeviceSynchronize",
        "cudaStreamSynchronize",
        "cuEventElapsedTime",
        "cuCtxSynchronize",
        "clock_gettime",
        "gettimeofday",
    }
)
_METHOD_CALL = re.compile(r"(?:\.|->)\s*([A-Za-z_]\w*)\s*\(")
_UNQUALIFIED_CALL = re.compile(r"(?<![\w.>:])([A-Za-z_]\w*)\s*\(")
_TENSOR_DECL = re.compile(
    r"\b(?:torch|at)::Tensor\s*(?:const\s*)?[&*]*\s*([A-Za-z_]\w*)|"
    r"\bstd::vector\s*<\s*(?:torch|at)::Tensor\s*>\s*(?:const\s*)?&?\s*([A-Za-z_]\w*)|"
    r"\b(?:at|torch)::TensorList\s*&?\s*([A-Za-z_]\w*)|"
    r"\bauto\s*[&*]*\s*([A-Za-z_]\w*)\s*=\s*(?:torch|at)::"
)
_AUTO_FROM = re.compile(r"\bauto\s*[&*]*\s*([A-Za-z_]\w*)\s*=\s*([A-Za-z_]\w*)\s*[.;\[]")
_TENSOR_ARG = re.compile(r"[&*(\s]*([A-Za-z_]\w*)\s*(?:\[[^\]]*\])?((?:\s*\.\s*\w+\s*\([^()]*\))*)\s*\)*")
_TENSOR_METHODS = frozenset(
    {
        "contiguous",
        "view",
        "reshape",
        "t",
        "transpose",
        "permute",
        "clone",
        "to",
        "expand",
        "narrow",
        "select",
        "slice",
        "flatten",
        "squeeze",
        "unsqueeze",
        "detach",
        "float",
        "half",
        "double",
        "view_as",
        "expand_as",
        "type_as",
        "cuda",
    }
)
# Layout conversions change how an output is stored, not what it holds: the run-time checks judge
# the output's layout (`dynamic.output_not_plain_tensor`), as the Python glue tables leave `.to()`.
_LAYOUT_CONVERSIONS = frozenset(
    {"to_sparse", "to_sparse_csr", "to_sparse_csc", "to_sparse_bsr", "to_sparse_bsc", "to_dense", "to_mkldnn"}
)
_LOCAL_NAME = re.compile(r"\bauto\s*[&*]*\s*([A-Za-z_]\w*)\s*=")
# vendor libraries' entry points (C names): cuBLAS(Lt), cuDNN, cuSPARSE, cuFFT, cuSOLVER, cuTENSOR,
# NPP's image and signal functions (`nppi…`, `npps…`); build/host_symbols.py reads the same names
VENDOR_PREFIXES = r"(?:cublas|cudnn|cusparse|cufft|cusolver|cutensor|npp[is])"
_LIB_CALL = re.compile(rf"\b{VENDOR_PREFIXES}\w*\s*\(")
LOW_PRECISION = re.compile(
    r"\b(?:__half2?|half2?|__nv_bfloat162?|nv_bfloat162?|__float2half\w*|__float2bfloat16\w*|__h(?:add|mul|fma|sub)2?)\b|"
    r"\b(?:at|torch)::k(?:Half|BFloat16|Float16)\b"
)


def host_bodies(u: Unit) -> Iterable[tuple[CppFunction, str]]:
    for f in u.functions:
        if not f.is_device:
            yield f, u.code[f.body_start : f.body_end]


def _outside_functions(u: Unit, *, headers: bool = False) -> tuple[CppFunction, str]:
    """The text outside function bodies (member functions defined in class bodies included) — class
    data members, lambdas and initialisers at namespace scope — as one more body to judge (bodies
    blanked, offsets kept; with `headers`, the functions' headers too: their parameters belong to
    their own bodies)."""
    chars = list(u.code)
    for f in u.functions:
        start = f.body_start
        if headers:
            at = u.code.rfind(f.header, 0, f.body_start)
            start = at if at >= 0 else start
        for i in range(start, f.body_end):
            if chars[i] != "\n":
                chars[i] = " "
    return CppFunction(
        "(a struct, lambda or initialiser at namespace scope)", "", 0, len(u.code), False
    ), "".join(chars)


def defined_names(units: Sequence[Unit]) -> set[str]:
    """Names the sources define as functions (with a body) outside class bodies: a call to one is the
    candidate's own. A member defined in its class body (`struct C { static float relu(float); }`)
    is not: outside its class, `relu(x)` on a tensor still finds `at::relu` (`class_members`)."""
    return {f.name for u in units for f in u.functions if not f.cls}


def class_members(units: Sequence[Unit]) -> dict[str, set[str]]:
    """Class name → the member functions defined in its body: names its own members' calls reach."""
    out: dict[str, set[str]] = {}
    for u in units:
        for f in u.functions:
            if f.cls:
                out.setdefault(f.cls, set()).add(f.name)
    return out


def pattern_findings(u: Unit, level: Strictness, defined: set[str]) -> list[Diagnostic]:
    diags: list[Diagnostic] = []
    for code, rx, msg in _HOST_RULES:
        for m in rx.finditer(u.code):
            sev = _macro_severity(u, m.start(), code)
            note = _MACRO_NOTE if u.from_macro(m.start()) else ""
            diags.append(diag(u, m.start(), code, msg.format(m=m.group(0).strip()) + note, sev))
    diags += _file_process_findings(u, defined)
    for m in _PRAGMA_OMP.finditer(u.src.text):
        diags.append(
            diag(
                u,
                m.start(),
                "static.cpp_std_thread",
                '`_Pragma("omp ...")` starts OpenMP host threads; work deferred to them is not measured. '
                "Do the work in CUDA kernels launched from the calling thread.",
                in_source=True,
            )
        )
    diags += _cache_findings(u)
    for f in u.functions:
        if f.name in _TIMER_FUNCS and not f.cls:  # a member `C::cudaEventRecord` replaces no symbol
            diags.append(
                diag(
                    u,
                    f.body_start,
                    "static.timer_patch",
                    f"defines `{f.name}`, a CUDA timing/synchronisation API name: this interposes "
                    "the real function and can fake the measurement.",
                )
            )
    lib_sev = Severity.WARNING if level is Strictness.LENIENT else Severity.ERROR
    glue = CPP_GLUE_STRICT if level is Strictness.STRICT else CPP_GLUE
    macros = [
        (CppFunction("#define", "", m.start(), m.end(), False), m.group(0))
        for m in re.finditer(r"^[ \t]*#[ \t]*define\b(?:[^\n]*\\\n)*[^\n]*", u.code, re.MULTILINE)
    ]
    roots = aten_namespaces(u.code)
    aten_call, aten_ref = aten_patterns(roots)
    imported = frozenset(
        n
        for n in aten_using_declarations(u.code, roots)
        if not n[:1].isupper() and n not in glue and n not in CUDA_NS_GLUE
    )
    tensor_fns = {f.name for f in u.functions if not f.is_device and returns_tensor(f.header)}
    members = class_members([u])
    member_names = {n for names in members.values() for n in names}
    nn_names = {m.group(1) for m in _NS_ALIAS_ANY.finditer(u.code) if "nn" in m.group(2).split("::")}
    tensor_types = aten_type_aliases(u.code, roots)
    for f, body in [*host_bodies(u), _outside_functions(u, headers=True)]:
        fn = f.qualname
        for op in tensor_operators(f.header, body, roots, tensor_fns):
            diags.append(
                diag(
                    u,
                    f.body_start + op.offset,
                    "static.cpp_torch_op",
                    f"`{op.op}` on the tensor `{op.operand}` in host function `{fn}` runs an ATen op: "
                    "`at::Tensor` overloads C++ operators, so PyTorch does this work, not the candidate's "
                    "kernel. Compute it in a `__global__` kernel; host code may only allocate outputs "
                    "(`torch::empty_like`), read metadata (`x.size(0)`, `x.numel()`) and launch kernels.",
                    lib_sev,
                )
            )
    for f, body in [*host_bodies(u), *macros, _outside_functions(u)]:
        for m in aten_call.finditer(body):
            root, ns, name = m.group("root"), _scope(m.group("root"), m.group(2)), m.group(3)
            if is_glue(ns, name, glue) or (root not in ATEN_ROOTS and (name in defined or "std::" in ns)):
                continue
            diags.append(
                diag(
                    u,
                    f.body_start + m.start(),
                    "static.cpp_torch_op",
                    f"`{m.group(0).rstrip('( ')}` in host function `{f.qualname}` runs an ATen op: "
                    "PyTorch does this work, not the candidate's kernel.",
                    lib_sev,
                )
            )
        for m in aten_ref.finditer(body):
            root, ns, name = m.group("root"), _scope(m.group("root"), m.group(2)), m.group(3)
            if (
                is_glue(ns, name, glue)
                or re.match(r"k[A-Z]", name)
                or (root not in ATEN_ROOTS and (name in defined or "std::" in ns))
            ):
                continue
            start = m.start() + len(m.group(0)) - len(m.group(0).lstrip())
            diags.append(
                diag(
                    u,
                    f.body_start + start,
                    "static.cpp_torch_op",
                    f"`{m.group(0).strip()}` in host function `{f.qualname}` takes an ATen op as a value "
                    "(a function pointer called later): PyTorch does this work, not the candidate's "
                    "kernel.",
                    lib_sev,
                )
            )
        tensors, containers = tensor_names(f.header, body, roots, tensor_fns)
        for m in _METHOD_CALL.finditer(body):
            if m.group(1) in COMPUTE_METHODS or (
                m.group(1) not in _LAYOUT_CONVERSIONS
                and tensor_method_is_compute(m.group(1), level)
                and method_receiver_is_tensor(body, m.start(), tensors, containers)
            ):
                diags.append(
                    diag(
                        u,
                        f.body_start + m.start(),
                        "static.cpp_torch_op",
                        f"`.{m.group(1)}(...)` in host function `{f.qualname}` runs an ATen op: "
                        "PyTorch does this work, not the candidate's kernel.",
                        lib_sev,
                    )
                )
        own = defined | members.get(f.cls, set())  # in a member, its class's members are its own too
        for off, name in _unqualified_aten_calls(f.header + " " + body, len(f.header) + 1, own, imported):
            diags.append(
                diag(
                    u,
                    f.body_start + off,
                    "static.cpp_torch_op",
                    f"`{name}(...)` in host function `{f.qualname}` is an unqualified call that C++ resolves "
                    f"to the ATen op `at::{name}` (argument-dependent lookup on a tensor argument, or a "
                    "`using namespace`): PyTorch does this work, not the candidate's kernel.",
                    lib_sev,
                )
            )
        for off, what, why in _library_objects(body, roots, nn_names, member_names, tensor_types):
            diags.append(
                diag(
                    u,
                    f.body_start + off,
                    "static.cpp_torch_op",
                    f"`{what}` in host function `{f.qualname}` {why}: PyTorch does this work, not the "
                    "candidate's kernel. Compute it in a `__global__` kernel.",
                    lib_sev,
                )
            )
        for off, what in _std_functor_calls(f.header + " " + body, len(f.header) + 1):
            diags.append(
                diag(
                    u,
                    f.body_start + off,
                    "static.cpp_torch_op",
                    f"`{what}(...)` in host function `{f.qualname}` applies a standard function object to "
                    "a tensor, which runs `at::Tensor`'s overloaded operator: PyTorch does this work, not "
                    "the candidate's kernel. Compute it in a `__global__` kernel.",
                    lib_sev,
                )
            )
        for m in _LIB_CALL.finditer(body):
            diags.append(
                diag(
                    u,
                    f.body_start + m.start(),
                    "static.cpp_torch_op",
                    f"`{m.group(0).rstrip('( ')}` in `{f.qualname}` hands the work to a vendor library "
                    "(cuBLAS/cuDNN/cuSOLVER/NPP/…), not the candidate's kernel.",
                    lib_sev,
                )
            )
    return diags


# `asm`/`__asm__` outside device code: an assembler label binds a declaration to any symbol (libc, the
# Python C API, ATen's mangled names) under a harmless name, and inline assembly makes system calls;
# `__attribute__((weakref("fopen")))`, `alias(...)`, `#pragma weak`/`redefine_extname` and glibc's
# internal entry points (`__libc_dlsym`) rename symbols the same way.
_HOST_ASM = re.compile(
    r"\b(?:__asm__|__asm|asm)\b|\b(?:weakref|alias)\s*\(|#\s*pragma\s+(?:weak|redefine_extname)\b|"
    r"\b__libc_\w+|\bdlvsym\b"
)
_FP, _THREAD = "static.cpp_file_or_process", "static.cpp_std_thread"
# C library and POSIX functions a kernel file never needs, matched as a *name* wherever host code
# spells it (`fopen(`, `std::fopen(`, `::fopen(`, `(fopen)(`, `&fopen`, `f(fopen)`, `using
# std::fopen;`): a function is reached by its name however the syntax around it looks. Members
# (`x.clone()`, `p->open()`) and names qualified by another namespace or class (`mine::fopen`) are
# not these functions.
_STRONG_NAMES: dict[str, str] = {
    **dict.fromkeys(
        "fopen fopen64 freopen freopen64 fdopen popen pclose posix_spawn posix_spawnp execl execle execlp "
        "execv execve execvp execvpe execveat fexecve dlopen dlmopen dlsym dlvsym system _exit _Exit "
        "quick_exit at_quick_exit atexit killpg setsid ptrace syscall prctl chdir fchdir setenv "
        "putenv unsetenv clearenv open64 openat openat2 creat creat64 unlinkat unlink renameat renameat2 "
        "mkdir mkdirat rmdir symlink symlinkat linkat chmod fchmod fchmodat chown fchown lchown "
        "ftruncate sigaction tmpfile tmpnam mkstemp mkdtemp memfd_create mmap mmap64 dup2 dup3".split(),
        _FP,
    ),
    **dict.fromkeys(
        "thrd_create thrd_detach fork vfork __clone clone3 posix_spawn_file_actions_init".split(), _THREAD
    ),
}
# Common words that name these functions too: counted only where they are called or taken as a
# value (`open(`, `(open)(`, `f(open)`, `= remove;`), not as a variable or a type's member.
_WEAK_NAMES: dict[str, str] = {
    **dict.fromkeys("open remove rename link kill signal raise truncate daemon".split(), _FP),
    "clone": _THREAD,
}
# `std::` types and functions that only count under `std::` (or after `using namespace std;` /
# `using std::thread;`): bare `thread`, `async`, `filesystem` are ordinary words.
_STD_NAMES: dict[str, str] = {
    **dict.fromkeys("thread jthread async".split(), _THREAD),
    **dict.fromkeys(
        "fstream ifstream ofstream basic_fstream basic_ifstream basic_ofstream filebuf basic_filebuf "
        "filesystem system quick_exit _Exit".split(),
        _FP,
    ),
}
_BANNED_TOKEN = re.compile(
    r"(?<![\w$])(?:pthread_[A-Za-z_]\w*|"
    + "|".join(sorted({*_STRONG_NAMES, *_WEAK_NAMES, *_STD_NAMES}, key=len, reverse=True))
    + r")(?![\w$])"
)
_QUALIFIER = re.compile(r"(?:([A-Za-z_]\w*)\s*)?::\s*$")
_STD_ALIAS = re.compile(r"\bnamespace\s+([A-Za-z_]\w*)\s*=\s*(?:::\s*)?std\s*;")
_MESSAGES = {
    _FP: "`{m}` uses files, programs or process control from the extension (called, or taken as a "
    "function pointer): a kernel file needs none of them, and they can forge the verifier's result, "
    "leave files behind (a `.pth` in site-packages runs in every later Python) or outlive the job. "
    "Report errors with `TORCH_CHECK`.",
    _THREAD: "`{m}` starts host threads or processes (called, or taken as a function pointer); work "
    "deferred to them is not measured. Do the work in CUDA kernels launched from the calling thread.",
}


def banned_name_uses(u: Unit, defined: set[str]) -> list[tuple[int, str, str]]:
    """(offset in `u.code`, name as spelled, code) of every use of a file, process or thread API
    name in host code (see `_STRONG_NAMES`); preprocessor lines are skipped (`#include
    <sys/syscall.h>`), a macro's use is read in its expansion."""
    code = blank_directives(u.code)
    device = [(f.body_start, f.body_end) for f in u.functions if f.is_device]
    stds = {"std", *(m.group(1) for m in _STD_ALIAS.finditer(code))}
    std_alt = "|".join(sorted(map(re.escape, stds)))
    imported_std = re.search(rf"\busing\s+namespace\s+(?:::\s*)?(?:{std_alt})\b", code) is not None
    roots = aten_namespaces(code)
    own_members = {n for names in class_members([u]).values() for n in names}
    out: list[tuple[int, str, str]] = []
    for m in _BANNED_TOKEN.finditer(code):
        name, start = m.group(0), m.start()
        if any(a <= start < b for a, b in device):
            continue
        before = code[max(0, start - 200) : start].rstrip()
        if before.endswith((".", "->")) or before.endswith(".template") or before.endswith("->template"):
            continue  # a member: `x.clone()`, `f->open()`
        q = _QUALIFIER.search(before)
        qual = None if q is None else (q.group(1) or "")
        prev = before[: q.start()].rstrip() if q is not None else before
        if qual and qual not in stds and (qual in roots or name in defined or qual[:1].isupper()):
            continue  # ATen's (`at::clone`: the ATen rules' finding), the candidate's own, a class's
        after = code[m.end() : m.end() + 200].lstrip()
        is_std = qual is not None and qual in stds
        if name in _STD_NAMES and name not in _STRONG_NAMES:
            imported = imported_std or re.search(
                rf"\busing\s+(?:::\s*)?(?:{std_alt})::{re.escape(name)}\s*;", code
            )
            if not (is_std or (qual is None and imported)):
                continue
        elif name in _WEAK_NAMES:
            if name == "remove" and (is_std or qual is None) and _top_level_commas(after) > 0:
                continue  # `std::remove(first, last, value)`: the algorithm, not the file call
            called = after.startswith("(") or (
                prev.endswith("(") and after.startswith(")") and after[1:].lstrip().startswith("(")
            )  # `open(...)`, `(open)(...)`
            variable = re.search(rf"[\w>*&]\s+{name}\s*(?:[=;,\[{{]|\)\s*[;{{,])", code) is not None
            as_value = (
                not variable  # `bool open = true; if (open)` is a variable, not the function
                and after[:1] in (")", ",", ";")
                and (prev.endswith(("&", "=", ",", "(")) or re.search(r"\breturn$", prev) is not None)
            )
            if not (called or as_value) or (qual is None and (name in defined or name in own_members)):
                continue
        elif qual is None and name in defined:
            continue  # the candidate's own function of that name (`::name` still reaches libc's)
        code_ = (
            _THREAD
            if name.startswith("pthread_")
            else (_STRONG_NAMES.get(name) or _WEAK_NAMES.get(name) or _STD_NAMES[name])
        )
        spelled = (f"{qual}::" if qual else ("::" if qual == "" else "")) + name
        out.append((start, spelled, code_))
    return out


def _top_level_commas(after: str) -> int:
    """Commas at the top level of the argument list that `after` (text starting with `(`) opens."""
    depth, commas = 0, 0
    for ch in after[:2000]:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                break
        elif ch == "," and depth == 1:
            commas += 1
    return commas


def _file_process_findings(u: Unit, defined: set[str]) -> list[Diagnostic]:
    diags: list[Diagnostic] = []
    device = [(f.body_start, f.body_end) for f in u.functions if f.is_device]
    for m in _HOST_ASM.finditer(u.code):
        if not any(a <= m.start() < b for a, b in device):
            diags.append(
                diag(
                    u,
                    m.start(),
                    "static.cpp_file_or_process",
                    f"`{m.group(0).rstrip('( ')}` outside device code: an assembler label, a symbol alias or "
                    "a libc entry point calls any symbol (a C library, Python or ATen function) under a "
                    "harmless-looking name, and inline assembly can make system calls, so the checks cannot "
                    "see what runs. Keep `asm` inside `__device__`/`__global__` code.",
                )
            )
    for off, spelled, code in banned_name_uses(u, defined):
        diags.append(diag(u, off, code, _MESSAGES[code].format(m=spelled)))
    for m in _PROC_PATH.finditer(u.src.text):
        diags.append(
            diag(
                u,
                m.start(),
                "static.cpp_file_or_process",
                "a `/proc/...` path: reading the verifier's process information (its arguments, its "
                "parent's environment) has no place in a kernel file.",
                in_source=True,
            )
        )
    return diags


def _cache_findings(u: Unit) -> list[Diagnostic]:
    fn_spans = [(f.body_start, f.body_end) for f in u.functions]
    hits = [m.start() for m in _CACHE_DECL.finditer(u.code)]
    hits += [
        m.start() + len(m.group(0)) - len(m.group(0).lstrip())
        for m in _GLOBAL_CACHE.finditer(u.code)
        if not any(a <= m.start() < b for a, b in [*fn_spans, *u.blocks])
    ]
    hits = [off for off in hits if not _declares_function(u.code, off)]
    hits += [m.start() for m in _PTR_KEY.finditer(u.code)]
    return [
        diag(
            u,
            off,
            "static.cpp_pointer_cache",
            "state that outlives a call (a `static`/global container, tensor or pointer, or a lookup "
            "keyed by `data_ptr()`): results can be cached by input address and returned without "
            "computing. Keep per-call data local; constants belong in `__constant__` memory."
            + (_MACRO_NOTE if u.from_macro(off) else ""),
            _macro_severity(u, off, "static.cpp_pointer_cache"),
        )
        for off in sorted(set(hits))
    ]


# Rules whose cheat the run-time layer measures from GPU evidence (a side stream:
# `dynamic.side_stream`; a kept output: `dynamic.nondeterministic`). When only a macro's expansion
# shows them they are warnings, and the `dyn_*` corpus keeps those run-time checks exercised.
# Every other rule's findings are errors however they are spelled.
_RUNTIME_OBSERVED = frozenset({"static.cpp_stream_create", "static.cpp_pointer_cache"})
_MACRO_NOTE = " (seen in the expansion of a macro invoked here)"


_NS_ALIAS_ANY = re.compile(r"\bnamespace\s+([A-Za-z_]\w*)\s*=\s*(?:::\s*)?([A-Za-z_][\w:]*)\s*;")
_TYPE_ALIAS = re.compile(
    r"\busing\s+([A-Za-z_]\w*)\s*=\s*([^;]*);|\btypedef\s+([^;]*?)\s*\b([A-Za-z_]\w*)\s*;"
)
# `&Q::name`: a pointer to member (or a qualified function taken by address)
_MEMBER_POINTER = re.compile(
    r"&\s*(?:typename\s+)?((?:(?:decltype\s*\([^;{}]*?\)|[A-Za-z_]\w*)\s*(?:<[^;{}()]*>)?\s*::\s*)+)"
    r"(?:template\s+)?([a-z_]\w*)\b(?!\s*::)"
)
# Tensor members a pointer to member may name: metadata, no compute.
_TENSOR_METADATA_MEMBERS = TENSOR_METADATA_METHODS | {
    "sizes",
    "strides",
    "options",
    "scalar_type",
    "device",
    "dtype",
    "is_cuda",
    "defined",
    "const_data_ptr",
    "mutable_data_ptr",
}
_FORWARD_CALL = re.compile(r"(?:\.|->)\s*forward\s*\(")
_FUNCTOR_NAMES = (
    "plus|minus|multiplies|divides|modulus|negate|equal_to|not_equal_to|greater|less|greater_equal|"
    "less_equal|logical_and|logical_or|logical_not|bit_and|bit_or|bit_xor|bit_not"
)
_STD_FUNCTOR = re.compile(rf"\bstd::({_FUNCTOR_NAMES})\s*<[^;{{}}()]*>\s*(?:\{{\s*\}}|\(\s*\))\s*\(")
# `auto mul = std::multiplies<>{};`, `std::multiplies<> mul;`, `std::plus<at::Tensor> add{};`
_STORED_FUNCTOR = re.compile(
    rf"\bstd::({_FUNCTOR_NAMES})\s*<[^;{{}}()]*>\s*([A-Za-z_]\w*)\s*(?:;|\{{\s*\}}|\(\s*\)|=)|"
    rf"\bauto\s*&?\s*([A-Za-z_]\w*)\s*=\s*std::({_FUNCTOR_NAMES})\s*<"
)


def aten_type_aliases(code: str, roots: set[str]) -> set[str]:
    """Names a `using X = ...;`/`typedef ... X;` gives a type of ATen's namespaces (`using T =
    at::Tensor;`) or a `decltype(...)` (`using T = decltype(x);`)."""
    alt = "|".join(sorted(map(re.escape, roots)))
    aten = re.compile(rf"(?:^|[^\w:])(?:::\s*)?(?:{alt})::|\bdecltype\b|\bTensor\b")
    out: set[str] = set()
    for _ in range(3):  # aliases of aliases
        for m in _TYPE_ALIAS.finditer(code):
            name, rhs = (m.group(1), m.group(2)) if m.group(1) else (m.group(4), m.group(3))
            if aten.search(rhs) or any(re.search(rf"\b{re.escape(a)}\b", rhs) for a in out):
                out.add(name)
    return out


def _library_objects(
    body: str, roots: set[str], nn_names: set[str], own_members: set[str], tensor_types: set[str]
) -> list[tuple[int, str, str]]:
    """(offset, text, why) of libtorch module uses (any name under `torch::nn`, `->forward(` on an
    object that is no class of the candidate's) and pointers to ATen's members (`&at::Tensor::relu`,
    `&T::relu` through an alias, `&decltype(x)::relu`) in one host body."""
    out: list[tuple[int, str, str]] = []
    alt = "|".join(sorted(map(re.escape, roots | nn_names)))
    for m in re.finditer(rf"\b(?:{alt})(?:::[A-Za-z_]\w*)+", body):
        parts = m.group(0).split("::")
        if (
            parts[0] in nn_names
            or is_nn("::".join(parts[:-1]) + "::")
            or (parts[0] == "nn" and "nn" in roots)
        ):
            out.append(
                (
                    m.start(),
                    m.group(0),
                    "uses libtorch's `torch::nn` module API (modules and their `forward` run ATen ops)",
                )
            )
    if "forward" not in own_members:
        for m in _FORWARD_CALL.finditer(body):
            out.append(
                (
                    m.start(),
                    m.group(0).strip("(").strip(),
                    "runs a module's `forward`, which is no function of the candidate's",
                )
            )
    for m in _MEMBER_POINTER.finditer(body):
        qual, name = re.sub(r"\s+", "", m.group(1)), m.group(2)
        first = re.split(r"[<:(]", qual, maxsplit=1)[0]
        aten_type = first in roots or first in tensor_types or first == "Tensor"
        unknown = first in ("decltype", "std", "typename")
        if first in roots and body[m.end() :].lstrip()[:1] in (";", ",", ")"):
            continue  # `&at::relu;`: the qualified reference rule's finding
        if (aten_type and name not in _TENSOR_METADATA_MEMBERS and not is_glue(qual, name, CPP_GLUE)) or (
            unknown and name in COMPUTE_METHODS
        ):
            out.append(
                (
                    m.start(),
                    f"&{qual}{name}",
                    "takes a pointer to an ATen member function (called later through `.*`/`std::invoke`)",
                )
            )
    return out


def _std_functor_calls(text: str, body_offset: int) -> list[tuple[int, str]]:
    """(offset in the body, functor) of standard function objects (`std::multiplies<>`, ...) applied
    to a tensor: called at once (`std::multiplies<>{}(x, m)`), stored and called (`auto mul =
    std::multiplies<>{}; mul(x, m)`), through `std::invoke(f, x, m)`, or handed to an algorithm over
    a tensor container (`std::transform(ts.begin(), ts.end(), out.begin(), std::negate<>())`). On
    numbers (`std::plus<float>()(a, b)`, `std::accumulate(sizes.begin(), sizes.end(), 1,
    std::multiplies<int64_t>())`) they are plain arithmetic."""
    tensors: set[str] = set()
    for m in _TENSOR_DECL.finditer(text):
        tensors.update(g for g in m.groups() if g)
    for _ in range(2):
        tensors.update(m.group(1) for m in _AUTO_FROM.finditer(text) if m.group(2) in tensors)
    out: list[tuple[int, str]] = []
    for m in _STD_FUNCTOR.finditer(text, body_offset):
        if _tensor_arguments(text, m.end(), tensors):
            out.append((m.start() - body_offset, f"std::{m.group(1)}"))
    stored = {  # name -> functor
        (m.group(2) or m.group(3)): (m.group(1) or m.group(4))
        for m in _STORED_FUNCTOR.finditer(text, body_offset)
    }
    for name, functor in stored.items():
        for m in re.finditer(rf"(?<![\w.>:]){re.escape(name)}\s*\(", text[body_offset:]):
            if _tensor_arguments(text, body_offset + m.end(), tensors):
                out.append((m.start(), f"std::{functor}"))
    functor_arg = re.compile(
        rf"\bstd::({_FUNCTOR_NAMES})\s*<|(?<![\w.>:])({'|'.join(map(re.escape, stored)) or '(?!)'})\b"
    )
    containers = {m.group(2) or m.group(3) for m in _TENSOR_DECL.finditer(text) if m.group(2) or m.group(3)}
    # a range over a tensor container: `ts.begin()`, `std::begin(ts)`, `ts` itself (`std::ranges`)
    ranges = re.compile(rf"\b({'|'.join(map(re.escape, containers)) or '(?!)'})\b")
    for m in re.finditer(r"\bstd::(?:ranges::)?(\w+)\s*(?:<[^;{}()]*>\s*)?\(", text[body_offset:]):
        start = body_offset + m.end()
        call = text[start : _statement_end_of(text, start)]
        f = functor_arg.search(call)
        if f is None:
            continue
        functor = f.group(1) or stored.get(f.group(2) or "", "")
        if (m.group(1) == "invoke" and _tensor_arguments(text, start, tensors)) or ranges.search(call):
            out.append((m.start(), f"std::{functor}"))
    return out


def _statement_end_of(text: str, start: int) -> int:
    """Where the call whose arguments start at `start` (just past its `(`) ends."""
    depth = 1
    for i in range(start, min(len(text), start + 4000)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return i
    return min(len(text), start + 4000)


def _scope(root: str, ns: str) -> str:
    """The namespaces below ATen's root a call names (`cuda::` for `cuda::blas::gemm` under
    `using namespace at`, whose root is ATen's `cuda`)."""
    return f"{root}::{ns}" if root in ATEN_SUBNAMESPACES else ns


def _macro_severity(u: Unit, offset: int, code: str) -> Severity:
    return Severity.WARNING if code in _RUNTIME_OBSERVED and u.from_macro(offset) else Severity.ERROR


# `<return type> name(<params>)`: the parameters are empty, `void`, or start with a type and a name
# (`const torch::Tensor& x`, `int64_t n`), which a constructor call's arguments (`(10)`, `(x.sizes())`)
# do not.
_DECLARATOR = re.compile(
    r"[A-Za-z_]\w*\s*\(\s*(?:\)|void\s*\)|(?:(?:const|volatile|unsigned|signed|struct)\s+)*[A-Za-z_][\w:]*"
    r"(?:\s*<[^;{}()]*>)?(?:\s*::\s*\w+)*(?:\s+|\s*[&*]+\s*)(?:const\s+)?[A-Za-z_]\w*\s*[,)=\[])"
)


def _declares_function(code: str, offset: int) -> bool:
    """Whether the declaration starting at `offset` declares a function (a vector/tensor *return
    type*, `std::vector<torch::Tensor> f(...)`) rather than a variable."""
    end = len(code)
    for stop in (";", "{", "="):
        i = code.find(stop, offset)
        if i != -1:
            end = min(end, i)
    decl = code[offset:end]
    depth = 0
    for i, ch in enumerate(decl):  # the first `(` outside template brackets starts the declarator
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth <= 0:
            name = re.search(r"[A-Za-z_]\w*\s*$", decl[:i])
            return name is not None and _DECLARATOR.match(decl, name.start()) is not None
    return False


def _unqualified_aten_calls(
    text: str, body_offset: int, defined: set[str], imported: frozenset[str] = frozenset()
) -> list[tuple[int, str]]:
    """(offset in the body, name) of unqualified calls in `text` (header + body) that name ATen ops;
    `imported` are names a using-declaration brought in from ATen (`using at::special_erfcx;`)."""
    tensors: set[str] = set()
    for m in _TENSOR_DECL.finditer(text):
        tensors.update(g for g in m.groups() if g)
    for _ in range(2):
        tensors.update(m.group(1) for m in _AUTO_FROM.finditer(text) if m.group(2) in tensors)
    locals_ = {m.group(1) for m in _LOCAL_NAME.finditer(text)} - tensors
    out: list[tuple[int, str]] = []
    for m in _UNQUALIFIED_CALL.finditer(text, body_offset):
        name = m.group(1)
        if name in imported and name not in defined and name not in locals_:
            out.append((m.start() - body_offset, name))
            continue
        if (
            name in defined
            or name in locals_
            or (name not in ATEN_UNQUALIFIED and name not in ATEN_AMBIGUOUS)
        ):
            continue
        if (
            name in ATEN_AMBIGUOUS
            and name not in ATEN_UNQUALIFIED
            and not _tensor_arguments(text, m.end(), tensors)
        ):
            continue
        if re.search(
            r"(?:\b(?:auto|void|int|float|double|bool|long|size_t|int64_t|Tensor)|[>&*])\s*$",
            text[max(0, m.start() - 40) : m.start()],
        ):
            continue  # a declaration (`Tensor relu(Tensor x);`, `auto sum(...)`), not a call
        out.append((m.start() - body_offset, name))
    return out


def _tensor_arguments(text: str, open_paren_end: int, tensors: set[str]) -> bool:
    """Whether a top-level argument of the call whose `(` ends at `open_paren_end` is a tensor: a tensor
    variable (`x`, `ts[0]`) or one through tensor-returning methods (`x.contiguous()`), not a scalar
    read from one (`x.size(0)`, `x.numel()`)."""
    depth, arg_start = 0, open_paren_end
    for i in range(open_paren_end, min(len(text), open_paren_end + 2000)):
        ch = text[i]
        if ch in "([{":
            depth += 1
        elif ch in ")]}" and depth > 0:
            depth -= 1
        elif ch in ",)" and depth == 0:
            m = _TENSOR_ARG.fullmatch(text[arg_start:i].strip())
            if (
                m
                and m.group(1) in tensors
                and all(name in _TENSOR_METHODS for name in re.findall(r"\.\s*(\w+)", m.group(2) or ""))
            ):
                return True
            if ch == ")":
                return False
            arg_start = i + 1
    return False
