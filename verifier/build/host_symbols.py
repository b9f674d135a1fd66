"""What the candidate's host objects call, read from their symbols the way the linker resolves them.

Role: the static checks (verifier/static/) judge host code by its spelling, and C++ has many
spellings for one call: an ATen function as a template argument (`apply_op<&at::relu>(x)`), a
function pointer returned, chosen by `?:` or kept in a brace initialiser, an operator called by
name (`at::operator*(x, y)`), an unqualified call found by argument-dependent lookup, a pointer to
member through an alias (`using T = torch::Tensor; &T::relu`), a `torch::nn` module. Whatever the
spelling, the compiled object names what it calls: every ATen op reaches the dispatcher through
`at::_ops::<op>::call` (or `::redispatch`), the inline `at::relu` of the headers included, a
module runs through `torch::nn::<Name>Impl::forward`, a thread starts through `pthread_create`,
`std::thread::_M_start_thread`, `thrd_create`, `clone` or c10's thread pools, and a vendor
library through its C entry points (`cublas*`, `cudnn*`, `cusparse*`, `cufft*`, `cusolver*`,
`cutensor*`, NPP's `nppi*`/`npps*`: the prefixes the source rule reads). After a successful
compile, `symbol_findings` reads the undefined and defined symbols of the candidate's own host
objects (`nm -C`) and reports these as the source rules' codes, `static.cpp_torch_op` and
`static.cpp_std_thread` (docs/diagnostics.md), so build/compile.py turns a clean compile into a
`static_violation` verdict.

Contract: `symbol_findings(objects, level, location, op_names)` → diagnostics, one per distinct
symbol kind found; empty when the objects cannot be read (no `nm`, a failed or timed-out `nm`,
a missing object): unreadable symbols never reject. Glue stays allowed as the source rules allow it
(static/cpp_names.py, static/policy.py): the `at::_ops` structs of allocation, views, metadata and
conversions (`empty*`, `view`, `reshape`, `as_strided`, `contiguous`, `to`, `copy_`, and at the
default level the filling factories, `fill_`, `zero_`, `clone`); the op of a struct is its
longest prefix that is an ATen op name (`ATen/ops/<name>_ops.h`), so `select_scatter` is not
`select`. In `lenient` an ATen op is a warning, as `static.cpp_torch_op` is there.
Python's C API: the generated binding (pybind11's `main.cpp` or the C-ABI shim of build/cabi.py)
references some of it itself, and lives in the same objects as the candidate's code, so only
entry points neither binding references are findings (`PyRun_*`, `PyImport_*`, `PyEval_*`,
calls of Python objects other than the shim's one-argument call): measured on the examples'
builds (`_BINDING_PYTHON`).

Cost: one `nm` per object, a few milliseconds (docs/benchmarks.md). In compile-only mode the
objects are not otherwise built (a check skips the host compiler's pass): build/compile.py then
compiles them, through the object cache, for this check.

Not covered: calls the linker cannot see — through `dlsym`, a function pointer found at run
time, a virtual call on an object PyTorch made (`c10::TensorImpl`), the dispatcher called
through `c10::Dispatcher::findSchema` (its symbols are reported: `c10::Dispatcher::`);
`at::native::`/`at::cuda::blas::` functions are left to the source rules; Python C API calls
the binding also makes (`PyObject_GetAttrString`).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

from cudice.verifier.process import die_with_parent
from cudice.verifier.source.result import Diagnostic, Location, Severity, Stage
from cudice.verifier.static.cpp_rules import VENDOR_PREFIXES
from cudice.verifier.static.policy import (
    EMPTY_FACTORIES,
    FILLING_FACTORIES,
    TENSOR_GLUE_ALWAYS,
    TENSOR_GLUE_DEFAULT,
    Strictness,
)

# ATen ops (bases of `at::_ops` struct names) that are glue, as the source rules' lists say
# (static/cpp_names.py CPP_GLUE*, static/policy.py TENSOR_GLUE_*): allocation, views, metadata,
# conversions; plus the ops the inline glue of the headers calls (`item` → `_local_scalar_dense`,
# `to` → `_to_copy` is not inline, `size`/`stride` of a dimension).
_OPS_GLUE_ALWAYS = frozenset(
    {
        *EMPTY_FACTORIES,
        *TENSOR_GLUE_ALWAYS,
        "empty_permuted",
        "_local_scalar_dense",
        "_reshape_alias",
        "alias",
        "slice",
        "resize",
        "set",
        "sym_size",
        "sym_stride",
        "sym_numel",
        "sym_storage_offset",
        "is_pinned",
        "_has_compatible_shallow_copy_type",
        "lift_fresh",
        "requires_grad",
        "retain_grad",
        "output_nr",
        "_version",
        "is_leaf",
        "data",
        "_fw_primal",
        "result_type",
        "can_cast",
        "promote_types",
        "is_same_size",
        "is_nonzero",
        "is_set_to",
        "align_as",
        "_unsafe_view",
    }
)
_OPS_GLUE_DEFAULT = frozenset({*FILLING_FACTORIES, *TENSOR_GLUE_DEFAULT, "copy", "fill", "zero", "new_full"})

# Python C API entry points pybind11's generated module or the C-ABI shim (build/cabi.py) reference
# themselves, among the families below: never a finding. Measured with `nm` on the builds of
# examples/*_cuda.py and the corpus's honest cases (tests/verifier/build/test_host_symbols.py).
_BINDING_PYTHON = frozenset(
    {
        "PyObject_GetAttr",
        "PyObject_GetAttrString",
        "PyObject_CallOneArg",
        "PyObject_Call",
        "PyObject_CallObject",
        "PyObject_CallFunctionObjArgs",
        "PyObject_CallMethod",
        "PyObject_CallMethodObjArgs",
        "PyImport_ImportModule",
        "PyImport_AddModule",
        "PyEval_GetBuiltins",
        "PyEval_GetGlobals",
        "PyEval_SaveThread",
        "PyEval_RestoreThread",
        "PyEval_AcquireThread",
        "PyEval_ReleaseThread",
        "PyEval_InitThreads",
        "PyEval_GetFrame",
    }
)
_PYTHON_FAMILIES = re.compile(
    r"^(?:PyRun_|PyImport_|PyEval_|PyObject_Call|PyObject_GetAttr|Py_CompileString)"
)

VENDOR_WHAT = "a vendor library's entry point (cuBLAS, cuDNN, cuSPARSE, cuFFT, cuSOLVER, cuTENSOR, NPP)"
_OPS = re.compile(r"^at::_ops::(\w+)::(?:call|redispatch)\(")
# torch's module, script and autograd entry points: the candidate runs PyTorch's layers
_TORCH_ENTRY = re.compile(r"^torch::(?:nn|jit|autograd|optim|data|fft|linalg|special)::")
_DISPATCHER = re.compile(r"^c10::(?:Dispatcher|OperatorHandle|impl::OperatorEntry)::")
_THREAD = (
    re.compile(r"^(?:pthread_create|thrd_create|clone|clone3|fork|vfork|posix_spawnp?|__clone\w*)$"),
    re.compile(r"^std::thread::_M_start_thread\("),
    re.compile(r"^std::(?:__future_base|async)"),
    re.compile(r"^(?:c10|at)::(?:ThreadPool|TaskThreadPool\w*|TaskThreadPoolBase|PTThreadPool)\b"),
    re.compile(
        r"^(?:at|c10)::(?:launch|intraop_launch|internal::launch_no_thread_state|parallel_for|"
        r"internal::invoke_parallel|get_thread_pool|init_num_threads)\b"
    ),
    re.compile(r"^(?:GOMP_|omp_|__kmpc_)"),
)
_VENDOR = re.compile(rf"^{VENDOR_PREFIXES}\w*$")  # C entry points of vendor libraries
_NM_LINE = re.compile(r"^\s*[0-9a-fA-F]*\s+([A-Za-z?-])\s+(.+)$")


def find_nm() -> str | None:
    """binutils' `nm` (the host compiler's toolchain, /usr/bin on Linux), or None."""
    return shutil.which("nm")


def read_symbols(obj: Path, timeout_s: float = 20.0) -> tuple[set[str], set[str]] | None:
    """(undefined, defined) demangled symbols of the object `obj`, or None when they cannot be read."""
    nm = find_nm()
    if nm is None or not obj.is_file():
        return None
    try:
        proc = subprocess.run(
            [nm, "-C", str(obj)],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout_s,
            preexec_fn=die_with_parent,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    undefined: set[str] = set()
    defined: set[str] = set()
    for line in proc.stdout.splitlines():
        m = _NM_LINE.match(line)
        if m is None:
            continue
        (undefined if m.group(1) in "Uwv" else defined).add(m.group(2).strip())
    return undefined, defined


def op_base(struct: str, op_names: frozenset[str]) -> str:
    """The ATen op an `at::_ops` struct belongs to: `add__Tensor` → `add`, `select_scatter` →
    `select_scatter`, `to_dtype` → `to` (its longest prefix at a `_` that is an op name)."""
    cut = len(struct)
    while cut > 0:
        head = struct[:cut]
        if head in op_names:
            return head
        cut = struct.rfind("_", 0, cut)
    return struct.rstrip("_")


def _op_is_glue(base: str, level: Strictness) -> bool:
    base = base.rstrip("_")
    if base in _OPS_GLUE_ALWAYS or base.startswith("new_empty"):
        return True
    return level is not Strictness.STRICT and base in _OPS_GLUE_DEFAULT


def classify(
    undefined: Iterable[str], defined: Iterable[str], level: Strictness, op_names: frozenset[str]
) -> list[tuple[str, str, str]]:
    """(code, symbol, what) for each finding among an object's symbols; `what` names the kind."""
    out: list[tuple[str, str, str]] = []
    for sym in sorted(set(undefined)):
        if (m := _OPS.match(sym)) is not None:
            base = op_base(m.group(1), op_names)
            if not _op_is_glue(base, level):
                out.append(("static.cpp_torch_op", sym, f"the ATen op `{base}`"))
        elif _TORCH_ENTRY.match(sym) or _DISPATCHER.match(sym):
            out.append(("static.cpp_torch_op", sym, "a PyTorch module, script, autograd or dispatcher entry"))
        elif any(r.match(sym) for r in _THREAD):
            out.append(("static.cpp_std_thread", sym, "a thread or process"))
        elif _VENDOR.match(sym):
            out.append(("static.cpp_torch_op", sym, VENDOR_WHAT))
        elif _PYTHON_FAMILIES.match(sym) and sym.split("(")[0] not in _BINDING_PYTHON:
            out.append(("static.cpp_torch_op", sym, "Python's C API (code run by the interpreter)"))
    for sym in sorted(set(defined)):
        if sym.startswith("std::thread::_State_impl<"):
            out.append(("static.cpp_std_thread", sym, "a thread (a `std::thread` started)"))
    return out


def symbol_findings(
    objects: Iterable[Path],
    level: Strictness,
    location: Location,
    op_names: frozenset[str],
    timeout_s: float = 20.0,
) -> tuple[Diagnostic, ...]:
    """Diagnostics for what the candidate's host `objects` call (see the module docstring);
    empty when any object's symbols cannot be read."""
    found: dict[str, tuple[str, str]] = {}
    for obj in objects:
        syms = read_symbols(obj, timeout_s)
        if syms is None:
            return ()
        for code, sym, what in classify(*syms, level, op_names):
            found.setdefault(sym, (code, what))
    diags: list[Diagnostic] = []
    for sym, (code, what) in found.items():
        shown = sym if len(sym) <= 160 else sym[:157] + "..."
        if code == "static.cpp_std_thread":
            msg = (
                f"the compiled host code calls `{shown}`, {what}: a candidate's host code starts no "
                "threads or processes. Do the work in the kernel, launched from the calling thread."
            )
            sev = Severity.ERROR
        elif what == VENDOR_WHAT:
            msg = (
                f"the compiled host code calls `{shown}`, {what}: its precompiled kernels do this work, "
                "not the candidate's kernel. Compute it in your kernel."
            )
            sev = Severity.WARNING if level is Strictness.LENIENT else Severity.ERROR
        else:
            msg = (
                f"the compiled host code calls `{shown}`, {what}, however the source spells it "
                "(a template argument, a function pointer, an operator, argument-dependent lookup): "
                "PyTorch does this work, not the candidate's kernel. Compute it in your kernel; "
                "only allocation, views and metadata may go through ATen."
            )
            sev = Severity.WARNING if level is Strictness.LENIENT else Severity.ERROR
        diags.append(Diagnostic(sev, msg, code, Stage.COMPILE, location))
    return tuple(diags)
