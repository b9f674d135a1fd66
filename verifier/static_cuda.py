"""Static anti-cheat checks over a candidate's C++/CUDA source text (no compiler, regex + braces).

What it finds (codes in docs/diagnostics.md, policy in docs/anticheat.md):
- `static.cpp_stream_create` — streams created or taken from a pool (work escapes the timed stream);
- `static.cpp_std_thread` — `std::thread`/`std::async`/`pthread_create`/`fork`/OpenMP in host code;
- `static.sleep` — `sleep`/`usleep`/`nanosleep`/`sleep_for` in host code;
- `static.cpp_pointer_cache` — `static` or namespace-scope containers/tensors/pointers in host code,
  or a `data_ptr()` used as a lookup key: results cached across calls;
- `static.timer_patch` — `dlsym`/`RTLD_NEXT` or host functions named like CUDA timing/sync APIs
  (symbol interposition);
- `static.cpp_torch_op` — ATen/torch compute calls (`torch::matmul`, `x.sum()`), cuBLAS/cuDNN calls
  in host functions: the library, not the candidate's kernel, does the work;
- `static.kernel_never_launched` — a `__global__` kernel not launched from any host function
  reachable from the functions Python can call (`functions=` / `PYBIND11_MODULE`);
- `static.precision_downgrade` (warning) — half/bfloat16 types or conversions.

What it does not do: it does not preprocess (macros that hide a launch or a call are not
expanded), resolve overloads or templates, or follow calls through function pointers; a
kernel launched only from another kernel (dynamic parallelism) counts as not launched. Those
cases are what the dynamic profiler check (`dynamic_checks.py`) is for.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from cudice.verifier.result import Diagnostic, Location, Severity, Stage
from cudice.verifier.static_policy import COMPUTE_METHODS, Strictness

# (1-based line, 1-based column) in the C++ text → a location in the user's file, or None.
Locator = Callable[[int, int], "Location | None"]


@dataclass(frozen=True, slots=True)
class CppSource:
    """One C++ or CUDA source string of a `load_inline` call, with a way back to the .py file."""

    text: str
    locate: Locator
    is_cuda: bool = True


@dataclass(frozen=True, slots=True)
class CppFunction:
    name: str
    header: str
    body_start: int  # offset of the opening brace in the stripped text
    body_end: int  # offset just past the closing brace
    is_device: bool  # __global__ or __device__ without __host__


@dataclass(slots=True)
class _Unit:
    """One source, comments/strings blanked (offsets preserved), and its functions."""

    src: CppSource
    code: str
    functions: list[CppFunction] = field(default_factory=list)


_COMMENT_OR_STRING = re.compile(
    r"//[^\n]*|/\*.*?\*/|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'", re.DOTALL
)


def blank_comments_and_strings(text: str) -> str:
    """Replace comments and string/char literals by spaces, keeping every offset and newline."""

    def blank(m: re.Match[str]) -> str:
        s = m.group(0)
        if s.startswith('"'):  # keep the quotes so `m.def("name", ...)` stays parseable below
            return '"' + re.sub(r"[^\n]", " ", s[1:-1]) + '"'
        return re.sub(r"[^\n]", " ", s)

    return _COMMENT_OR_STRING.sub(blank, text)


_PREPROCESSOR_LINE = re.compile(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*$", re.MULTILINE)
_HEADER_FN = re.compile(r"\)\s*(?:const|noexcept|override|mutable|->\s*[\w:<>,\s*&]+|\s)*$")
_NS_OR_EXTERN = re.compile(r"(?:namespace\s*[\w:]*|extern\s*\"[^\"]*\")\s*$")


def find_functions(code: str) -> list[CppFunction]:
    """Function definitions at namespace scope (bodies of namespaces/`extern "C"` are scanned)."""
    out: list[CppFunction] = []
    stack: list[str] = []  # 'ns', 'fn', 'other'
    start_of_decl = 0
    fn_start = 0
    fn_header = ""
    for i, ch in enumerate(code):
        if ch == "{":
            if "fn" in stack or "other" in stack:
                stack.append("inner")
                continue
            header = _PREPROCESSOR_LINE.sub("", code[start_of_decl:i])
            if _NS_OR_EXTERN.search(header):
                stack.append("ns")
                start_of_decl = i + 1
            elif _HEADER_FN.search(header) and "(" in header and "=" not in header.split("(")[0]:
                stack.append("fn")
                fn_start, fn_header = i, header.strip()
            else:
                stack.append("other")
        elif ch == "}":
            kind = stack.pop() if stack else "ns"
            if kind == "fn":
                name = _function_name(fn_header)
                if name:
                    dev = ("__global__" in fn_header or "__device__" in fn_header) and "__host__" not in fn_header
                    out.append(CppFunction(name, fn_header, fn_start, i + 1, dev))
            if not stack or stack[-1] == "ns":
                start_of_decl = i + 1
        elif ch == ";" and (not stack or stack[-1] == "ns"):
            start_of_decl = i + 1
    return out


def _function_name(header: str) -> str | None:
    head = re.sub(r"__launch_bounds__\s*\([^)]*\)", " ", header)
    m = re.search(r"([A-Za-z_]\w*)\s*(?:<[^()]*>)?\s*\(", head)
    return m.group(1) if m else None


_GLOBAL_KERNEL = re.compile(r"__global__")


def find_kernels(code: str) -> list[tuple[str, int]]:
    """`(name, offset)` of every `__global__` function (declarations and definitions)."""
    out: list[tuple[str, int]] = []
    for m in _GLOBAL_KERNEL.finditer(code):
        head = code[m.end(): m.end() + 400]
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


def _launches(body: str, kernel: str) -> bool:
    k = re.escape(kernel)
    if re.search(rf"\b{k}\b[^;{{}}]*?<<<", body):
        return True
    return re.search(rf"\b(?:cudaLaunch\w*|cuLaunch\w*)\s*\([^;]*\b{k}\b", body) is not None


_PYBIND_DEF = re.compile(r"\.def\s*\(\s*\"(\w*)\"\s*,\s*&?\s*([\w:]+)")


def exposed_cpp_names(units: Sequence[_Unit], functions: Sequence[str] | None) -> set[str]:
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


def _locate(unit: _Unit, offset: int) -> Location | None:
    line = unit.code.count("\n", 0, offset) + 1
    col = offset - (unit.code.rfind("\n", 0, offset) + 1) + 1
    return unit.src.locate(line, col)


def _diag(unit: _Unit, offset: int, code: str, message: str, severity: Severity = Severity.ERROR) -> Diagnostic:
    return Diagnostic(severity, message, code, Stage.STATIC, _locate(unit, offset))


# -- pattern rules: (code, severity, regex, message) ---------------------------------------------

_HOST_RULES: tuple[tuple[str, re.Pattern[str], str], ...] = (
    ("static.cpp_stream_create",
     re.compile(r"\b(?:cudaStreamCreate\w*|cuStreamCreate\w*|getStreamFromPool|cudaStreamBeginCapture)\b"),
     "`{m}` creates or takes a separate CUDA stream; work on it escapes the timed stream "
     "(timing events on the current stream see ~0 ms). Launch on `at::cuda::getCurrentCUDAStream()`."),
    ("static.cpp_std_thread",
     re.compile(r"\bstd::(?:j?thread|async)\b|\bpthread_create\b|\bfork\s*\(|#\s*pragma\s+omp\b|\bstd::launch::async\b"),
     "`{m}` starts host threads or processes; work deferred to them is not measured. "
     "Do the work in CUDA kernels launched from the calling thread."),
    ("static.sleep",
     re.compile(r"\b(?:usleep|nanosleep|sleep|Sleep)\s*\(|\bsleep_(?:for|until)\b"),
     "`{m}` sleeps on the host; a kernel file has no reason to, and it skews timing."),
    ("static.timer_patch",
     re.compile(r"\bdlsym\b|\bRTLD_NEXT\b|\bdlopen\b"),
     "`{m}` looks up or replaces symbols at run time (how CUDA timing/sync calls are interposed)."),
)
_CACHE_DECL = re.compile(
    r"\bstatic\s+(?:thread_local\s+)?(?:const\s+)?(?:std::(?:unordered_map|map|vector|unordered_set|set|"
    r"optional|shared_ptr|unique_ptr|pair)\b|(?:torch|at|c10)::(?:Tensor|optional)\b|"
    r"(?:void|float|double|int|half|__half|char|uint8_t|int64_t|long|size_t|uintptr_t)\s*\*+\s*\w+\s*[;=\[{])"
)
_GLOBAL_CACHE = re.compile(
    r"^[ \t]*(?:static\s+)?(?:std::(?:unordered_map|map|unordered_set|set|vector)\s*<|"
    r"(?:torch|at)::Tensor\s+\w+\s*[;={])", re.MULTILINE
)
_PTR_KEY = re.compile(r"(?:\[|\.(?:find|count|emplace|insert|at|contains)\s*\()\s*[\w.>-]*data_ptr\b")
_TIMER_FUNCS = frozenset({
    "cudaEventElapsedTime", "cudaEventRecord", "cudaEventSynchronize", "cudaDeviceSynchronize",
    "cudaStreamSynchronize", "cuEventElapsedTime", "cuCtxSynchronize", "clock_gettime", "gettimeofday",
})
_CPP_GLUE = frozenset({
    "empty", "empty_like", "empty_strided", "from_blob", "TensorOptions", "dtype", "device",
    "Device", "Scalar", "IntArrayRef", "elementSize", "toString", "typeMetaToScalarType",
    "zeros", "zeros_like", "ones", "ones_like", "full", "full_like", "DeviceGuard", "NoGradGuard",
    "globalContext", "device_of", "numel", "get_default_dtype",
})
_CPP_GLUE_STRICT = frozenset({"empty", "empty_like", "empty_strided", "from_blob", "TensorOptions",
                              "dtype", "device", "Device", "Scalar", "IntArrayRef", "elementSize",
                              "toString", "typeMetaToScalarType", "DeviceGuard", "NoGradGuard"})
_ATEN_CALL = re.compile(r"\b(?:torch|at|c10)::((?:[A-Za-z_]\w*::)*)([A-Za-z_]\w*)\s*\(")
_METHOD_CALL = re.compile(r"(?:\.|->)\s*([A-Za-z_]\w*)\s*\(")
_LIB_CALL = re.compile(r"\b(?:cublas|cudnn|cusparse|cufft)\w*\s*\(")
_LOW_PRECISION = re.compile(
    r"\b(?:__half2?|half2?|__nv_bfloat162?|nv_bfloat162?|__float2half\w*|__float2bfloat16\w*|__h(?:add|mul|fma|sub)2?)\b|"
    r"\b(?:at|torch)::k(?:Half|BFloat16|Float16)\b"
)


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
    are partly built at run time cannot be judged).
    """
    units = [_Unit(s, blank_comments_and_strings(s.text)) for s in sources]
    for u in units:
        u.functions = find_functions(u.code)
    diags: list[Diagnostic] = []
    for u in units:
        diags += _pattern_findings(u, level)
        if not reference_low_precision:
            m = _LOW_PRECISION.search(u.code)
            if m:
                diags.append(_diag(
                    u, m.start(), "static.precision_downgrade",
                    f"`{m.group(0)}`: half-precision arithmetic in a kernel for a float32 reference; the "
                    "result may pass the tolerance while computing less precisely (and faster) than asked.",
                    Severity.WARNING))
    if check_launches:
        diags += _launch_findings(units, exposed, level)
    return diags


def _host_bodies(u: _Unit) -> Iterable[tuple[CppFunction, str]]:
    for f in u.functions:
        if not f.is_device:
            yield f, u.code[f.body_start: f.body_end]


def _pattern_findings(u: _Unit, level: Strictness) -> list[Diagnostic]:
    diags: list[Diagnostic] = []
    for code, rx, msg in _HOST_RULES:
        for m in rx.finditer(u.code):
            diags.append(_diag(u, m.start(), code, msg.format(m=m.group(0).strip())))
    cache_hits = [m.start() for m in _CACHE_DECL.finditer(u.code)]
    fn_spans = [(f.body_start, f.body_end) for f in u.functions]
    cache_hits += [m.start() + len(m.group(0)) - len(m.group(0).lstrip())
                   for m in _GLOBAL_CACHE.finditer(u.code)
                   if not any(a <= m.start() < b for a, b in fn_spans)]
    cache_hits += [m.start() for m in _PTR_KEY.finditer(u.code)]
    for off in sorted(set(cache_hits)):
        diags.append(_diag(
            u, off, "static.cpp_pointer_cache",
            "state that outlives a call (a `static`/global container, tensor or pointer, or a lookup "
            "keyed by `data_ptr()`): results can be cached by input address and returned without "
            "computing. Keep per-call data local; constants belong in `__constant__` memory."))
    for f in u.functions:
        if f.name in _TIMER_FUNCS:
            diags.append(_diag(u, f.body_start, "static.timer_patch",
                               f"defines `{f.name}`, a CUDA timing/synchronisation API name: this interposes "
                               "the real function and can fake the measurement."))
    lib_sev = Severity.WARNING if level is Strictness.LENIENT else Severity.ERROR
    glue = _CPP_GLUE_STRICT if level is Strictness.STRICT else _CPP_GLUE
    macros = [(CppFunction("#define", "", m.start(), m.end(), False), m.group(0))
              for m in re.finditer(r"^[ \t]*#[ \t]*define\b(?:[^\n]*\\\n)*[^\n]*", u.code, re.MULTILINE)]
    for f, body in [*_host_bodies(u), *macros]:
        for m in _ATEN_CALL.finditer(body):
            ns, name = m.group(1), m.group(2)
            if "cuda::" in ns or name in glue or name[:1].isupper():
                continue
            diags.append(_diag(u, f.body_start + m.start(), "static.cpp_torch_op",
                               f"`{m.group(0).rstrip('( ')}` in host function `{f.name}` runs an ATen op: "
                               "PyTorch does this work, not the candidate's kernel.", lib_sev))
        for m in _METHOD_CALL.finditer(body):
            if m.group(1) in COMPUTE_METHODS:
                diags.append(_diag(u, f.body_start + m.start(), "static.cpp_torch_op",
                                   f"`.{m.group(1)}(...)` in host function `{f.name}` runs an ATen op: "
                                   "PyTorch does this work, not the candidate's kernel.", lib_sev))
        for m in _LIB_CALL.finditer(body):
            diags.append(_diag(u, f.body_start + m.start(), "static.cpp_torch_op",
                               f"`{m.group(0).rstrip('( ')}` in `{f.name}` hands the work to a vendor library "
                               "(cuBLAS/cuDNN/…), not the candidate's kernel.", lib_sev))
    return diags


def _launch_findings(units: Sequence[_Unit], exposed: Sequence[str] | None, level: Strictness) -> list[Diagnostic]:
    host = {f.name: (u, f) for u in units for f in u.functions if not f.is_device}
    roots = exposed_cpp_names(units, exposed) & set(host)
    reachable: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in reachable:
            continue
        reachable.add(name)
        u, f = host[name]
        body = u.code[f.body_start: f.body_end]
        todo += [g for g in host if g not in reachable and re.search(rf"\b{re.escape(g)}\s*\(", body)]
    kernels = [(u, name, off) for u in units for name, off in find_kernels(u.code)]
    # A launch hidden in a macro (`#define LAUNCH(k) k<<<g, b>>>(...)`) cannot be seen without a
    # preprocessor: then a kernel named in a reachable host body counts as launched (no false alarm).
    macro_launch = any(re.search(r"^\s*#\s*define\b.*(?:<<<|cudaLaunch)", u.code, re.MULTILINE) for u in units)
    launched = {
        name for _, name, _ in kernels
        for h in reachable
        if _launches(body := host[h][0].code[host[h][1].body_start: host[h][1].body_end], name)
        or (macro_launch and re.search(rf"\b{re.escape(name)}\b", body))
    }
    diags: list[Diagnostic] = []
    any_launched = bool(launched)
    sev = Severity.ERROR if (level is Strictness.STRICT or not any_launched) else Severity.WARNING
    for u, name, off in kernels:
        if name in launched:
            continue
        diags.append(_diag(
            u, off, "static.kernel_never_launched",
            f"kernel `{name}` is defined but no host function that Python can call launches it"
            + ("" if any_launched else " (no kernel of this file is launched at all)")
            + ": a decoy kernel does none of the work. Launch it with `<<<...>>>` from a function listed "
            "in `functions=`.", sev))
    return diags
