"""CUDA templates of the corpus: one honest, shape-general kernel family per problem family.

Every template returns a `Kernel`: the CUDA source for `load_inline(cuda_sources=...)` (it
includes `torch/extension.h` and holds the host wrapper), the C++ declaration for
`cpp_sources`, and the wrapper's name. What each one guarantees:

- fp32 accumulation and arithmetic (half/bfloat16 inputs are read into `float` and rounded once
  on store), through `AT_DISPATCH_FLOATING_TYPES_AND2` in every family but matmul and losses,
  which are fp32-only;
- any shape: grid-stride loops or bounds checks on every load/store, sizes in `int64_t`, inputs
  made `.contiguous()` in the wrapper, empty outputs returned before a launch;
- reductions, softmax and norms over ANY dim through the (outer, R, inner) view of a
  contiguous tensor: output `o*inner + j` reduces `x[(o*R + r)*inner + j]` over r;
- argmax/argmin return the first index of the extreme value (PyTorch's tie rule);
- losses are deterministic: per-block partial sums, then one block sums them in a fixed order;
- no PyTorch compute: the wrappers only allocate (`empty`, `empty_like`) and launch.

Not covered: vectorised loads, warp shuffles, tensor cores — the kernels are correct and plain;
speed-ups over PyTorch come only where fusion saves memory passes (chains, epilogues).
"""

from __future__ import annotations

from dataclasses import dataclass

from cudice.model.train.corpus.ops import BinaryOp, LossOp, PointOp

THREADS = 256


@dataclass(frozen=True, slots=True)
class Kernel:
    source: str  # CUDA source (kernels + host wrapper)
    cpp_decl: str  # the wrapper's declaration, for cpp_sources
    function: str  # the wrapper's name
    args: tuple[str, ...]  # forward's arguments passed to the wrapper, in order


def _dispatch(name: str, launch: str) -> str:
    return (
        f'    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, xc.scalar_type(), "{name}", [&] {{\n'
        f"        {launch}\n"
        "    });\n"
    )


_BLOCK_SUM = """__device__ float block_sum(float v, float* sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    float r = sh[0];
    __syncthreads();
    return r;
}
"""

_BLOCK_MAX = _BLOCK_SUM.replace("block_sum", "block_max").replace(
    "sh[threadIdx.x] += sh[threadIdx.x + s];",
    "sh[threadIdx.x] = fmaxf(sh[threadIdx.x], sh[threadIdx.x + s]);",
)
_BLOCK_MIN = _BLOCK_SUM.replace("block_sum", "block_min").replace(
    "sh[threadIdx.x] += sh[threadIdx.x + s];",
    "sh[threadIdx.x] = fminf(sh[threadIdx.x], sh[threadIdx.x + s]);",
)

# The (outer, R, inner) view of `xc` around `dim`, and the output sizes without `dim`.
_DIM_VIEW = """    auto xc = x.contiguous();
    if (dim < 0) dim += xc.dim();
    int64_t R = xc.size(dim), outer = 1, inner = 1;
    std::vector<int64_t> sizes;
    for (int64_t d = 0; d < xc.dim(); ++d) {
        if (d < dim) outer *= xc.size(d);
        if (d > dim) inner *= xc.size(d);
        if (d != dim) sizes.push_back(xc.size(d));
    }
"""


def _ops_lines(ops: tuple[PointOp, ...], indent: str) -> str:
    return "".join(f"{indent}{op.cuda}\n" for op in ops)


def pointwise(name: str, ops: tuple[PointOp, ...], binary: BinaryOp | None = None) -> Kernel:
    """Elementwise kernel: `ops` applied in order to x (unary) or to `binary(a, b)`."""
    body = _ops_lines(ops, "        ")
    args: tuple[str, ...]
    if binary is None:
        params, load, args = "const scalar_t* __restrict__ x", "float v = static_cast<float>(x[i]);", ("x",)
        host_in = "    auto xc = x.contiguous();\n"
        ptrs = "xc.data_ptr<scalar_t>()"
        sig = "torch::Tensor x"
    else:
        params = "const scalar_t* __restrict__ a, const scalar_t* __restrict__ b"
        load = (
            "float x = static_cast<float>(a[i]);\n        float y = static_cast<float>(b[i]);\n"
            f"        float v = {binary.cuda};"
        )
        args = ("a", "b")
        host_in = (
            '    TORCH_CHECK(a.sizes() == b.sizes(), "a and b must have the same shape");\n'
            "    auto xc = a.contiguous();\n    auto bc = b.contiguous();\n"
        )
        ptrs = "xc.data_ptr<scalar_t>(), bc.data_ptr<scalar_t>()"
        sig = "torch::Tensor a, torch::Tensor b"
    launch = f"{name}_kernel<scalar_t><<<blocks, {THREADS}>>>({ptrs}, out.data_ptr<scalar_t>(), n);"
    source = (
        "\n#include <torch/extension.h>\n\n"
        "template <typename scalar_t>\n"
        f"__global__ void {name}_kernel({params}, scalar_t* __restrict__ out, int64_t n) {{\n"
        "    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;"
        " i += (int64_t)gridDim.x * blockDim.x) {\n"
        f"        {load}\n{body}"
        "        out[i] = static_cast<scalar_t>(v);\n"
        "    }\n}\n\n"
        f"torch::Tensor {name}_cuda({sig}) {{\n{host_in}"
        "    auto out = torch::empty_like(xc);\n"
        "    int64_t n = xc.numel();\n"
        "    if (n == 0) return out;\n"
        f"    int blocks = (int)std::min<int64_t>((n + {THREADS - 1}) / {THREADS}, 65535);\n"
        f"{_dispatch(name + '_cuda', launch)}"
        "    return out;\n}\n"
    )
    return Kernel(source, f"torch::Tensor {name}_cuda({sig});", f"{name}_cuda", args)


def _dim_kernel(name: str, helpers: str, out_type: str, body: str, alloc: str) -> Kernel:
    """A kernel over the (outer, R, inner) view of `x` around `dim`, one block per (outer, inner) pair,
    and its wrapper `{name}_cuda(x, dim)`.

    `helpers` (device functions) follow the include; `body` is the kernel's body, with `x`,
    `out` (of `out_type`), `R` and `inner` in scope; `alloc` is the wrapper's line creating `out`.
    """
    launch = (
        f"{name}_kernel<scalar_t><<<(unsigned int)(outer * inner), {THREADS}>>>("
        f"xc.data_ptr<scalar_t>(), out.data_ptr<{out_type}>(), R, inner);"
    )
    source = (
        f"\n#include <torch/extension.h>\n\n{helpers}"
        "template <typename scalar_t>\n"
        f"__global__ void {name}_kernel(const scalar_t* __restrict__ x, {out_type}* __restrict__ out, "
        f"int64_t R, int64_t inner) {{\n{body}"
        "}\n\n"
        f"torch::Tensor {name}_cuda(torch::Tensor x, int64_t dim) {{\n{_DIM_VIEW}{alloc}"
        "    if (out.numel() == 0) return out;\n"
        f"{_dispatch(name + '_cuda', launch)}"
        "    return out;\n}\n"
    )
    return Kernel(source, f"torch::Tensor {name}_cuda(torch::Tensor x, int64_t dim);", f"{name}_cuda", ("x",))


_REDUCE = {  # kind: (helper, init, combine(acc, v), final(acc))
    "sum": (_BLOCK_SUM, "0.0f", "acc += v;", "acc"),
    "mean": (_BLOCK_SUM, "0.0f", "acc += v;", "acc / R"),
    "amax": (_BLOCK_MAX, "-INFINITY", "acc = fmaxf(acc, v);", "acc"),
    "amin": (_BLOCK_MIN, "INFINITY", "acc = fminf(acc, v);", "acc"),
}


def reduce_dim(name: str, kind: str) -> Kernel:
    """sum / mean / amax / amin over one dim (keepdim=False); one block per output element."""
    helper, init, combine, final = _REDUCE[kind]
    block_fn = helper.split("(", 1)[0].split()[-1]
    body = (
        f"    __shared__ float sh[{THREADS}];\n"
        "    const scalar_t* row = x + (blockIdx.x / inner) * R * inner + blockIdx.x % inner;\n"
        f"    float acc = {init};\n"
        "    for (int64_t r = threadIdx.x; r < R; r += blockDim.x) {\n"
        "        float v = static_cast<float>(row[r * inner]);\n"
        f"        {combine}\n"
        "    }\n"
        f"    acc = {block_fn}(acc, sh);\n"
        f"    if (threadIdx.x == 0) out[blockIdx.x] = static_cast<scalar_t>({final});\n"
    )
    alloc = "    auto out = torch::empty(sizes, xc.options());\n"
    return _dim_kernel(name, f"{helper}\n", "scalar_t", body, alloc)


def arg_reduce_dim(name: str, kind: str) -> Kernel:
    """argmax / argmin over one dim; ties go to the smallest index, as in PyTorch."""
    better = ">" if kind == "argmax" else "<"
    init = "-INFINITY" if kind == "argmax" else "INFINITY"
    body = (
        f"    __shared__ float sv[{THREADS}];\n"
        f"    __shared__ int64_t si[{THREADS}];\n"
        "    const scalar_t* row = x + (blockIdx.x / inner) * R * inner + blockIdx.x % inner;\n"
        f"    float best = {init};\n"
        "    int64_t bi = R;\n"
        "    for (int64_t r = threadIdx.x; r < R; r += blockDim.x) {\n"
        "        float v = static_cast<float>(row[r * inner]);\n"
        f"        if (v {better} best) {{ best = v; bi = r; }}\n"
        "    }\n"
        "    sv[threadIdx.x] = best;\n"
        "    si[threadIdx.x] = bi;\n"
        "    __syncthreads();\n"
        "    for (int s = blockDim.x / 2; s > 0; s >>= 1) {\n"
        "        if (threadIdx.x < s) {\n"
        "            float ov = sv[threadIdx.x + s];\n"
        "            int64_t oi = si[threadIdx.x + s];\n"
        f"            if (ov {better} sv[threadIdx.x]"
        " || (ov == sv[threadIdx.x] && oi < si[threadIdx.x])) {\n"
        "                sv[threadIdx.x] = ov;\n"
        "                si[threadIdx.x] = oi;\n"
        "            }\n"
        "        }\n"
        "        __syncthreads();\n"
        "    }\n"
        "    if (threadIdx.x == 0) out[blockIdx.x] = si[0] < R ? si[0] : 0;\n"
    )
    return _dim_kernel(
        name, "", "int64_t", body, "    auto out = torch::empty(sizes, xc.options().dtype(torch::kLong));\n"
    )


def softmax_dim(name: str, log: bool) -> Kernel:
    """Softmax or log-softmax over one dim: max, sum of exp, write — three passes per row."""
    write = "v - logf(s)" if log else "expf(v) / s"
    body = (
        f"    __shared__ float sh[{THREADS}];\n"
        "    int64_t base = (blockIdx.x / inner) * R * inner + blockIdx.x % inner;\n"
        "    float m = -INFINITY;\n"
        "    for (int64_t r = threadIdx.x; r < R; r += blockDim.x)"
        " m = fmaxf(m, static_cast<float>(x[base + r * inner]));\n"
        "    m = block_max(m, sh);\n"
        "    float s = 0.0f;\n"
        "    for (int64_t r = threadIdx.x; r < R; r += blockDim.x)"
        " s += expf(static_cast<float>(x[base + r * inner]) - m);\n"
        "    s = block_sum(s, sh);\n"
        "    for (int64_t r = threadIdx.x; r < R; r += blockDim.x) {\n"
        "        float v = static_cast<float>(x[base + r * inner]) - m;\n"
        f"        out[base + r * inner] = static_cast<scalar_t>({write});\n"
        "    }\n"
    )
    alloc = "    auto out = torch::empty_like(xc);\n"
    return _dim_kernel(name, f"{_BLOCK_SUM}\n{_BLOCK_MAX}\n", "scalar_t", body, alloc)


def norm_last_dim(name: str, kind: str) -> Kernel:
    """LayerNorm (no affine) or RMSNorm over the last dim; one block per row, two passes."""
    if kind == "layer_norm":
        stats = (
            "    float mean = block_sum(s, sh) / D;\n"
            "    float q = 0.0f;\n"
            "    for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {\n"
            "        float d = static_cast<float>(row[i]) - mean;\n"
            "        q += d * d;\n"
            "    }\n"
            "    float inv = rsqrtf(block_sum(q, sh) / D + eps);\n"
        )
        first = "s += static_cast<float>(row[i]);"
        write = "(static_cast<float>(row[i]) - mean) * inv"
    else:
        stats = "    float inv = rsqrtf(block_sum(s, sh) / D + eps);\n"
        first = "{ float v = static_cast<float>(row[i]); s += v * v; }"
        write = "static_cast<float>(row[i]) * inv"
    launch = (
        f"{name}_kernel<scalar_t><<<(unsigned int)rows, {THREADS}>>>"
        "(xc.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), "
        "D, (float)eps);"
    )
    source = (
        f"\n#include <torch/extension.h>\n\n{_BLOCK_SUM}\n"
        "template <typename scalar_t>\n"
        f"__global__ void {name}_kernel("
        "const scalar_t* __restrict__ x, scalar_t* __restrict__ out, int64_t D, "
        "float eps) {\n"
        f"    __shared__ float sh[{THREADS}];\n"
        "    const scalar_t* row = x + blockIdx.x * D;\n"
        "    float s = 0.0f;\n"
        f"    for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {first}\n"
        f"{stats}"
        f"    for (int64_t i = threadIdx.x; i < D; i += blockDim.x) out[blockIdx.x * D + i] = "
        f"static_cast<scalar_t>({write});\n"
        "}\n\n"
        f"torch::Tensor {name}_cuda(torch::Tensor x, double eps) {{\n"
        "    auto xc = x.contiguous();\n"
        "    auto out = torch::empty_like(xc);\n"
        "    int64_t D = xc.size(-1);\n"
        "    if (xc.numel() == 0) return out;\n"
        "    int64_t rows = xc.numel() / D;\n"
        f"{_dispatch(name + '_cuda', launch)}"
        "    return out;\n}\n"
    )
    return Kernel(source, f"torch::Tensor {name}_cuda(torch::Tensor x, double eps);", f"{name}_cuda", ("x",))


def matmul_epilogue(name: str, bias: bool, ops: tuple[PointOp, ...]) -> Kernel:
    """fp32 (M, K) @ (K, N) with 16x16 shared-memory tiles, then `+ bias[col]` and `ops` fused."""
    bias_param = "const float* __restrict__ bias, " if bias else ""
    bias_line = "        v += bias[col];\n" if bias else ""
    bias_arg = "biasc.data_ptr<float>(), " if bias else ""
    sig = "torch::Tensor a, torch::Tensor b" + (", torch::Tensor bias" if bias else "")
    source = (
        "\n#include <torch/extension.h>\n\n#define TILE 16\n\n"
        f"__global__ void {name}_kernel("
        f"const float* __restrict__ a, const float* __restrict__ b, {bias_param}"
        "float* __restrict__ out, int M, int N, int K) {\n"
        "    __shared__ float ta[TILE][TILE];\n"
        "    __shared__ float tb[TILE][TILE];\n"
        "    int tx = threadIdx.x, ty = threadIdx.y;\n"
        "    int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;\n"
        "    float acc = 0.0f;\n"
        "    for (int k0 = 0; k0 < K; k0 += TILE) {\n"
        "        ta[ty][tx] = (row < M && k0 + tx < K) ? a[(int64_t)row * K + k0 + tx] : 0.0f;\n"
        "        tb[ty][tx] = (k0 + ty < K && col < N) ? b[(int64_t)(k0 + ty) * N + col] : 0.0f;\n"
        "        __syncthreads();\n"
        "        for (int k = 0; k < TILE; ++k) acc += ta[ty][k] * tb[k][tx];\n"
        "        __syncthreads();\n"
        "    }\n"
        "    if (row < M && col < N) {\n"
        f"        float v = acc;\n{bias_line}{_ops_lines(ops, '        ')}"
        "        out[(int64_t)row * N + col] = v;\n"
        "    }\n}\n\n"
        f"torch::Tensor {name}_cuda({sig}) {{\n"
        "    TORCH_CHECK(a.scalar_type() == torch::kFloat32 && b.scalar_type() == torch::kFloat32,"
        ' "float32 only");\n'
        "    auto ac = a.contiguous();\n"
        "    auto bc = b.contiguous();\n"
        + ("    auto biasc = bias.contiguous();\n" if bias else "")
        + "    int M = ac.size(0), K = ac.size(1), N = bc.size(1);\n"
        "    auto out = torch::empty({M, N}, ac.options());\n"
        "    if (M == 0 || N == 0) return out;\n"
        "    dim3 threads(TILE, TILE);\n"
        "    dim3 blocks((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);\n"
        f"    {name}_kernel<<<blocks, threads>>>(ac.data_ptr<float>(), bc.data_ptr<float>(), {bias_arg}"
        "out.data_ptr<float>(), M, N, K);\n"
        "    return out;\n}\n"
    )
    args = ("a", "b", "bias") if bias else ("a", "b")
    return Kernel(source, f"torch::Tensor {name}_cuda({sig});", f"{name}_cuda", args)


def loss_reduce(name: str, loss: LossOp, reduction: str) -> Kernel:
    """fp32 loss to a 0-d tensor: per-block partial sums, then one block sums them (deterministic)."""
    scale = "1.0f / n" if reduction == "mean" else "1.0f"
    source = (
        f"\n#include <torch/extension.h>\n\n{_BLOCK_SUM}\n"
        f"__global__ void {name}_partial(const float* __restrict__ p, const float* __restrict__ t, "
        "float* __restrict__ partial, int64_t n) {\n"
        f"    __shared__ float sh[{THREADS}];\n"
        "    float acc = 0.0f;\n"
        "    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;"
        " i += (int64_t)gridDim.x * blockDim.x) {\n"
        "        float x = p[i], y = t[i];\n"
        f"        {loss.cuda}\n"
        "        acc += v;\n"
        "    }\n"
        "    acc = block_sum(acc, sh);\n"
        "    if (threadIdx.x == 0) partial[blockIdx.x] = acc;\n"
        "}\n\n"
        f"__global__ void {name}_final(const float* __restrict__ partial, float* __restrict__ out, int num, "
        "float scale) {\n"
        f"    __shared__ float sh[{THREADS}];\n"
        "    float acc = 0.0f;\n"
        "    for (int i = threadIdx.x; i < num; i += blockDim.x) acc += partial[i];\n"
        "    acc = block_sum(acc, sh);\n"
        "    if (threadIdx.x == 0) out[0] = acc * scale;\n"
        "}\n\n"
        f"torch::Tensor {name}_cuda(torch::Tensor predictions, torch::Tensor targets) {{\n"
        "    TORCH_CHECK(predictions.sizes() == targets.sizes(),"
        ' "predictions and targets must have the same shape");\n'
        "    auto pc = predictions.contiguous();\n"
        "    auto tc = targets.contiguous();\n"
        "    int64_t n = pc.numel();\n"
        "    int blocks = (int)std::max<int64_t>("
        f"1, std::min<int64_t>((n + {THREADS - 1}) / {THREADS}, 1024));\n"
        "    auto partial = torch::empty({blocks}, pc.options());\n"
        "    auto out = torch::empty({}, pc.options());\n"
        f"    {name}_partial<<<blocks, {THREADS}>>>(pc.data_ptr<float>(), tc.data_ptr<float>(), "
        "partial.data_ptr<float>(), n);\n"
        f"    {name}_final<<<1, {THREADS}>>>"
        f"(partial.data_ptr<float>(), out.data_ptr<float>(), blocks, {scale});\n"
        "    return out;\n}\n"
    )
    return Kernel(
        source,
        f"torch::Tensor {name}_cuda(torch::Tensor predictions, torch::Tensor targets);",
        f"{name}_cuda",
        ("predictions", "targets"),
    )
