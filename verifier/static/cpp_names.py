"""Which C++ names are ATen's: the tables and patterns `static/cpp_rules.py` judges host code with.

- glue: ATen calls a host function may make (allocation, options, metadata, guards, the
  helpers of `ATEN_HELPERS`: `at::ceil_div`, `ATen/TensorUtils.h` argument checks), per
  strictness level, and under `at::cuda::`/`c10::cuda::` the device and stream queries only;
  capitalised names are types and guards (glue), except under `torch::nn` (`is_nn`), where they
  are libtorch modules that compute (`torch::nn::ReLU()->forward(x)`);
- `aten_patterns()`: a qualified ATen call or function reference under any name
  `cpp_preprocess.aten_namespaces()` found for ATen's namespaces, template arguments allowed;
- the ATen functions a host function reaches *unqualified* (argument-dependent lookup, `using
  namespace`), split into names only ATen has and names C/C++ also has for scalars.

Tables only; matching and locating are `static/cpp_rules.py`'s.
"""

from __future__ import annotations

import re

from cudice.verifier.static.policy import ACTIVATIONS, EMPTY_FACTORIES, FILLING_FACTORIES

# ATen helpers that are no tensor ops: integer arithmetic for launch grids (`ATen/ceil_div.h`) and
# the argument checks of `ATen/TensorUtils.h` (`at::checkAllSameGPU(c, {x_arg})`, as torchvision's
# kernels do), which only read metadata and throw. Their types (`at::TensorArg`, `at::CheckedFrom`)
# are capitalised and glue already (`is_glue`).
ATEN_HELPERS = frozenset(
    {
        "ceil_div",
        "checkAllContiguous",
        "checkAllDefined",
        "checkAllSameGPU",
        "checkAllSameNumel",
        "checkAllSameSize",
        "checkAllSameType",
        "checkBackend",
        "checkContiguous",
        "checkDefined",
        "checkDeviceType",
        "checkDim",
        "checkDimRange",
        "checkLayout",
        "checkNumel",
        "checkSameDim",
        "checkSameGPU",
        "checkSameNumel",
        "checkSameSize",
        "checkSameType",
        "checkScalarType",
        "checkScalarTypes",
        "checkSize",
        "checkSize_symint",
    }
)
# ATen glue a host function may call. Strict: allocation without initialisation, options,
# metadata and guards; the other levels also initialising allocations and a few helpers.
CPP_GLUE_STRICT = frozenset(
    {
        *EMPTY_FACTORIES,
        "from_blob",
        "TensorOptions",
        "dtype",
        "device",
        "Device",
        "Scalar",
        "IntArrayRef",
        "elementSize",
        "toString",
        "typeMetaToScalarType",
        "DeviceGuard",
        "NoGradGuard",
        # c10's value helpers: a message built from values (what `TORCH_CHECK` itself uses), a scalar
        # type's kind, products and sums of sizes; none reads tensor data
        "str",
        "isFloatingType",
        "isIntegralType",
        "isComplexType",
        "isReducedFloatingType",
        "multiply_integers",
        "sum_integers",
        "div_round_up",
        *ATEN_HELPERS,
    }
)
CPP_GLUE = CPP_GLUE_STRICT | {
    *FILLING_FACTORIES,
    "globalContext",
    "device_of",
    "numel",
    "get_default_dtype",
    "irange",
    "nullopt",
}
# Under `at::cuda::`/`c10::cuda::` only these query or steer the device; anything else there
# (`at::cuda::blas::gemm<float>(...)`) is ATen doing work.
CUDA_NS_GLUE = frozenset(
    {
        "getCurrentCUDAStream",
        "getDefaultCUDAStream",
        "getStreamFromExternal",
        "getCurrentDeviceProperties",
        "getDeviceProperties",
        "current_device",
        "device_count",
        "set_device",
        "device_synchronize",
        "stream_synchronize",
        "warp_size",
        "getNumGPUs",
        "is_available",
        "getCurrentCUDABlasHandle",
        "getCurrentCUDASparseHandle",
        "getCurrentCUDASolverDnHandle",
        "raw_alloc",
        "raw_alloc_with_stream",
        "raw_delete",
        "get",
        "c10_cuda_check_implementation",
    }
)


def aten_patterns(roots: set[str]) -> tuple[re.Pattern[str], re.Pattern[str]]:
    """A qualified ATen call (template arguments allowed: `at::cuda::blas::gemm<float>(`) and a qualified
    ATen function taken by address or passed on (`auto op = &at::mm; op(a, b)`), under any of `roots`."""
    alt = "|".join(sorted(map(re.escape, roots)))
    call = re.compile(rf"\b(?P<root>{alt})::((?:[A-Za-z_]\w*::)*)([A-Za-z_]\w*)\s*(?:<[^;{{}}()]*>\s*)?\(")
    ref = re.compile(rf"(?<=[&=,(])\s*(?P<root>{alt})::((?:[A-Za-z_]\w*::)*)([a-z_]\w*)\s*(?=[;,)])")
    return call, ref


def is_glue(ns: str, name: str, glue: frozenset[str] | set[str]) -> bool:
    if is_nn(ns):
        return False  # `torch::nn::ReLU()`, `torch::nn::functional::relu`: libtorch modules compute
    if name[:1].isupper() or name in ("nullopt",):
        return True  # types, guards, options
    if "cuda::" in ns:
        return name in CUDA_NS_GLUE or "CUDACachingAllocator::" in ns
    return name in glue


def is_nn(ns: str) -> bool:
    """Whether the namespaces `ns` (`nn::`, `nn::functional::`, `functional::`) are libtorch's
    module API, whose capitalised names are modules (`torch::nn::ReLU`), not glue types."""
    parts = [p for p in ns.split("::") if p]
    return "nn" in parts or parts[:1] == ["functional"]


# ATen functions a host function can reach *unqualified*: argument-dependent lookup finds
# `at::mm` for `mm(a, b)` when `a` is a tensor (`at::Tensor` lives in namespace `at`), and
# `using namespace torch;` does the same for any argument. Names that are also C/C++ scalar or
# standard-library functions (`max`, `exp`, `sort` …) count only when an argument is a tensor.
ATEN_UNQUALIFIED = frozenset(
    {
        "mm",
        "bmm",
        "matmul",
        "addmm",
        "addbmm",
        "baddbmm",
        "addmv",
        "mv",
        "einsum",
        "linear",
        "bilinear",
        "conv1d",
        "conv2d",
        "conv3d",
        "conv_transpose1d",
        "conv_transpose2d",
        "conv_transpose3d",
        "convolution",
        "_convolution",
        "softmax",
        "log_softmax",
        "_softmax",
        "_log_softmax",
        "layer_norm",
        "native_layer_norm",
        "batch_norm",
        "native_batch_norm",
        "group_norm",
        "native_group_norm",
        "instance_norm",
        "rms_norm",
        *ACTIVATIONS,
        "relu_",
        "threshold",
        "glu",
        "logit",
        "max_pool1d",
        "max_pool2d",
        "max_pool3d",
        "avg_pool1d",
        "avg_pool2d",
        "avg_pool3d",
        "adaptive_avg_pool1d",
        "adaptive_avg_pool2d",
        "adaptive_avg_pool3d",
        "adaptive_max_pool2d",
        "scaled_dot_product_attention",
        "embedding",
        "dropout",
        "cumsum",
        "cumprod",
        "argmax",
        "argmin",
        "topk",
        "logsumexp",
        "mean",
        "sum",
        "prod",
        "var",
        "amax",
        "amin",
        "masked_fill",
        "index_select",
        "gather",
        "scatter",
        "scatter_add",
        "tril",
        "triu",
        "diag",
        "flip",
        "repeat_interleave",
        "cosine_similarity",
        "pairwise_distance",
        "cdist",
        "mse_loss",
        "l1_loss",
        "cross_entropy",
        "nll_loss",
        "binary_cross_entropy",
        "kl_div",
        "smooth_l1_loss",
        "huber_loss",
        "triplet_margin_loss",
        "hinge_embedding_loss",
        "margin_ranking_loss",
        "cosine_embedding_loss",
        "pixel_shuffle",
        "upsample_bilinear2d",
        "upsample_nearest2d",
        "grid_sampler",
        "constant_pad_nd",
        "clamp_min",
        "clamp_max",
        "reciprocal",
        "rsqrt",
        "square",
        "addcmul",
        "addcdiv",
        "cat",
        "stack",
        "allclose",
        "isclose",
        "equal",
        "nan_to_num",
        "frobenius_norm",
        "nuclear_norm",
        "_fused_sdp_choice",
    }
)
ATEN_AMBIGUOUS = frozenset(
    {
        "abs",
        "min",
        "max",
        "exp",
        "exp2",
        "expm1",
        "log",
        "log2",
        "log10",
        "log1p",
        "sqrt",
        "pow",
        "floor",
        "ceil",
        "round",
        "trunc",
        "sin",
        "cos",
        "tan",
        "asin",
        "acos",
        "atan",
        "atan2",
        "sinh",
        "cosh",
        "tanh",
        "erf",
        "erfc",
        "fmod",
        "hypot",
        "sign",
        "remainder",
        "sort",
        "fill",
        "all",
        "any",
        "minimum",
        "maximum",
        "clamp",
        "clip",
        "div",
        "mul",
        "add",
        "sub",
        "neg",
        "where",
        "dot",
        "norm",
        "lerp",
        "cross",
        "outer",
        "roll",
        "kron",
        "median",
        "mode",
        "std",
        "nonzero",
        "unique",
        "copysign",
    }
)
