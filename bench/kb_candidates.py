"""Deterministic KernelBench-style candidates for bench/verify_speed.py and the build tests.

Each candidate is one self-contained `.py` file: the reference (`Model`, `get_inputs`,
`get_init_inputs`) and a `ModelNew` whose CUDA is a `load_inline` string, written the way
public KernelBench solutions are (`#include <torch/extension.h>`, `TORCH_CHECK`,
`torch::empty*`, `data_ptr<float>()`, `AT_DISPATCH_FLOATING_TYPES`, `<<<grid, block>>>`,
`at::cuda::getCurrentCUDAStream`, float and int arguments). Categories: elementwise,
row reductions, softmax / log-softmax, norms, matmul, fused level-2 epilogues. `generate(n)`
cycles through the templates; the k-th pass changes the block size, so every file is a
distinct source (a fresh build, never a cache hit). The kernels are honest and should be
`correct` on a GPU; they are benchmark inputs, not anti-cheat cases.
"""

from __future__ import annotations

from dataclasses import dataclass

_HEAD = """import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

"""

_ELEMENTWISE = {  # name: (CUDA expression of v, reference expression of x)
    "relu": ("fmaxf(v, 0.0f)", "torch.relu(x)"),
    "sigmoid": ("1.0f / (1.0f + expf(-v))", "torch.sigmoid(x)"),
    "tanh": ("tanhf(v)", "torch.tanh(x)"),
    "gelu": ("0.5f * v * (1.0f + erff(v * 0.70710678118f))", "F.gelu(x)"),
    "swish": ("v / (1.0f + expf(-v))", "x * torch.sigmoid(x)"),
    "leaky_relu": ("v > 0.0f ? v : 0.01f * v", "F.leaky_relu(x, 0.01)"),
    "hardtanh": ("fminf(fmaxf(v, -1.0f), 1.0f)", "F.hardtanh(x)"),
    "elu": ("v > 0.0f ? v : expm1f(v)", "F.elu(x)"),
    "softsign": ("v / (1.0f + fabsf(v))", "F.softsign(x)"),
    "hardsigmoid": ("fminf(fmaxf(v / 6.0f + 0.5f, 0.0f), 1.0f)", "F.hardsigmoid(x)"),
}

_EW_CUDA = """
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void {k}(const float* __restrict__ x, float* __restrict__ y, int64_t n) {{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {{
        float v = x[i];
        y[i] = {expr};
    }}
}}

torch::Tensor {f}(torch::Tensor x) {{
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "x must be float32");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    int64_t n = xc.numel();
    const int threads = {t};
    const int64_t blocks = (n + threads - 1) / threads;
    {k}<<<blocks, threads>>>(xc.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}}
"""

_DISPATCH_CUDA = """
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

template <typename scalar_t>
__global__ void {k}(const scalar_t* __restrict__ x, scalar_t* __restrict__ y, scalar_t lo, scalar_t hi,
                    int64_t n) {{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i < n; i += (int64_t)gridDim.x * blockDim.x) {{
        scalar_t v = x[i];
        y[i] = v < lo ? lo : (v > hi ? hi : v);
    }}
}}

torch::Tensor {f}(torch::Tensor x, double lo, double hi) {{
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    const at::cuda::OptionalCUDAGuard guard(device_of(x));
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    int64_t n = xc.numel();
    const int threads = {t};
    int blocks = (int)std::min<int64_t>((n + threads - 1) / threads, 4096);
    auto stream = at::cuda::getCurrentCUDAStream();
    AT_DISPATCH_FLOATING_TYPES(xc.scalar_type(), "{f}", [&] {{
        {k}<scalar_t><<<blocks, threads, 0, stream>>>(xc.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(),
            (scalar_t)lo, (scalar_t)hi, n);
    }});
    return y;
}}
"""

_ROW_REDUCE = {  # name: (init, combine(a, b), finish(acc, D), reference)
    "sum": ("0.0f", "a + b", "acc", "torch.sum(x, dim=1)"),
    "mean": ("0.0f", "a + b", "acc / (float)D", "torch.mean(x, dim=1)"),
    "max": ("-INFINITY", "fmaxf(a, b)", "acc", "torch.amax(x, dim=1)"),
    "min": ("INFINITY", "fminf(a, b)", "acc", "torch.amin(x, dim=1)"),
}

_REDUCE_CUDA = """
#include <torch/extension.h>
#include <cuda_runtime.h>

__device__ __forceinline__ float {k}_op(float a, float b) {{ return {combine}; }}

__global__ void {k}(const float* __restrict__ x, float* __restrict__ out, int D) {{
    extern __shared__ float buf[];
    const float* row = x + (int64_t)blockIdx.x * D;
    float acc = {init};
    for (int j = threadIdx.x; j < D; j += blockDim.x) acc = {k}_op(acc, row[j]);
    buf[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {{
        if (threadIdx.x < s) buf[threadIdx.x] = {k}_op(buf[threadIdx.x], buf[threadIdx.x + s]);
        __syncthreads();
    }}
    if (threadIdx.x == 0) {{ acc = buf[0]; out[blockIdx.x] = {finish}; }}
}}

torch::Tensor {f}(torch::Tensor x) {{
    TORCH_CHECK(x.is_cuda() && x.dim() == 2, "x must be a 2-D CUDA tensor");
    auto xc = x.contiguous();
    const int B = xc.size(0), D = xc.size(1);
    auto out = torch::empty({{B}}, xc.options());
    const int threads = {t};
    {k}<<<B, threads, threads * sizeof(float)>>>(xc.data_ptr<float>(), out.data_ptr<float>(), D);
    return out;
}}
"""

_SOFTMAX_CUDA = """
#include <torch/extension.h>
#include <cuda_runtime.h>

__device__ float {k}_block_reduce(float v, float* buf, bool is_max) {{
    buf[threadIdx.x] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {{
        if (threadIdx.x < s) {{
            float o = buf[threadIdx.x + s];
            buf[threadIdx.x] = is_max ? fmaxf(buf[threadIdx.x], o) : buf[threadIdx.x] + o;
        }}
        __syncthreads();
    }}
    float r = buf[0];
    __syncthreads();
    return r;
}}

__global__ void {k}(const float* __restrict__ x, float* __restrict__ y, int D) {{
    extern __shared__ float buf[];
    const float* row = x + (int64_t)blockIdx.x * D;
    float* out = y + (int64_t)blockIdx.x * D;
    float m = -INFINITY;
    for (int j = threadIdx.x; j < D; j += blockDim.x) m = fmaxf(m, row[j]);
    m = {k}_block_reduce(m, buf, true);
    float s = 0.0f;
    for (int j = threadIdx.x; j < D; j += blockDim.x) s += expf(row[j] - m);
    s = {k}_block_reduce(s, buf, false);
    for (int j = threadIdx.x; j < D; j += blockDim.x) out[j] = {write};
}}

torch::Tensor {f}(torch::Tensor x) {{
    TORCH_CHECK(x.is_cuda() && x.dim() == 2, "x must be a 2-D CUDA tensor");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const int threads = {t};
    {k}<<<xc.size(0), threads, threads * sizeof(float)>>>(xc.data_ptr<float>(), y.data_ptr<float>(),
                                                         xc.size(1));
    return y;
}}
"""
_SOFTMAX = {
    "softmax": ("expf(row[j] - m) / s", "torch.softmax(x, dim=1)"),
    "log_softmax": ("row[j] - m - logf(s)", "torch.log_softmax(x, dim=1)"),
}

_NORM_CUDA = """
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void {k}(const float* __restrict__ x, float* __restrict__ y, int D, float eps) {{
    extern __shared__ float buf[];
    const float* row = x + (int64_t)blockIdx.x * D;
    float* out = y + (int64_t)blockIdx.x * D;
    float s1 = 0.0f, s2 = 0.0f;
    for (int j = threadIdx.x; j < D; j += blockDim.x) {{ float v = row[j]; s1 += v; s2 += v * v; }}
    buf[threadIdx.x] = s1;
    buf[blockDim.x + threadIdx.x] = s2;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {{
        if (threadIdx.x < s) {{
            buf[threadIdx.x] += buf[threadIdx.x + s];
            buf[blockDim.x + threadIdx.x] += buf[blockDim.x + threadIdx.x + s];
        }}
        __syncthreads();
    }}
    const float sum = buf[0], sumsq = buf[blockDim.x];
    {stats}
    for (int j = threadIdx.x; j < D; j += blockDim.x) out[j] = {write};
}}

torch::Tensor {f}(torch::Tensor x, double eps) {{
    TORCH_CHECK(x.is_cuda() && x.dim() == 2, "x must be a 2-D CUDA tensor");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const int threads = {t};
    {k}<<<xc.size(0), threads, 2 * threads * sizeof(float)>>>(xc.data_ptr<float>(), y.data_ptr<float>(),
        xc.size(1), (float)eps);
    return y;
}}
"""
_NORMS = {  # name: (statistics, write, reference, eps)
    "layer_norm": (
        "const float mean = sum / D; const float var = fmaxf(sumsq / D - mean * mean, 0.0f);"
        " const float inv = rsqrtf(var + eps);",
        "(row[j] - mean) * inv",
        "F.layer_norm(x, (x.shape[1],), eps=1e-5)",
        "1e-5",
    ),
    "rms_norm": (
        "const float inv = rsqrtf(sumsq / D + eps);",
        "row[j] * inv",
        "x / torch.sqrt(torch.mean(x * x, dim=1, keepdim=True) + 1e-6)",
        "1e-6",
    ),
    "l2_norm": (
        "const float inv = 1.0f / fmaxf(sqrtf(sumsq), eps);",
        "row[j] * inv",
        "F.normalize(x, dim=1, eps=1e-12)",
        "1e-12",
    ),
}

_MATMUL_CUDA = """
#include <torch/extension.h>
#include <cuda_runtime.h>

#define TILE {tile}

__global__ void {k}(const float* __restrict__ A, const float* __restrict__ B, const float* __restrict__ bias,
                    float* __restrict__ C, int M, int N, int K, float alpha) {{
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y;
    int col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0; t < (K + TILE - 1) / TILE; ++t) {{
        int ka = t * TILE + threadIdx.x, kb = t * TILE + threadIdx.y;
        As[threadIdx.y][threadIdx.x] = (row < M && ka < K) ? A[(int64_t)row * K + ka] : 0.0f;
        Bs[threadIdx.y][threadIdx.x] = (kb < K && col < N) ? B[(int64_t)kb * N + col] : 0.0f;
        __syncthreads();
        for (int i = 0; i < TILE; ++i) acc += As[threadIdx.y][i] * Bs[i][threadIdx.x];
        __syncthreads();
    }}
    if (row < M && col < N) {{
        float v = acc;
        {epilogue}
        C[(int64_t)row * N + col] = v;
    }}
}}

torch::Tensor {f}(torch::Tensor a, torch::Tensor b, torch::Tensor bias, double alpha) {{
    TORCH_CHECK(a.is_cuda() && b.is_cuda(), "inputs must be CUDA tensors");
    TORCH_CHECK(a.size(1) == b.size(0), "inner dimensions differ");
    auto ac = a.contiguous(), bc = b.contiguous(), biasc = bias.contiguous();
    const int M = ac.size(0), K = ac.size(1), N = bc.size(1);
    auto c = torch::zeros({{M, N}}, ac.options());
    dim3 block(TILE, TILE);
    dim3 grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
    {k}<<<grid, block>>>(ac.data_ptr<float>(), bc.data_ptr<float>(), biasc.data_ptr<float>(),
                         c.data_ptr<float>(), M, N, K, (float)alpha);
    return c;
}}
"""
_MATMULS = {  # name: (epilogue on v, reference of (a, b, bias, alpha))
    "matmul": ("(void)bias; (void)alpha;", "a @ b"),
    "gemm_bias_relu": ("v = fmaxf(v + bias[col], 0.0f); (void)alpha;", "torch.relu(a @ b + bias)"),
    "gemm_scale_sigmoid": (
        "v = 1.0f / (1.0f + expf(-(alpha * v + bias[col])));",
        "torch.sigmoid(alpha * (a @ b) + bias)",
    ),
    "gemm_bias_gelu": (
        "v += bias[col]; v = 0.5f * v * (1.0f + erff(v * 0.70710678118f)); (void)alpha;",
        "F.gelu(a @ b + bias)",
    ),
}

_FUSED_CUDA = """
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void {k}(const float* __restrict__ x, const float* __restrict__ r, float* __restrict__ y,
                    float scale, float shift, int64_t n) {{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {{
        float v = x[i] * scale + shift;
        y[i] = {expr};
    }}
}}

torch::Tensor {f}(torch::Tensor x, torch::Tensor r, double scale, double shift) {{
    TORCH_CHECK(x.sizes() == r.sizes(), "x and r must have the same shape");
    auto xc = x.contiguous(), rc = r.contiguous();
    auto y = torch::empty_like(xc);
    int64_t n = xc.numel();
    const int threads = {t};
    {k}<<<(n + threads - 1) / threads, threads>>>(xc.data_ptr<float>(), rc.data_ptr<float>(),
                                                 y.data_ptr<float>(), (float)scale, (float)shift, n);
    return y;
}}
"""
_FUSED = {  # name: (CUDA of v and r[i], reference of (x, r, scale, shift))
    "scale_shift_add_relu": ("fmaxf(v + r[i], 0.0f)", "torch.relu(x * scale + shift + r)"),
    "scale_shift_mul_tanh": ("tanhf(v) * r[i]", "torch.tanh(x * scale + shift) * r"),
    "scale_shift_residual_gelu": (
        "0.5f * v * (1.0f + erff(v * 0.70710678118f)) + r[i]",
        "F.gelu(x * scale + shift) + r",
    ),
}


@dataclass(frozen=True, slots=True)
class Candidate:
    name: str  # unique: also the extension's module name
    category: str  # elementwise | dispatch | reduction | softmax | norm | matmul | fused
    source: str  # the whole .py file
    kernel_cu: str  # the same kernels without torch: what a plain `nvcc -c` of them compiles


def _file(name: str, cuda: str, fn: str, cpp_decl: str, model: str, inputs: str, call: str) -> str:
    return (
        _HEAD + f"{model}\n\n" + f"def get_inputs():\n    return [{inputs}]\n\n\n"
        "def get_init_inputs():\n    return []\n\n\n"
        f"cuda_src = r'''{cuda}'''\n\n"
        f"ext = load_inline(name={name!r}, cpp_sources={cpp_decl!r}, cuda_sources=cuda_src, "
        f"functions=[{fn!r}])\n\n\n"
        "class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n\n"
        f"    def forward(self, *args):\n        return ext.{fn}({call})\n"
    )


def _model(forward_args: str, body: str, extra: str = "") -> str:
    return (
        "class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n\n"
        f"    def forward(self, {forward_args}):\n        {extra}return {body}\n"
    )


def _templates() -> list[tuple[str, str, object]]:
    out: list[tuple[str, str, object]] = []
    out += [("elementwise", n, v) for n, v in _ELEMENTWISE.items()]
    out += [("dispatch", "clamp", None)]
    out += [("reduction", n, v) for n, v in _ROW_REDUCE.items()]
    out += [("softmax", n, v) for n, v in _SOFTMAX.items()]
    out += [("norm", n, v) for n, v in _NORMS.items()]
    out += [("matmul", n, v) for n, v in _MATMULS.items()]
    out += [("fused", n, v) for n, v in _FUSED.items()]
    return out


NUM_TEMPLATES = len(_templates())


def candidate(i: int) -> Candidate:
    """The i-th candidate (i ≥ 0): template i % NUM_TEMPLATES, block-size variant i // NUM_TEMPLATES."""
    cat, base, spec = _templates()[i % NUM_TEMPLATES]
    rnd = i // NUM_TEMPLATES
    t = [256, 128, 512, 64, 1024][rnd % 5]
    name = f"kb{i}_{base}"
    k, f = f"{name}_kernel", f"{name}_forward"
    # defaults (one tensor in, forward passes its args on); a category overrides what differs
    decl = f"torch::Tensor {f}(torch::Tensor x);"
    big = "torch.randn(256, 4096)"
    inputs, call = big, "*args"
    if cat == "elementwise":
        expr, ref = spec  # type: ignore[misc]
        cuda = _EW_CUDA.format(k=k, f=f, t=t, expr=expr)
        model = _model("x", ref)
    elif cat == "dispatch":
        cuda = _DISPATCH_CUDA.format(k=k, f=f, t=t)
        decl = f"torch::Tensor {f}(torch::Tensor x, double lo, double hi);"
        model, call = _model("x", "torch.clamp(x, -0.5, 0.5)"), "args[0], -0.5, 0.5"
    elif cat == "reduction":
        init, combine, finish, ref = spec  # type: ignore[misc]
        cuda = _REDUCE_CUDA.format(k=k, f=f, t=t, init=init, combine=combine, finish=finish)
        model = _model("x", ref)
    elif cat == "softmax":
        write, ref = spec  # type: ignore[misc]
        cuda = _SOFTMAX_CUDA.format(k=k, f=f, t=t, write=write)
        model = _model("x", ref)
    elif cat == "norm":
        stats, write, ref, eps = spec  # type: ignore[misc]
        cuda = _NORM_CUDA.format(k=k, f=f, t=t, stats=stats, write=write)
        decl = f"torch::Tensor {f}(torch::Tensor x, double eps);"
        model, call = _model("x", ref), f"args[0], {eps}"
    elif cat == "matmul":
        epilogue, ref = spec  # type: ignore[misc]
        tile = [16, 32, 8, 16, 32][rnd % 5]
        cuda = _MATMUL_CUDA.format(k=k, f=f, tile=tile, epilogue=epilogue)
        decl = f"torch::Tensor {f}(torch::Tensor a, torch::Tensor b, torch::Tensor bias, double alpha);"
        model = _model("a, b, bias", ref, "alpha = 0.5\n        ")
        inputs = "torch.randn(512, 256), torch.randn(256, 384), torch.randn(384)"
        call = "*args, 0.5"
    else:
        expr, ref = spec  # type: ignore[misc]
        cuda = _FUSED_CUDA.format(k=k, f=f, t=t, expr=expr)
        decl = f"torch::Tensor {f}(torch::Tensor x, torch::Tensor r, double scale, double shift);"
        model = _model("x, r", ref, "scale, shift = 1.5, -0.25\n        ")
        inputs, call = f"{big}, {big}", "args[0], args[1], 1.5, -0.25"
    src = _file(name, cuda, f, decl, model, inputs, call)
    return Candidate(name, cat, src, _kernels_only(cuda, f))


def edited(i: int, *edits: tuple[str, str]) -> str:
    """The i-th candidate's file with each (old, new) replaced once, in order (a compile error
    planted in it, say); ValueError where an `old` is not in the file."""
    src = candidate(i).source
    for old, new in edits:
        if old not in src:
            raise ValueError(f"{old!r} is not in candidate {i}'s file")
        src = src.replace(old, new, 1)
    return src


def _kernels_only(cuda: str, fn: str) -> str:
    """The device part of a CUDA source (everything before the host wrapper), with no torch header."""
    device = cuda[: cuda.index(f"torch::Tensor {fn}(")]
    device = device.replace("#include <torch/extension.h>", "#include <cstdint>\n#include <cmath>")
    device = device.replace("#include <ATen/cuda/CUDAContext.h>\n", "").replace(
        "#include <c10/cuda/CUDAGuard.h>\n", ""
    )
    if "template <typename scalar_t>" in device:  # instantiate what AT_DISPATCH_FLOATING_TYPES would
        kernel = device.split("__global__ void ")[1].split("(")[0]
        device += "".join(
            f"template __global__ void {kernel}<{t}>(const {t}*, {t}*, {t}, {t}, int64_t);\n"
            for t in ("float", "double")
        )
    return device


def generate(n: int) -> list[Candidate]:
    """`n` distinct candidates covering every category (n ≥ NUM_TEMPLATES covers each template)."""
    return [candidate(i) for i in range(n)]
