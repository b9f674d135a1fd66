"""Header overlays for the build: a slim torch header set (fast path) and CUDA-library stand-ins.

1. **Slim overlay** (`-I <overlay>/device` for `cuda.cu`, `-I <overlay>/host` for `main.cpp`):
   it shadows `torch/extension.h` and `torch/types.h` — the implicit headers `load_inline` writes
   and the ones candidates include — with the names KernelBench candidates use, taken from
   torch's own headers: `at::Tensor` and its methods (`ATen/core/Tensor.h`), the factories
   (`torch::empty*`, `zeros*`, `ones*`, `full*`), `TORCH_CHECK`, the `AT_DISPATCH_*` macros,
   `device_of`, and the `torch` namespace exactly as `torch/types.h` declares it. The lean set
   (`lean_texts()`, read from the installed torch when the overlay is written) also shadows the
   per-operator factory headers, `ATen/DeviceGuard.h` and `ATen/cuda/CUDAContext.h` /
   `Exceptions.h` with torch's text minus the includes that pull in ATen/Context.h, IValue and
   the tracer: g++ parses it in less than half the time of the full set (docs/benchmarks.md).
   The host variant adds pybind11 and torch's tensor casters (`torch/csrc/utils/pybind.h`,
   `torch::wrap_pybind_function`) for the binding. Nothing is re-declared: a name is either
   torch's own declaration or absent, so a slim build can only fail where the full one succeeds
   (a missing name), and build/compile.py then runs the full build.
   `torch::empty` and friends resolve to `at::empty` (torch/types.h's `using namespace at`)
   instead of the autograd wrappers of `variable_factories.h`; both return the same tensor for
   options without `requires_grad`, which is what forward kernels pass.
2. **Stand-ins** (`-idirafter <overlay>/standins`, searched after every real include folder,
   so only used when the real header is missing): a CPU-only torch wheel lacks the generated
   `c10/cuda/impl/cuda_cmake_macros.h`, and a minimal CUDA toolkit lacks the cuBLAS, cuSPARSE
   and cuSOLVER headers that `ATen/cuda/CUDAContext.h` includes. The stand-ins declare the
   handle and status types and the one function torch's headers name, as NVIDIA's headers
   declare them (same names, same enumerator values). Only headers missing on this machine are
   written. A source that uses more of those libraries than the stand-ins declare cannot be
   decided here: `undecidable_reason()` tells build/compile.py to say so instead of `compile_error`.

`macro_differences()` names the macros whose definition differs between the full and the slim
header set (`-E -dM` runs of each, cached in the overlay folder; for `cuda.cu` nvcc's device
pass and, with `-U__CUDA_ARCH__`, an approximation of its host pass; a call with a source's
includes also caches the list without them when the full side's runs show those includes
entered no file, so that list costs only the slim side's runs): build/compile.py keeps a slim
compile error as the verdict only for a source that names none of them, so the tokens the
compiler sees on the user's lines are the same in both builds. `full_header_names()` lists the
words the full headers put where a later lookup could find them (`-E -dD` of the same probe
source, tokenised by `outer_scope_words`: namespace, class, enum and linkage scopes, without
function bodies, parameter and template parameter lists; plus every macro name), cached in the
overlay folder: build/compile.py keeps a slim "undeclared name" error only for a name not listed.
Both run the preprocessor through `objects.run_process`: nvcc and the `gcc -E` it starts run in a
session of their own, killed as a group when the optional `cancel` token is set or the time is
up (nothing is cached then; a later call computes the list again), and nvcc is killed when the
thread that started it dies.

`slim_blocker()` says when a source must skip the slim path (a name it defines could meet an
ATen op through argument-dependent lookup, or a `using namespace` that the extra names of the
full headers could make ambiguous). The overlay is written once per content into the build
cache (`cache_dir/headers/<hash>/`), atomically (a temporary folder renamed into place).

Not covered: a `torch::X` that the full headers declare in namespace `torch` itself resolves,
in the slim set, to `at::X` through the using-directive when that exists (`torch::empty` is
the factory above; `torch::cuda::device_count()` becomes `at::cuda::device_count()`, the same
count in another integer type); macros the full headers define and a candidate redefines (the
full build warns on the redefinition, the slim one does not); candidates that include `torch/torch.h` or
`torch/all.h` (they reach the slim `torch/types.h` first and fall back to the full build); a
process that dies by SIGKILL mid-list takes nvcc along but not nvcc's `gcc -E` children, which
finish their file unless a group or family kill ends them (the editor's workers get one:
server/workers/procs.py), and leaves its `.macros-*`/`.names-*` work folder in the overlay folder.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import os
import re
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cudice.verifier.build.objects import run_process
from cudice.verifier.process import CancelToken
from cudice.verifier.static.policy import EMPTY_FACTORIES, FILLING_FACTORIES

_TORCH_NAMESPACE = """
namespace torch {
using namespace at; // NOLINT
using std::nullopt; // NOLINT
using std::optional; // NOLINT
using Dtype = at::ScalarType;
constexpr auto kUInt8 = at::kByte;
constexpr auto kInt8 = at::kChar;
constexpr auto kInt16 = at::kShort;
constexpr auto kInt32 = at::kInt;
constexpr auto kInt64 = at::kLong;
constexpr auto kUInt16 = at::kUInt16;
constexpr auto kUInt32 = at::kUInt32;
constexpr auto kUInt64 = at::kUInt64;
constexpr auto kFloat16 = at::kHalf;
constexpr auto kFloat32 = at::kFloat;
constexpr auto kFloat64 = at::kDouble;
constexpr auto kU8 = kUInt8;
constexpr auto kU16 = kUInt16;
constexpr auto kU32 = kUInt32;
constexpr auto kU64 = kUInt64;
constexpr auto kI8 = kInt8;
constexpr auto kI16 = kInt16;
constexpr auto kI32 = kInt32;
constexpr auto kI64 = kInt64;
constexpr auto kF16 = kFloat16;
constexpr auto kF32 = kFloat32;
constexpr auto kF64 = kFloat64;
} // namespace torch
"""

# The factories a candidate's glue may call (static/policy.py): each one's ATen/ops header.
SLIM_OPS = EMPTY_FACTORIES + FILLING_FACTORIES


def _types_h(note: str) -> str:
    """The slim `torch/types.h` under the comment line `note` (both sets include the same headers)."""
    return "\n".join(
        [
            note,
            "#pragma once",
            "#include <optional>",
            "#include <ATen/core/Tensor.h>",
            "#include <ATen/DeviceGuard.h>",
            "#include <ATen/Dispatch.h>",
            *(f"#include <ATen/ops/{op}.h>" for op in SLIM_OPS),
            _TORCH_NAMESPACE,
        ]
    )


# The headers the slim `torch/types.h` used before the lean set: each pulls in ATen/Context.h,
# IValue and the tracer (ATen/ops/<op>.h, ATen/DeviceGuard.h through ATen/core/IListRef.h).
# Still the fall-back when the installed torch's headers do not have the layout lean_texts() reads.
SLIM_TYPES_H = _types_h(
    "// cudice slim torch/types.h (verifier/build/headers.py): torch's own declarations, fewer of them."
)
_LEAN_OP_INCLUDES = (
    "#pragma once",
    "#include <optional>",
    "#include <ATen/core/Tensor.h>",
    "#include <c10/core/Scalar.h>",
    "#include <c10/core/TensorOptions.h>",
    "#include <c10/core/SymIntArrayRef.h>",
)
_GUARD_ELSE = "#else\n#error"  # torch's headers end in `#else #error ... TORCH_STABLE_ONLY`
_LIST_OVERLOAD = re.compile(r"inline std::optional<Device> device_of\(ITensorListRef t\) \{.*?\n\}\n", re.S)
# torch's CUDA context headers, shadowed with `#include <ATen/Context.h>` dropped
_CONTEXT_FREE = ("ATen/cuda/CUDAContext.h", "ATen/cuda/Exceptions.h")
_LEAN_NOTE = "// cudice lean {} (verifier/build/headers.py): torch's own text, {}.\n"


def _body(text: str, after: str) -> str:
    """What a torch header declares after its line `after`, up to its `#else #error` guard."""
    start = text.index(after) + len(after)
    return text[start : text.rindex(_GUARD_ELSE)]


def lean_texts(torch_include: Path) -> dict[str, str] | None:
    """The lean header set read from this torch's own headers (overlay path -> text), or None.

    Each file shadows torch's header of the same path (the overlay folder is searched first, so
    torch's own includes of it get the lean one too, and `#pragma once` keeps one copy):
    `ATen/ops/<op>.h` for the factories is the operator's inline bodies after its `<op>_ops.h`
    include, without the includes of ATen/Context.h, the tracer, generators and IValue the
    generated header carries; `ATen/DeviceGuard.h` lacks the tensor-list `device_of` (its
    `ATen/core/IListRef.h` include pulls in IValue); `ATen/cuda/CUDAContext.h` and
    `ATen/cuda/Exceptions.h` lack `#include <ATen/Context.h>` (only the NVRTC and driver check
    macros name it, and a candidate using them fails the lean build and gets the full one);
    `torch/types.h` includes Tensor.h, the dispatch macros and those. Every declaration is
    torch's text; the set only has fewer. None when the headers do not look as expected (the
    include-based SLIM_TYPES_H is used then).
    """
    try:
        out: dict[str, str] = {}
        guard = (torch_include / "ATen" / "DeviceGuard.h").read_text()
        after = "#include <c10/core/ScalarType.h>"
        body, n = _LIST_OVERLOAD.subn("", _body(guard, after))
        if n != 1:
            return None
        out["ATen/DeviceGuard.h"] = "\n".join(
            [
                _LEAN_NOTE.format("ATen/DeviceGuard.h", "without the tensor-list device_of"),
                "#pragma once",
                "#include <ATen/core/Tensor.h>",
                "#include <c10/core/DeviceGuard.h>",
                after + body,
            ]
        )
        for op in SLIM_OPS:
            include = f"#include <ATen/ops/{op}_ops.h>"
            text = _body((torch_include / "ATen" / "ops" / f"{op}.h").read_text(), include + "\n")
            out[f"ATen/ops/{op}.h"] = "\n".join(
                [_LEAN_NOTE.format(f"ATen/ops/{op}.h", "fewer includes"), *_LEAN_OP_INCLUDES, include, text]
            )
        for name in _CONTEXT_FREE:
            text = (torch_include / name).read_text()
            if "#include <ATen/Context.h>\n" not in text:
                return None
            out[name] = _LEAN_NOTE.format(name, "without ATen/Context.h") + text.replace(
                "#include <ATen/Context.h>\n", ""
            )
        out["torch/types.h"] = _types_h(_LEAN_NOTE.format("torch/types.h", "fewer of its declarations"))
        return out
    except (OSError, ValueError):
        return None


DEVICE_EXTENSION_H = (
    "// cudice slim torch/extension.h for cuda.cu (no Python)\n#pragma once\n#include <torch/types.h>\n"
)
HOST_EXTENSION_H = (
    "// cudice slim torch/extension.h for main.cpp: the binding's pybind11 and tensor casters\n"
    "#include <torch/types.h>\n#include <torch/csrc/utils/pybind.h>\n#include <torch/csrc/Exceptions.h>\n"
)

_CUBLAS_API = """#pragma once
typedef enum {
  CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_NOT_INITIALIZED = 1, CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7, CUBLAS_STATUS_ARCH_MISMATCH = 8, CUBLAS_STATUS_MAPPING_ERROR = 11,
  CUBLAS_STATUS_EXECUTION_FAILED = 13, CUBLAS_STATUS_INTERNAL_ERROR = 14, CUBLAS_STATUS_NOT_SUPPORTED = 15,
  CUBLAS_STATUS_LICENSE_ERROR = 16
} cublasStatus_t;
struct cublasContext;
typedef struct cublasContext* cublasHandle_t;
"""
_CUSPARSE = """#pragma once
typedef enum {
  CUSPARSE_STATUS_SUCCESS = 0, CUSPARSE_STATUS_NOT_INITIALIZED = 1, CUSPARSE_STATUS_ALLOC_FAILED = 2,
  CUSPARSE_STATUS_INVALID_VALUE = 3, CUSPARSE_STATUS_ARCH_MISMATCH = 4, CUSPARSE_STATUS_MAPPING_ERROR = 5,
  CUSPARSE_STATUS_EXECUTION_FAILED = 6, CUSPARSE_STATUS_INTERNAL_ERROR = 7,
  CUSPARSE_STATUS_MATRIX_TYPE_NOT_SUPPORTED = 8, CUSPARSE_STATUS_ZERO_PIVOT = 9,
  CUSPARSE_STATUS_NOT_SUPPORTED = 10,
  CUSPARSE_STATUS_INSUFFICIENT_RESOURCES = 11
} cusparseStatus_t;
struct cusparseContext;
typedef struct cusparseContext* cusparseHandle_t;
#if defined(__cplusplus)
extern "C" {
#endif
const char* cusparseGetErrorString(cusparseStatus_t status);
#if defined(__cplusplus)
}
#endif
"""
_CUSOLVER_COMMON = """#pragma once
typedef enum {
  CUSOLVER_STATUS_SUCCESS = 0, CUSOLVER_STATUS_NOT_INITIALIZED = 1, CUSOLVER_STATUS_ALLOC_FAILED = 2,
  CUSOLVER_STATUS_INVALID_VALUE = 3, CUSOLVER_STATUS_ARCH_MISMATCH = 4, CUSOLVER_STATUS_MAPPING_ERROR = 5,
  CUSOLVER_STATUS_EXECUTION_FAILED = 6, CUSOLVER_STATUS_INTERNAL_ERROR = 7,
  CUSOLVER_STATUS_MATRIX_TYPE_NOT_SUPPORTED = 8, CUSOLVER_STATUS_NOT_SUPPORTED = 9
} cusolverStatus_t;
"""
_STANDIN_NOTE = (
    "// cudice stand-in (verifier/build/headers.py): used only because the real header is missing here.\n"
)
# header path -> text; the names they declare are what `ATen/cuda/CUDAContext.h` and
# `ATen/cuda/Exceptions.h` need (torch/include/ATen/cuda/CUDAContextLight.h).
STANDINS: dict[str, str] = {
    "c10/cuda/impl/cuda_cmake_macros.h": "#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n",
    "cublas_api.h": _CUBLAS_API,
    "cublas_v2.h": "#pragma once\n#include <cublas_api.h>\n",
    "cublas.h": "#pragma once\n#include <cublas_api.h>\n",
    "cublasLt.h": "#pragma once\n#include <cublas_api.h>\nstruct cublasLtContext;\n"
    "typedef struct cublasLtContext* cublasLtHandle_t;\n",
    "cusparse.h": _CUSPARSE,
    "cusolver_common.h": _CUSOLVER_COMMON,
    "cusolverDn.h": "#pragma once\n#include <cusolver_common.h>\nstruct cusolverDnContext;\n"
    "typedef struct cusolverDnContext* cusolverDnHandle_t;\n",
}
# a compiler error naming one of these, while a stand-in is in use, may be the stand-in's gap
_STANDIN_NAMES = re.compile(r"\b(cublas|cusparse|cusolver|CUBLAS|CUSPARSE|CUSOLVER)\w*")


@dataclass(frozen=True, slots=True)
class Overlay:
    """Folders of one materialized overlay; `standins_used` lists the stand-ins written (missing here)."""

    root: Path
    standins_used: tuple[str, ...]

    @property
    def device(self) -> Path:
        return self.root / "device"

    @property
    def host(self) -> Path:
        return self.root / "host"

    @property
    def standins(self) -> Path:
        return self.root / "standins"


def include_dirs(flags: str) -> list[Path]:
    """The folders named by -I/-isystem in a compiler flag string."""
    import shlex

    words = shlex.split(flags)
    out = []
    for i, w in enumerate(words):
        if w in ("-I", "-isystem") and i + 1 < len(words):
            out.append(Path(words[i + 1]))
        elif w.startswith("-I") and len(w) > 2:
            out.append(Path(w[2:]))
    return out


def missing_standins(search: Iterable[Path]) -> tuple[str, ...]:
    """The stand-in headers whose real header is in none of the `search` folders."""
    dirs = list(search)
    return tuple(sorted(h for h in STANDINS if not any((d / h).is_file() for d in dirs)))


def ensure_overlay(cache_dir: Path, flags: str) -> Overlay:
    """Write (once per content) and return the overlay for a toolchain with these compiler flags."""
    dirs = include_dirs(flags)
    missing = missing_standins(dirs)
    torch_include = next((d for d in dirs if (d / "ATen" / "ops").is_dir()), None)
    lean = lean_texts(torch_include) if torch_include is not None else None
    slim = {"torch/types.h": SLIM_TYPES_H} if lean is None else lean
    files = {
        **{f"device/{k}": v for k, v in slim.items()},
        "device/torch/extension.h": DEVICE_EXTENSION_H,
        **{f"host/{k}": v for k, v in slim.items()},
        "host/torch/extension.h": HOST_EXTENSION_H,
        **{f"standins/{h}": _STANDIN_NOTE + STANDINS[h] for h in missing},
    }
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(name.encode() + b"\0" + files[name].encode() + b"\0")
    root = cache_dir / "headers" / h.hexdigest()[:24]
    if not (root / "complete").is_file():
        root.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=root.parent))
        for name, text in files.items():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / name).write_text(text)
        (tmp / "standins").mkdir(exist_ok=True)
        (tmp / "complete").write_text("\n".join(missing))
        try:
            os.rename(tmp, root)  # atomic; a concurrent writer that won leaves the same content
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
    return Overlay(root, missing)


def ensure_host_pch(overlay: Overlay, cxx: str, flags: str, timeout_s: float = 900.0) -> Path | None:
    """A folder like `overlay.host` plus a gcc precompiled `torch/extension.h.gch`, or None.

    Built once per compiler and flags (`flags` without `-DTORCH_EXTENSION_NAME`, which the
    header never reads), under a lock; while another process builds it, or if it fails, the
    caller compiles without it (same result, slower). gcc uses the `.gch` only when it was made
    with compatible options and silently reads the header otherwise (gcc manual, "Using
    Precompiled Headers"), so it cannot change what compiles.
    """
    import fcntl
    import shlex

    key = hashlib.sha256(f"{cxx}\0{flags}".encode()).hexdigest()[:16]
    folder = overlay.root / f"pch-{key}"
    gch = folder / "torch" / "extension.h.gch"
    if gch.is_file():
        return folder
    (folder / "torch").mkdir(parents=True, exist_ok=True)
    for header in overlay.host.rglob("*.h"):  # the host overlay's headers, beside the .gch
        dest = folder / header.relative_to(overlay.host)
        if not dest.is_file():
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
            tmp.write_text(header.read_text())
            tmp.replace(dest)
    with open(folder / "lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return None  # someone else is building it: do not wait
        if gch.is_file():
            return folder
        tmp_gch = gch.with_name(f".extension.h.gch.{os.getpid()}.tmp")
        cmd = [
            *shlex.split(cxx),
            f"-I{folder}",
            *shlex.split(flags),
            "-x",
            "c++-header",
            str(folder / "torch" / "extension.h"),
            "-o",
            str(tmp_gch),
        ]
        try:  # g++ and the cc1plus it starts die with this thread, and as a group on a timeout
            rc, _, _, timed_out = run_process(cmd, timeout_s, None)
            ok = rc == 0 and not timed_out
        except OSError:
            ok = False
        if not ok:
            tmp_gch.unlink(missing_ok=True)
            return None
        tmp_gch.replace(gch)
    return folder


@functools.cache
def aten_op_names(torch_include: str) -> frozenset[str]:
    """Names of ATen's operators (`ATen/ops/<name>_ops.h`) under a torch include folder."""
    ops = Path(torch_include) / "ATen" / "ops"
    try:
        return frozenset(p.name[:-6] for p in ops.iterdir() if p.name.endswith("_ops.h"))
    except OSError:
        return frozenset()


_DEFINED_FUNC = re.compile(r"\b(\w+)\s*\(([^;{}()]*(?:\([^;{}()]*\)[^;{}()]*)*)\)\s*(?:const\s*)?\{")
# a parameter of one of these types makes `at::` an associated namespace of the call's arguments
_TORCH_PARAM = re.compile(r"\b(?:Tensor|TensorBase|Scalar|IntArrayRef|TensorOptions|at|torch|c10)\b")
_UNQUALIFIED_CALL = r"(?<![\w.:>])\s*{name}\s*\("
_CONTROL = frozenset({"if", "for", "while", "switch", "catch", "return", "sizeof"})


def slim_blocker(texts: Iterable[str], op_names: frozenset[str]) -> str | None:
    """Why these user sources must skip the slim headers, or None when they may use them.

    The slim set declares fewer names than the full one, so the only way it could accept what
    the full build rejects is name lookup finding a full-only declaration: a `using namespace`
    directive, or a function the user defines with an ATen op's name and a torch-typed
    parameter and calls unqualified (argument-dependent lookup on a Tensor argument also finds
    `at::<name>`; a `__device__ float gelu(float)` called on floats cannot meet it).
    """
    text = "\n".join(texts)
    if re.search(r"\busing\s+namespace\b", text):
        return "a `using namespace` directive"
    for m in _DEFINED_FUNC.finditer(text):
        name, params = m.group(1), m.group(2)
        if name in _CONTROL or name not in op_names or not _TORCH_PARAM.search(params):
            continue  # a call with only scalar arguments has no associated namespace: ADL adds nothing
        calls = re.findall(_UNQUALIFIED_CALL.format(name=re.escape(name)), text)
        if len(calls) > 1:  # the definition itself counts once
            return f"a function named like the ATen op `{name}` called unqualified"
    return None


_DEFINE = re.compile(r"#define (\w+)")


def macro_differences(
    overlay: Overlay,
    compiler: str,
    full_flags: str,
    slim_flags: str,
    cuda: bool,
    includes: Iterable[str] = (),
    timeout_s: float = 600.0,
    cancel: CancelToken | None = None,
    share_alone: bool = True,
) -> frozenset[str] | None:
    """Macros defined differently (or only on one side) by the full and the slim headers, or None.

    Both sides preprocess (`-E -dM`) one file that includes what the generated file includes
    implicitly (`torch/extension.h`, for `cuda.cu` also `torch/types.h`, `cuda.h`,
    `cuda_runtime.h`), every header the overlay shadows (`overlay.device`/`overlay.host`), so a
    macro that a lean header's dropped include would define counts too, and then `includes`
    (the `<...>` or `"..."` of the source's own `#include` lines: what they define, they define
    in both builds). `slim_flags` are `full_flags` with the overlay folder in front. The answer
    is cached per compiler, flags and includes (pass flags without a per-module
    `-DTORCH_EXTENSION_NAME`: it is the same on both sides). None when a preprocessor run fails
    (a header only the source's folder has, say): the caller then cannot rule out a difference;
    None too, with nothing cached and no preprocessor left running, once `cancel` is set.

    With `includes`, the list without them is cached on the way when that costs only the slim
    side's runs: the probe then has an empty header between its own includes and `includes`, and
    gcc's `-H` on the full runs shows whether the lines after it entered a file (`_defines`). When
    they entered none, the full headers' macros are those without `includes`, and only the slim
    side preprocesses the probe without them (the full headers have entered what a source
    includes first; the slim ones often have not). Same lists as computing each on its own. When
    a run of that way fails (a compiler without `-H`, say), the call starts again the plain way
    (`share_alone=False`: no empty header, no `-H`, the list without `includes` left to its call).
    """
    alone = _probe_text(overlay, cuda, ())
    text = _probe_text(overlay, cuda, includes)
    # nvcc -E preprocesses the device pass (`__CUDA_ARCH__` set); -U gives the host pass's macros
    passes = (["-Xcompiler", "-dM"], ["-Xcompiler", "-dM", "-U__CUDA_ARCH__"]) if cuda else (["-dM"],)
    cached = overlay.root / f"macros-{_macros_key(compiler, full_flags, slim_flags, text, passes)}.txt"
    if cached.is_file():
        return frozenset(cached.read_text().split())
    # the list without `includes`, cached on the way when the full runs allow it (docstring)
    cached_alone = overlay.root / f"macros-{_macros_key(compiler, full_flags, slim_flags, alone, passes)}.txt"
    share = share_alone and text != alone and text.startswith(alone) and _MARK not in text
    share = share and not cached_alone.is_file()
    work = Path(tempfile.mkdtemp(prefix=".macros-", dir=overlay.root))
    try:
        # the probe alone in its folder (a quoted include searches there first), the rest beside it
        (work / "probe").mkdir()
        src = work / "probe" / ("probe.cu" if cuda else "probe.cpp")
        mark = src.parent / _MARK
        if share:
            mark.write_text("")
            src.write_text(f'{alone}#include "{_MARK}"\n{text[len(alone) :]}')
        else:
            src.write_text(text)
        names: set[str] = set()
        full_sets: list[set[str]] = []
        for dm in passes:
            listing = (mark, ["-Xcompiler", "-H"] if cuda else ["-H"]) if share else None
            defined = _defines(compiler, (full_flags, slim_flags), dm, src, work, timeout_s, cancel, listing)
            if defined is None:
                if share and not (cancel is not None and cancel.is_set()):
                    # a compiler without -H, or a failing probe: the plain way decides
                    return macro_differences(
                        overlay, compiler, full_flags, slim_flags, cuda, includes, timeout_s, cancel, False
                    )
                return None
            (full, slim), unchanged = defined
            names |= {m.group(1) for line in full ^ slim if (m := _DEFINE.match(line))}
            full_sets.append(full)
            share = share and unchanged
        _write_list(work, cached, names)
        if share:
            (work / "alone").mkdir()
            src_alone = work / "alone" / src.name
            src_alone.write_text(alone)
            alone_names: set[str] = set()
            for dm, full in zip(passes, full_sets, strict=True):
                run = _defines(compiler, (slim_flags,), dm, src_alone, work, timeout_s, cancel)
                if run is None:  # the list with `includes` stands; the other is left to its own call
                    return None if cancel is not None and cancel.is_set() else frozenset(names)
                alone_names |= {m.group(1) for line in full ^ run[0][0] if (m := _DEFINE.match(line))}
            _write_list(work, cached_alone, alone_names)
        return frozenset(names)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _write_list(work: Path, cached: Path, names: set[str]) -> None:
    """Write a macro list to `cached` whole (a file in `work` renamed into place)."""
    tmp = work / "names.txt"
    tmp.write_text("\n".join(sorted(names)) + "\n")
    tmp.replace(cached)


# The empty header `macro_differences` includes between the probe's own headers and the source's:
# what `gcc -H` lists after it, the source's includes entered.
_MARK = "cudice-probe-mark.h"
_ENTERED = re.compile(r"^\.+ (.*)$", re.M)


def _macros_key(compiler: str, full_flags: str, slim_flags: str, text: str, passes: object) -> str:
    """The cache key of `macro_differences` for one probe text."""
    key = hashlib.sha256(f"{compiler}\0{full_flags}\0{slim_flags}\0{text}\0{passes}".encode())
    return key.hexdigest()[:16]


def _probe_text(overlay: Overlay, cuda: bool, includes: Iterable[str]) -> str:
    """A source including the implicit headers, every header the overlay shadows, then `includes`."""
    folder = overlay.device if cuda else overlay.host
    shadowed = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*.h"))
    implicit = ["torch/extension.h", "torch/types.h", "cuda.h", "cuda_runtime.h"] if cuda else []
    headers = [*implicit, *(h for h in shadowed if h not in implicit)]
    return "".join(f"#include <{h}>\n" for h in headers) + "".join(f"#include {h}\n" for h in includes)


@dataclass(frozen=True)
class HeaderNames:
    """Every identifier token of the full headers' preprocessed text, and the macro names among them."""

    identifiers: frozenset[str]  # includes `macros`
    macros: frozenset[str]


_LINE_MARKER = re.compile(r"^# \d+ .*$", re.M)
WORD = re.compile(r"[A-Za-z_$][\w$]*")  # an identifier token (build/batch_scan.py reads it too)


def full_header_names(
    overlay: Overlay,
    compiler: str,
    full_flags: str,
    cuda: bool,
    includes: Iterable[str] = (),
    timeout_s: float = 600.0,
    cancel: CancelToken | None = None,
) -> HeaderNames | None:
    """The identifiers the full headers (plus `includes`) put into a translation unit, or None.

    One source includes what `macro_differences` includes (the implicit headers, the originals of
    every header the overlay shadows, then `includes`); `compiler -E -dD` preprocesses it with
    `full_flags` (no overlay folder), for `cuda.cu` in both of nvcc's preprocessing passes: the
    device pass `nvcc -E` runs and the host pass (`-U__CUDA_ARCH__ -UCUDA_DOUBLE_MATH_FUNCTIONS`,
    the two defines `nvcc --dryrun` shows only the device pass gets). Every identifier-like word
    of the output (line markers dropped; string literals and `#pragma` lines kept) is a name,
    and so is every macro the headers define (`-dD` prints the `#define` lines): a declaration
    in those headers, a macro, a `#pragma GCC poison`, each needs its name as a token there.
    The words of the overlay's own headers are added too (a name only a slim header spells).
    Cached per compiler, flags and includes in the overlay folder (`names-<hash>.txt`, sorted
    lines, macros marked with a leading `#`). None when a preprocessor run fails, and once
    `cancel` is set (the preprocessor is killed, the scan stops after the pass it is in).
    """
    text = _probe_text(overlay, cuda, includes)
    passes: tuple[list[str], ...] = (
        (["-Xcompiler", "-dD"], ["-Xcompiler", "-dD", "-U__CUDA_ARCH__", "-UCUDA_DOUBLE_MATH_FUNCTIONS"])
        if cuda
        else (["-dD"],)
    )
    key = hashlib.sha256(f"names\0{compiler}\0{full_flags}\0{text}\0{passes}".encode()).hexdigest()
    cached = overlay.root / f"names-{key[:16]}.txt"
    if cached.is_file():
        lines = cached.read_text().split()
        marked = frozenset(w[1:] for w in lines if w.startswith("#"))
        return HeaderNames(frozenset(w for w in lines if not w.startswith("#")) | marked, marked)
    work = Path(tempfile.mkdtemp(prefix=".names-", dir=overlay.root))
    try:
        src = work / ("probe.cu" if cuda else "probe.cpp")
        src.write_text(text)
        words: set[str] = set()
        macros: set[str] = set()
        for extra in passes:
            out = _preprocess(compiler, full_flags, extra, src, work, timeout_s, cancel)
            if out is None:
                return None
            macros.update(m.group(1) for m in re.finditer(r"^#define (\w+)", out, re.M))
            words.update(w for p in _PRAGMA.finditer(out) for w in WORD.findall(p.group(0)))
            words.update(outer_scope_words(out))
            if cancel is not None and cancel.is_set():
                return None
        folder = overlay.device if cuda else overlay.host
        for h in folder.rglob("*"):
            if h.is_file():
                words.update(WORD.findall(h.read_text(errors="replace")))
        words -= macros
        tmp = work / "names.txt"
        tmp.write_text("\n".join([*sorted(words), *(f"#{m}" for m in sorted(macros))]) + "\n")
        tmp.replace(cached)
        return HeaderNames(frozenset(words | macros), frozenset(macros))
    finally:
        shutil.rmtree(work, ignore_errors=True)


_PRAGMA = re.compile(r"^[ \t]*#[ \t]*pragma\b.*$", re.M)
# _TOKEN's alternatives, in its order (the raw string's with a name for its delimiter group)
_DIRECTIVE_TOKEN = r"^[ \t]*\#[^\n]*"
_RAW_TOKEN = r'\b(?:u8|u|U|L)?R"(?P<DELIM>[^()\\\s]{0,16})\((?s:.*?)\)(?P=DELIM)"'
_STRING_TOKEN = r'(?:\b(?:u8|u|U|L))?"(?:[^"\\\n]|\\.)*"'
_CHAR_TOKEN = r"(?:\b(?:u8|u|U|L))?'(?:[^'\\\n]|\\.)*'"
_NUMBER_TOKEN = r"\.?\d(?:[\w.']|[eEpP][+-])*"
_WORD_TOKEN = r"[A-Za-z_$][\w$]*"
_PUNCT_TOKEN = r"::|->|&&|>>|[{}()\[\];<>,*&^=]"
_TOKEN = re.compile(
    rf"(?P<directive>{_DIRECTIVE_TOKEN})|(?P<raw>{_RAW_TOKEN.replace('DELIM', 'delim')})"
    rf"|(?P<string>{_STRING_TOKEN})|(?P<char>{_CHAR_TOKEN})|(?P<number>{_NUMBER_TOKEN})"
    rf"|(?P<word>{_WORD_TOKEN})|(?P<punct>{_PUNCT_TOKEN})",
    re.M,
)
# From a position inside a body, what `_TOKEN.finditer` reads there up to its next `{` or `}` token,
# as one match. Each step is the first _TOKEN alternative that matches there, in _TOKEN's order,
# unless it is a brace; else a run of blanks (only a directive starts with one, and it is tried
# first), a newline, or one character where no _TOKEN alternative matches, which finditer passes.
_BODY_SKIP = re.compile(
    rf"(?:{_DIRECTIVE_TOKEN}|[ \t]+|{_RAW_TOKEN.replace('DELIM', 'd1')}|{_STRING_TOKEN}|{_CHAR_TOKEN}"
    rf"|{_NUMBER_TOKEN}|{_WORD_TOKEN}|{_PUNCT_TOKEN.replace('{}', '')}|\n"
    rf"|(?!{_DIRECTIVE_TOKEN}|{_RAW_TOKEN.replace('DELIM', 'd2')}|{_STRING_TOKEN}|{_CHAR_TOKEN}"
    rf"|{_NUMBER_TOKEN}|{_WORD_TOKEN}|{_PUNCT_TOKEN})[\s\S])*",
    re.M,
)
_TYPE_KEYS = frozenset({"namespace", "class", "struct", "union", "enum"})
_DECLARATOR_START = frozenset({"*", "&", "&&", "(", "::", "^"})


def outer_scope_words(text: str, skip_bodies: bool = True) -> set[str]:
    """The identifiers of preprocessed C++ `text` that a later line could find by name lookup.

    Kept: every word at namespace, class, enum or `extern "C"` scope (declarations, their types,
    initializers, template arguments: more than the names declared there), in a parenthesized
    declarator (`(*fp)`, `(S::*pm)`, `(x)`). Left out: the words in function bodies and brace
    initializers, in parameter lists (a group of two or more tokens that does not start like a
    declarator), in template parameter lists, in string and character literals. A `{` opens a
    scope when the declaration before it names `namespace`, `class`, `struct`, `union` or `enum`
    (a function returning `struct S*` counts as one: more words, never fewer) or is `extern "C"`.
    When the braces, parentheses or template lists do not balance, every word of `text`.
    `skip_bodies` reads a body from one brace token to the next with one match (`_BODY_SKIP`) instead
    of token by token: the same tokens count, only faster (the other way is kept to test that).
    """
    words: set[str] = set()
    scopes: list[bool] = []  # per open `{`: True for a namespace/class/enum/linkage scope
    groups: list[list[str]] = []  # per open `(` at a scope: its tokens so far
    stmt: list[str] = []  # tokens of the current declaration at a scope, outside parentheses
    template_depth = 0  # inside `template < ... >` at a scope
    template_braces = 0
    body_depth = 0  # braces (and anything) inside a body or in parentheses: skipped
    pending_template = False
    tokens = _TOKEN.finditer(text)
    while (m := next(tokens, None)) is not None:
        kind = m.lastgroup
        if kind in ("directive", "string", "char", "number", "raw"):
            if kind != "directive" and not body_depth and groups:
                groups[-1].append("0")
            continue
        tok = m.group(0)
        if body_depth:
            if tok == "{":
                body_depth += 1
            elif tok == "}":
                body_depth -= 1
                if body_depth == 0 and not groups:
                    stmt = ["}"]
            if body_depth and skip_bodies:  # on to the body's next brace token in one match
                tokens = _TOKEN.finditer(text, _BODY_SKIP.match(text, m.end()).end())  # type: ignore[union-attr]
            continue
        if groups:  # in parentheses at a scope
            if tok == "(":
                groups.append([])
            elif tok == ")":
                inner = groups.pop()
                keep = inner[:1] and (
                    inner[0] in _DECLARATOR_START
                    or len(inner) == 1
                    or any(a == "::" and b == "*" for a, b in itertools.pairwise(inner))
                )
                if groups:
                    groups[-1].extend(inner if keep else ["(", ")"])
                else:
                    if keep:
                        words.update(w for w in inner if w[0].isalpha() or w[0] in "_$")
                    stmt.append(")")
            elif tok == "{":
                body_depth = 1  # a lambda or a brace initializer in an argument
            elif tok in (";", "}"):
                return set(WORD.findall(text))
            else:
                groups[-1].append(tok)
            continue
        if template_depth:
            if tok == "<":
                template_depth += 1
            elif tok in (">", ">>"):
                template_depth -= 2 if tok == ">>" else 1
                if template_depth < 0:
                    return set(WORD.findall(text))
            elif tok == "{":
                template_braces += 1  # a default argument's `T{}`
            elif tok == "}":
                template_braces -= 1
                if template_braces < 0:
                    return set(WORD.findall(text))
            elif tok == ";" and not template_braces:
                return set(WORD.findall(text))
            elif tok == "(":
                groups.append(
                    []
                )  # a default argument's parentheses: kept only if they look like a declarator
            continue
        if pending_template:
            pending_template = False
            if tok == "<":
                template_depth = 1
                continue
        if kind == "word":
            if tok == "template":
                pending_template = True
            words.add(tok)
            stmt.append(tok)
        elif tok == "(":
            groups.append([])
        elif tok == ")":
            return set(WORD.findall(text))
        elif tok == "{":
            scope = not stmt or stmt[-1] == "extern" or not _TYPE_KEYS.isdisjoint(stmt)
            if scope:
                scopes.append(True)
                stmt = []
            else:
                body_depth = 1
        elif tok == "}":
            if not scopes:
                return set(WORD.findall(text))
            scopes.pop()
            stmt = ["}"]
        elif tok == ";":
            stmt = []
        else:
            stmt.append(tok)
    if scopes or groups or body_depth or template_depth:
        return set(WORD.findall(text))
    return words


def _preprocess(
    compiler: str,
    flags: str,
    extra: list[str],
    src: Path,
    work: Path,
    timeout_s: float,
    cancel: CancelToken | None = None,
    stderr_to: Path | None = None,
) -> str | None:
    """`compiler flags -E extra src`'s output (stdout), or None if it failed, timed out or was cancelled.

    Runs through `objects.run_process`: the compiler (nvcc and the `gcc -E` it starts) in a session
    of its own, killed as a group on `cancel` or timeout, nvcc killed when the thread that started
    it dies. With `stderr_to`, the compiler's stderr goes to that file (a shell in front of it
    sets that up and execs it), else it is dropped."""
    import shlex

    if cancel is not None and cancel.is_set():
        return None
    cmd = [*shlex.split(compiler), *shlex.split(flags), "-E", *extra, str(src)]
    if stderr_to is not None:
        cmd = ["sh", "-c", 'exec "$@" 2>"$0"', str(stderr_to), *cmd]
    try:
        rc, out, cancelled, timed_out = run_process(cmd, timeout_s, cancel, cwd=work, merge_stderr=False)
    except OSError:  # no such compiler
        return None
    return out if rc == 0 and not (cancelled or timed_out) else None


def _defines(
    compiler: str,
    flag_sets: tuple[str, ...],
    extra: list[str],
    src: Path,
    work: Path,
    timeout_s: float,
    cancel: CancelToken | None = None,
    mark: tuple[Path, list[str]] | None = None,
) -> tuple[list[set[str]], bool] | None:
    """The `#define` lines `compiler -E` prints for `src` under each flag set, or None if one run
    failed or was cancelled (`_preprocess`); with `mark` (a header `src` includes, and `-H` as the
    compiler takes it), then whether the run with the first flag set entered no file after it.

    That run then also gets `-H` (`-Xcompiler -H` through nvcc): gcc lists on stderr each header
    file it enters, a line of dots and its path, in order, and leaves out a file that `#pragma
    once` or a defined include guard keeps it from reading again. An `#include` line that enters no
    file reads no directive, so the macros after the lines past `mark` are those after `mark`, and
    `mark` is empty: the same as those of `src` cut before its `mark` line."""
    defined: list[set[str]] = []
    unchanged = False
    for i, flags in enumerate(flag_sets):
        listed = work / "included.txt" if mark is not None and i == 0 else None
        h = mark[1] if mark is not None and listed is not None else []
        out = _preprocess(compiler, flags, [*extra, *h], src, work, timeout_s, cancel, listed)
        if out is None:
            return None
        defined.append({line for line in out.splitlines() if line.startswith("#define ")})
        if mark is not None and listed is not None and listed.is_file():
            entered = _ENTERED.findall(listed.read_text(errors="replace"))
            at = [j for j, path in enumerate(entered) if path == str(mark[0])]
            unchanged = len(at) == 1 and at[0] == len(entered) - 1
    return defined, unchanged


def undecidable_reason(overlay: Overlay, output: str) -> str | None:
    """When a failed build used stand-ins and its errors name what they lack, a sentence saying so."""
    if not overlay.standins_used:
        return None
    errors = [line for line in output.splitlines() if "error" in line]
    named = sorted({m.group(0) for line in errors for m in _STANDIN_NAMES.finditer(line)})
    in_standin = any(str(overlay.standins) in line for line in errors)
    if not named and not in_standin:
        return None
    missing = ", ".join(h for h in overlay.standins_used if not h.startswith("c10/"))
    what = f" ({', '.join(named[:4])})" if named else ""
    return (
        f"This machine lacks {missing or 'some CUDA library headers'}: cudice compiled against minimal "
        f"stand-ins, and the source uses more of those libraries than they declare{what}, so whether it "
        "compiles cannot be decided here. Verify it on a machine with the full CUDA toolkit "
        "(cuBLAS, cuSPARSE and cuSOLVER headers) or a CUDA build of torch."
    )
