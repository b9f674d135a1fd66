"""What a candidate's `ModelNew.forward` may do with PyTorch: the glue allow-list per strictness level.

The rule (docs/anticheat.md): the custom CUDA kernel must do the computing. PyTorch may only
*arrange* data around it — allocate outputs, take views, read metadata, move to the device. A
compute op (matmul, conv, `torch.relu`, `F.softmax`, `x @ w`, `x + y` on tensors …) in `forward`
or anything it calls is an error, because the speedup would then measure PyTorch, not the kernel.

Three levels (`VerifyConfig.static_policy`):

- `strict`  — allocation without initialisation (`empty*`), views and metadata only. Even
  `zeros`/`fill_`/`clone`/dtype casts are errors: every byte the output holds comes from the kernel.
- `default` — also initialising allocations (`zeros`, `ones`, `full`, `new_zeros`, `fill_`,
  `zero_`; an atomicAdd reduction needs a zeroed output), `clone`/`copy_` and dtype casts.
- `lenient` — the "forward-wrapper" style
  (https://github.com/ScalingIntelligence/KernelBench/issues/57): compute ops are *warnings*, as
  long as forward launches at least one custom kernel; `cat`/`stack` count as glue.

The module-wide tables below the glue lists (threads, processes, files, the dispatcher, builders
of code the checks cannot read) are the Python side of docs/anticheat.md's attack classes.

This module holds tables only; `static/checks.py` applies them. It does not decide what a
call's receiver is (that needs the AST walk) and it knows nothing about C++ (`static/cuda.py`).
"""

from __future__ import annotations

import enum
import re

from cudice.verifier.static.tensor_api import TENSOR_API_METHODS


class Strictness(str, enum.Enum):
    STRICT = "strict"
    DEFAULT = "default"
    LENIENT = "lenient"


def parse_strictness(value: object) -> Strictness:
    """`"strict"`/`"default"`/`"lenient"` (or a `Strictness`) → `Strictness`; anything else is an error."""
    if isinstance(value, Strictness):
        return value
    try:
        return Strictness(str(value))
    except ValueError:
        allowed = ", ".join(s.value for s in Strictness)
        raise ValueError(
            f"static_policy={value!r} is not a strictness level; use one of {allowed} "
            "(docs/anticheat.md explains each)"
        ) from None


# -- tensor factories, in Python (`torch.empty`) and C++ (`at::empty`) ---------------------------

# Allocation without initialisation: glue at every level. With FILLING_FACTORIES, also the
# factories the slim headers declare (build/headers.py).
EMPTY_FACTORIES = ("empty", "empty_like", "empty_strided")
# Allocations that initialise what they allocate: glue except in strict.
FILLING_FACTORIES = ("zeros", "zeros_like", "ones", "ones_like", "full", "full_like")

# -- torch.<fn>(...) functions -------------------------------------------------------------------

# Allocation without initialisation, metadata, views, device/stream queries, context managers.
TORCH_GLUE_ALWAYS = frozenset(
    {
        *EMPTY_FACTORIES,
        "is_tensor",
        "is_floating_point",
        "is_complex",
        "numel",
        "device",
        "Size",
        "finfo",
        "iinfo",
        "get_default_dtype",
        "result_type",
        "promote_types",
        "can_cast",
        "is_same_size",
        "broadcast_shapes",
        "reshape",
        "flatten",
        "unflatten",
        "squeeze",
        "unsqueeze",
        "transpose",
        "permute",
        "narrow",
        "split",
        "chunk",
        "unbind",
        "as_strided",
        "movedim",
        "swapaxes",
        "no_grad",
        "inference_mode",
        "set_grad_enabled",
        "enable_grad",
        "load_inline",
        "broadcast_to",
        "broadcast_tensors",
        "atleast_1d",
        "atleast_2d",
        "atleast_3d",
        "t",
        "detach",
        "contiguous_format",
        "channels_last",
        # torch.cuda.* / torch.backends queries (attribute chains are matched on their last name)
        "current_stream",
        "default_stream",
        "current_device",
        "get_device_properties",
        "is_available",
        "device_count",
        "get_device_name",
        "get_device_capability",
        "synchronize",
        "set_device",
    }
)
# `torch.cuda.<name>` calls that only query or steer the device (streams are judged by STREAM_APIS).
# Anything else under `torch.cuda` (`comm.reduce_add`, `jiterator`, `nccl`) is judged like `torch.*`.
TORCH_CUDA_PLUMBING = frozenset(
    {
        "device",
        "device_of",
        "init",
        "is_initialized",
        "get_arch_list",
        "is_bf16_supported",
        "mem_get_info",
        "memory_allocated",
        "max_memory_allocated",
        "memory_reserved",
        "max_memory_reserved",
        "reset_peak_memory_stats",
        "empty_cache",
        "manual_seed",
        "manual_seed_all",
        "seed",
        "get_rng_state",
        "set_rng_state",
        "current_blas_handle",
        "can_device_access_peer",
        "range_push",
        "range_pop",
        "range",
        "mark",
        "Event",
    }
)
# Initialising allocations, copies and casts: fine in default, errors in strict.
TORCH_GLUE_DEFAULT = frozenset({*FILLING_FACTORIES, "tensor", "as_tensor", "from_numpy", "arange", "clone"})
TORCH_GLUE_LENIENT = frozenset({"cat", "concat", "concatenate", "stack", "hstack", "vstack"})

# -- tensor.<method>(...) ------------------------------------------------------------------------

# Methods that answer with metadata (numbers, flags), not a tensor; static/forward.py also reads
# them as "the result is no tensor".
TENSOR_METADATA_METHODS = frozenset(
    {
        "size",
        "dim",
        "numel",
        "stride",
        "storage_offset",
        "data_ptr",
        "element_size",
        "nelement",
        "is_contiguous",
        "get_device",
        "is_floating_point",
        "item",
    }
)
# Methods are judged by name only: the receiver's type is unknown statically. The glue tables are
# the allow-list: a name of the tensor API (static/tensor_api.py) is compute unless they or
# `TENSOR_API_NOT_COMPUTE` name it; a name outside the tensor API is another object's method.
TENSOR_GLUE_ALWAYS = frozenset(
    {
        *TENSOR_METADATA_METHODS,
        "contiguous",
        "view",
        "view_as",
        "reshape",
        "reshape_as",
        "flatten",
        "unflatten",
        "squeeze",
        "unsqueeze",
        "permute",
        "transpose",
        "t",
        "expand",
        "expand_as",
        "narrow",
        "select",
        "unbind",
        "split",
        "chunk",
        "as_strided",
        "new_empty",
        "new_empty_strided",
        "detach",
        "requires_grad_",
        "to",
        "cuda",
        "untyped_storage",
        "movedim",
        "swapaxes",
        "broadcast_to",
        "is_cuda",
        "sizes",
    }
)
TENSOR_GLUE_DEFAULT = frozenset(
    {
        "new",
        "bool",
        "byte",
        "char",
        "cfloat",
        "cdouble",
        "chalf",
        "type",
        "narrow_copy",
        "resize_",
        "resize_as_",
        "new_zeros",
        "new_ones",
        "new_full",
        "new_tensor",
        "fill_",
        "zero_",
        "clone",
        "copy_",
        "float",
        "double",
        "half",
        "bfloat16",
        "int",
        "long",
        "short",
        "type_as",
    }
)

# Names of the tensor API (static/tensor_api.py) that are neither compute nor in the glue tables
# above: metadata and predicates that answer with numbers or flags, views under other names, and
# names that other objects' methods share (a dict's `values`, a list's `index`, a queue's `put`),
# which a call on an unknown receiver must not be flagged for. Every other name of the tensor API
# is compute (`tensor_method_is_compute`).
TENSOR_API_NOT_COMPUTE = frozenset(
    {
        # metadata, predicates and autograd bookkeeping
        "device",
        "dtype",
        "shape",
        "ndim",
        "ndimension",
        "layout",
        "itemsize",
        "nbytes",
        "dim_order",
        "is_leaf",
        "output_nr",
        "requires_grad",
        "retains_grad",
        "grad",
        "grad_fn",
        "data",
        "name",
        "storage_type",
        "const_data_ptr",
        "is_same_size",
        "is_complex",
        "is_conj",
        "is_cpu",
        "is_inference",
        "is_meta",
        "is_neg",
        "is_nested",
        "is_pinned",
        "is_quantized",
        "is_shared",
        "is_signed",
        "is_sparse",
        "is_sparse_csr",
        "dense_dim",
        "sparse_dim",
        "T",
        "mT",
        "H",
        "mH",
        # views and splits under other names
        "swapdims",
        "moveaxis",
        "ravel",
        "adjoint",
        "tensor_split",
        "split_with_sizes",
        "hsplit",
        "vsplit",
        "dsplit",
        "unsafe_chunk",
        "unsafe_split",
        "unsafe_split_with_sizes",
        "squeeze_",
        "unsqueeze_",
        "t_",
        "transpose_",
        "swapaxes_",
        "swapdims_",
        "detach_",
        # shared with other objects' methods
        "values",
        "index",
        "indices",
        "put",
    }
)

# Activation functions: tensor compute methods and ATen functions that a C++ host function
# reaches unqualified (static/cpp_rules.py).
ACTIVATIONS = frozenset(
    {
        "relu",
        "gelu",
        "silu",
        "sigmoid",
        "softplus",
        "hardtanh",
        "leaky_relu",
        "elu",
        "selu",
        "mish",
        "hardswish",
        "hardsigmoid",
    }
)
# Known tensor compute methods (and their in-place `_` forms, added below).
_COMPUTE_METHOD_BASE = frozenset(
    {
        *ACTIVATIONS,
        "abs",
        "acos",
        "add",
        "addbmm",
        "addcdiv",
        "addcmul",
        "addmm",
        "addmv",
        "all",
        "amax",
        "amin",
        "any",
        "argmax",
        "argmin",
        "argsort",
        "asin",
        "atan",
        "atan2",
        "baddbmm",
        "bmm",
        "ceil",
        "clamp",
        "clamp_min",
        "clamp_max",
        "clip",
        "conv1d",
        "conv2d",
        "conv3d",
        "cos",
        "cosh",
        "cummax",
        "cummin",
        "cumprod",
        "cumsum",
        "diag",
        "div",
        "divide",
        "dot",
        "einsum",
        "eq",
        "erf",
        "erfc",
        "exp",
        "exp2",
        "expm1",
        "flip",
        "floor",
        "floor_divide",
        "fmod",
        "gather",
        "ge",
        "gt",
        "index_add",
        "index_select",
        "inner",
        "kron",
        "le",
        "lerp",
        "log",
        "log10",
        "log1p",
        "log2",
        "log_softmax",
        "logical_and",
        "logical_not",
        "logical_or",
        "logsumexp",
        "lt",
        "masked_fill",
        "masked_scatter",
        "matmul",
        "max",
        "maximum",
        "mean",
        "median",
        "min",
        "minimum",
        "mm",
        "mode",
        "mul",
        "multiply",
        "mv",
        "nan_to_num",
        "ne",
        "neg",
        "negative",
        "norm",
        "outer",
        "pow",
        "prod",
        "reciprocal",
        "remainder",
        "renorm",
        "repeat",
        "repeat_interleave",
        "roll",
        "round",
        "rsqrt",
        "scatter",
        "scatter_add",
        "sign",
        "sin",
        "sinh",
        "softmax",
        "sort",
        "sqrt",
        "square",
        "std",
        "sub",
        "subtract",
        "sum",
        "tan",
        "tanh",
        "tile",
        "topk",
        "tril",
        "triu",
        "true_divide",
        "trunc",
        "var",
        "where",
        "xlogy",
        "cross",
        "cumulative_trapezoid",
        "histc",
        "kthvalue",
        "nansum",
        "nanmean",
        "logaddexp",
        "hypot",
        "heaviside",
        "normalize",
        "layer_norm",
        "group_norm",
        "batch_norm",
        "instance_norm",
        "linear",
        "dropout",
        "sgn",
        "frac",
        "exp_",
        "abs_",
        "cpu",
        "numpy",  # a round trip to the host: the work then happens outside the kernel
    }
)
COMPUTE_METHODS = _COMPUTE_METHOD_BASE | frozenset(n + "_" for n in _COMPUTE_METHOD_BASE)
# Operator dunders called by name (`x.__matmul__(w)`) are compute too.
COMPUTE_DUNDERS = frozenset(
    {
        "__add__",
        "__radd__",
        "__iadd__",
        "__sub__",
        "__rsub__",
        "__isub__",
        "__mul__",
        "__rmul__",
        "__imul__",
        "__truediv__",
        "__rtruediv__",
        "__itruediv__",
        "__matmul__",
        "__rmatmul__",
        "__pow__",
        "__neg__",
        "__abs__",
        "__floordiv__",
        "__mod__",
        "__lt__",
        "__le__",
        "__gt__",
        "__ge__",
        "__eq__",
        "__ne__",
        "__and__",
        "__or__",
        "__xor__",
    }
)

# `torch.nn` classes that hold no computation when called (or are only containers of params).
NN_NON_COMPUTE = frozenset(
    {"Parameter", "ParameterList", "ParameterDict", "Buffer", "Identity", "Flatten", "Unflatten"}
)

# Libraries that compute on the GPU without being the candidate's CUDA (`import cupy` …).
FOREIGN_COMPUTE_MODULES = frozenset({"cupy", "triton", "jax", "jaxlib", "numba", "tensorflow", "pycuda"})
# Imports that start threads or processes.
CONCURRENCY_MODULES = frozenset(
    {
        "threading",
        "_thread",
        "multiprocessing",
        "concurrent",
        "subprocess",
        "asyncio",
        "sched",
        "torch.multiprocessing",
    }
)
# The modules a kernel file may import (their first component): PyTorch, and the standard library's
# plain helpers. Every other import is `static.unvetted_import`: the checks cannot vet what another
# module does (run a string as code, write files, start threads or processes, sleep), so a
# denylist of the ones known to do so would miss the next one (`pkgutil.resolve_name`,
# `timeit.Timer`, `code.InteractiveInterpreter`, `gzip.open`, `sqlite3.connect`, `select.select`).
ALLOWED_IMPORT_ROOTS = frozenset(
    {
        "torch",
        "numpy",
        "math",
        "cmath",
        "os",
        "sys",
        "time",
        "typing",
        "typing_extensions",
        "__future__",
        "functools",
        "itertools",
        "collections",
        "dataclasses",
        "enum",
        "abc",
        "numbers",
        "warnings",
        "re",
        "string",
        "textwrap",
        "operator",
        "contextlib",
        "copy",
        "random",
        "pathlib",
        "fractions",
        "decimal",
        "hashlib",
    }
)
# Parts of allowed modules that start threads or processes, run code on interpreter events or
# reach native code: flagged wherever the file names them, imported or reached as attributes
# (`import logging` makes `logging.handlers` reachable once anything imported it).
UNVETTED_SUBMODULES = (
    "logging.handlers",
    "logging.config",
    "numpy.ctypeslib",
    "numpy.f2py",
    "numpy.distutils",
    "numpy.testing",
    "os.posix_spawn",
    "torch.utils.data",
    "torch.multiprocessing",
    "torch.distributed",
    # run strings as code, shell commands or NVRTC sources the checks never read, or load code
    "torch.utils.benchmark",
    "torch.utils.collect_env",
    "torch.jit",
    "torch.cuda.jiterator",
    "torch.hub",
    "torch.package",
    "torch.profiler",
    "torch.onnx",
    "numpy.lib",
)
# Hooks that run the file's code on interpreter events (calls, lines, imports, audit events, uncaught
# exceptions): code the static checks cannot place.
INTERPRETER_HOOKS = frozenset(
    {
        "sys.settrace",
        "sys.setprofile",
        "sys.addaudithook",
        "sys.meta_path",
        "sys.path_hooks",
        "sys.excepthook",
        "sys.unraisablehook",
        "sys.breakpointhook",
        "sys.displayhook",
        "sys.setswitchinterval",
        "sys.monitoring",
        "threading.settrace",
    }
)
# Imports whose only use in a kernel file is to get around the Python-level checks.
DYNAMIC_CODE_MODULES = frozenset({"ctypes", "importlib", "builtins", "inspect", "gc", "marshal", "pickle"})
# Calls that run code the static checks cannot see.
DYNAMIC_CODE_BUILTINS = frozenset({"exec", "eval", "compile", "__import__", "globals", "vars"})
# Attribute names whose patching games the measurement (timers, sync, comparison).
TIMER_NAMES = frozenset(
    {
        "Event",
        "elapsed_time",
        "record",
        "synchronize",
        "perf_counter",
        "perf_counter_ns",
        "time",
        "time_ns",
        "monotonic",
        "monotonic_ns",
        "process_time",
        "do_bench",
        "allclose",
        "isclose",
        "equal",
        "testing",
        "assert_close",
        "median",
        "mean",
    }
)
# Functions that reveal an input's identity, the key of an output cache.
IDENTITY_FUNCS = frozenset({"id", "hash"})
IDENTITY_METHODS = frozenset({"data_ptr", "_cdata", "untyped_storage", "storage"})


def torch_function_allowed(name: str, level: Strictness) -> bool:
    """Whether `torch.<...>.name(...)` is glue at `level`."""
    if name in TORCH_GLUE_ALWAYS:
        return True
    if level is not Strictness.STRICT and name in TORCH_GLUE_DEFAULT:
        return True
    return level is Strictness.LENIENT and name in TORCH_GLUE_LENIENT


def tensor_method_is_compute(name: str, level: Strictness) -> bool:
    """Whether `<tensor>.name(...)` computes (flagged) at `level`: a known compute method, or any
    name of the tensor API (static/tensor_api.py) that the glue tables do not allow. A name outside
    the tensor API (a list's `append`, an extension's function) is not flagged here."""
    if name in TENSOR_GLUE_ALWAYS or name in TENSOR_API_NOT_COMPUTE:
        return False
    if name.startswith("is_") and name not in ("is_nonzero", "is_set_to"):
        return False  # a predicate about the tensor (`is_mps`, `is_xpu`): no value read
    if name in TENSOR_GLUE_DEFAULT:
        return level is Strictness.STRICT
    return name in COMPUTE_METHODS or name in COMPUTE_DUNDERS or name in TENSOR_API_METHODS


# -- module-wide rules (static/checks.py) ------------------------------------------------------

STREAM_APIS = frozenset(
    {"Stream", "stream", "ExternalStream", "set_stream", "graph", "CUDAGraph", "StreamContext"}
)
PROCESS_APIS = re.compile(r"^(?:os|posix)\.(?:fork\w*|system|popen|spawn\w*|exec\w*|posix_spawn\w*)$")
DYNAMIC_ATTRS = frozenset({"__builtins__", "__globals__", "__code__", "__subclasses__"})
DYNAMIC_DOTTED = frozenset({"sys.modules", "sys._getframe", "inspect.currentframe"})
# Process control and harness files: a candidate that ends its own process or writes files can
# forge the worker's result (write `{"verdict": "correct"}` where the worker would, then exit).
PROCESS_CONTROL = frozenset(
    {
        "os._exit",
        "os.abort",
        "os.kill",
        "os.killpg",
        "sys.exit",
        "signal.signal",
        "signal.alarm",
        "atexit.register",
        "faulthandler.enable",
        "os.chdir",
    }
)
# What a kernel file may use of `os`: the environment, paths and queries. Any other `os.<name>`
# (`pidfd_send_signal`, `register_at_fork`, `posix_spawn`, `kill` …) is process control, files or
# processes (`static.harness_tampering`): an allow-list, as a denylist of `os` misses the next one.
OS_ALLOWED = frozenset(
    {
        "environ",
        "environb",
        "getenv",
        "putenv",
        "path",
        "sep",
        "pathsep",
        "linesep",
        "extsep",
        "curdir",
        "pardir",
        "devnull",
        "name",
        "cpu_count",
        "sched_getaffinity",
        "getcwd",
        "fspath",
        "PathLike",
        "getpid",
        "listdir",
        "scandir",
        "stat",
        "urandom",
    }
)
# Exceptions that end the interpreter rather than report an error.
EXITING_EXCEPTIONS = frozenset({"SystemExit", "KeyboardInterrupt", "GeneratorExit", "BaseException"})
HARNESS_ATTRS = frozenset({"sys.argv", "sys.stdin", "sys.stdout", "sys.stderr", "os.environ.clear"})
WRITE_METHODS = frozenset(
    {
        "write_text",
        "write_bytes",
        "unlink",
        "rmdir",
        "symlink_to",
        "hardlink_to",
        "touch",
        "mkdir",
        "chmod",
        "mkfifo",
        "tofile",
        "dump",
        "rename",
    }
)
FILE_OPS = re.compile(
    r"^(?:os\.(?:remove|unlink|rename|renames|replace|rmdir|removedirs|symlink|link|open|fdopen|"
    r"write|pwrite|mkdir|makedirs|mkfifo|mknod|truncate|ftruncate|chmod|chown|dup2|setsid|setpgrp|"
    r"setpgid|getppid)|shutil\.\w+|tempfile\.\w+|io\.open|numpy\.(?:save\w*|memmap)|"
    r"torch\.(?:save|serialization\.\w+))$"
)
# `os.environ` writes are allowed: LLM-written kernels set `TORCH_CUDA_ARCH_LIST` before building.
# Imports whose only use in a kernel file is finding or changing where the interpreter loads code
# from (a `.pth` file in site-packages runs in every later Python process).
HARNESS_MODULES = frozenset({"site", "sysconfig", "tempfile", "pty"})
# Python's doors to the dispatcher: an `aten` implementation registered here replaces the op for the
# whole process, including the comparison the verifier runs (`aten::allclose`).
DISPATCH_PREFIXES = (
    "torch.library",
    "torch._library",
    "torch._C._dispatch",
    "torch._C._set_dispatch",
    "torch.utils._python_dispatch",
    "torch.overrides.TorchFunctionMode",
    "torch._ops",
    "torch.ops.load_library",
    "torch.classes.load_library",
    "torch._C._jit_set",
)
DISPATCH_ATTRS = frozenset(
    {
        "py_impl",
        "_register_impl",
        "_register_fake",
        "register_kernel",
        "register_fake",
        "register_autograd",
        "_set_dispatch_mode",
        "_push_mode",
    }
)
# Builders that compile code the static checks cannot read (files, NVRTC strings, loaded libraries).
OPAQUE_BUILDERS = re.compile(
    r"^torch\.utils\.cpp_extension\.(?:load|_jit_compile|_write_ninja_file\w*|"
    r"_run_ninja_build|build_extension|BuildExtension)$|^torch\.cuda\._compile_kernel$"
)
# Compilers that generate their own GPU kernels (Triton through Inductor, TorchScript fusers): the
# work would be theirs, not this file's CUDA.
JIT_COMPILERS = (
    "torch.compile",
    "torch._dynamo",
    "torch._inductor",
    "torch.jit.script",
    "torch.jit.trace",
    "torch.jit.freeze",
    "torch.export",
    "torch.fx",
    "torch._higher_order_ops",
)
