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
  contiguous tensor: output `o*inner + j` reduces `x[(o*R + r)*inner + j]` over r; an
  elementwise prologue (`pre`, applied to every load) and epilogue (`post`, applied to every
  result) fuse the ops a reference writes around the reduction; `keepdim` is a wrapper argument;
- the host wrapper's tensor arguments carry the reference's own names (`forward(self, inp)` →
  `torch::Tensor inp`), so an answer is built from the prompt's words;
- argmax/argmin return the first index of the extreme value (PyTorch's tie rule);
- losses are deterministic: per-block partial sums, then one block sums them in a fixed order;
- no PyTorch compute: the wrappers only allocate (`empty`, `empty_like`) and launch.

Each template but argmax/argmin and matmul has a plain and a `fast` variant (the family picks one
per problem, seeded). The fast elementwise kernel adds a float4 path (one 16-byte load per input
and one store per four elements) that the host takes only when every tensor is float32, the
element count is a multiple of 4 and every pointer is 16-byte aligned; otherwise it runs the
same scalar grid-stride loop as the plain kernel, both through one `__device__` function of the
ops. The fast reductions (sum/mean/max/min, softmax, norms, losses) combine a block's values
with `__shfl_down_sync` inside each warp and one shared slot per warp instead of a shared-memory
tree over all threads; the arithmetic per element is unchanged (the sum's order differs, by
fp32 rounding only).

Not covered: tensor cores, vectorised reductions, single-pass (online) softmax, warp-level
argmax/argmin — speed-ups over PyTorch come from fusion (chains, epilogues) and the fast
variants' fewer load instructions and barriers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from cudice.model.train.corpus.ops import BinaryOp, LossOp, PointOp

THREADS = 256


@dataclass(frozen=True, slots=True)
class Kernel:
    source: str  # CUDA source (kernels + host wrapper)
    cpp_decl: str  # the wrapper's declaration, for cpp_sources
    function: str  # the wrapper's name
    args: tuple[str, ...]  # forward's arguments passed to the wrapper, in order


NOTE = re.compile(r"^[ \t]*// .*\n", re.M)  # a note line: the templates write no other `//` comment


def without_notes(kernel: Kernel) -> Kernel:
    """`kernel` without its notes (the comment lines naming each stage as the reference writes it)."""
    return replace(kernel, source=NOTE.sub("", kernel.source))


def _dispatch(name: str, launch: str, tensor: str = "xc") -> str:
    return (
        "    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, "
        f'{tensor}.scalar_type(), "{name}", [&] {{\n'
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


def _warp_block(fn: str, combine: str, identity: str) -> str:
    """`block_{fn}(v, sh)` through warp shuffles: each warp folds its 32 values with
    `__shfl_down_sync`, lane 0 stores the warp's value in `sh[warp]`, warp 0 folds those; every
    thread gets the result. `combine` is an expression of `a` and `b`; `sh` holds >= 32 floats;
    `blockDim.x` must be a multiple of 32 and every thread of the block must call it."""
    step = combine.format(a="v", b="__shfl_down_sync(0xffffffffu, v, o)")
    return (
        f"__device__ __forceinline__ float warp_{fn}(float v) {{\n"
        f"    for (int o = 16; o > 0; o >>= 1) v = {step};\n"
        "    return v;\n}\n\n"
        f"__device__ float block_{fn}(float v, float* sh) {{\n"
        "    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;\n"
        f"    v = warp_{fn}(v);\n"
        "    if (lane == 0) sh[warp] = v;\n"
        "    __syncthreads();\n"
        "    if (warp == 0) {\n"
        f"        v = lane < (int)(blockDim.x >> 5) ? sh[lane] : {identity};\n"
        f"        v = warp_{fn}(v);\n"
        "        if (lane == 0) sh[0] = v;\n"
        "    }\n"
        "    __syncthreads();\n"
        "    float r = sh[0];\n"
        "    __syncthreads();\n"
        "    return r;\n}\n"
    )


_WARP_SUM = _warp_block("sum", "{a} + {b}", "0.0f")
_WARP_MAX = _warp_block("max", "fmaxf({a}, {b})", "-INFINITY")
_WARP_MIN = _warp_block("min", "fminf({a}, {b})", "INFINITY")


def _blocks(fast: bool) -> tuple[str, str, str, int]:
    """(block_sum, block_max, block_min helpers, floats of `sh` they need) of a variant."""
    if fast:
        return _WARP_SUM, _WARP_MAX, _WARP_MIN, 32
    return _BLOCK_SUM, _BLOCK_MAX, _BLOCK_MIN, THREADS


def _dim_view(x: str, with_sizes: bool) -> str:
    """Host lines: the (outer, R, inner) view of `x` around `dim`; with `with_sizes`, also the
    output sizes without `dim` (or with a 1 there when `keepdim`)."""
    sizes = "    std::vector<int64_t> sizes;\n" if with_sizes else ""
    keep = (
        "        if (d != dim) sizes.push_back(xc.size(d));\n        else if (keepdim) sizes.push_back(1);\n"
        if with_sizes
        else ""
    )
    return (
        f"    auto xc = {x}.contiguous();\n"
        "    if (dim < 0) dim += xc.dim();\n"
        "    int64_t R = xc.size(dim), outer = 1, inner = 1;\n"
        f"{sizes}"
        "    for (int64_t d = 0; d < xc.dim(); ++d) {\n"
        "        if (d < dim) outer *= xc.size(d);\n"
        "        if (d > dim) inner *= xc.size(d);\n"
        f"{keep}"
        "    }\n"
    )


def _note(text: str, indent: str) -> str:
    """The comment line naming a stage as the reference writes it (`// torch.tanh(v)`); none for ""."""
    return f"{indent}// {text}\n" if text else ""


def _ops_lines(ops: tuple[PointOp, ...], indent: str, notes: tuple[str, ...] = ()) -> str:
    """Each op's CUDA statement, preceded by its note when `notes` (one per op) are given."""
    if notes and len(notes) != len(ops):
        raise ValueError(f"{len(notes)} notes for {len(ops)} ops: give one per op, or none")
    said = notes or ("",) * len(ops)
    return "".join(f"{_note(n, indent)}{indent}{op.cuda}\n" for op, n in zip(ops, said, strict=True))


def _device_fn(name: str, ops: tuple[PointOp, ...], notes: tuple[str, ...] = ()) -> str:
    """`__device__ float name(float v)` applying `ops` in order (the identity when there are none)."""
    lines = _ops_lines(ops, "    ", notes)
    return f"__device__ __forceinline__ float {name}(float v) {{\n{lines}    return v;\n}}\n\n"


def _cut(notes: tuple[str, ...], first: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """`notes` of (pre + post) ops as (pre's, post's); both empty when there are none."""
    return (notes[:first], notes[first:]) if notes else ((), ())


def pointwise(
    name: str,
    ops: tuple[PointOp, ...],
    names: tuple[str, ...] = ("x",),
    combine: BinaryOp | None = None,
    fast: bool = False,
    notes: tuple[str, ...] = (),
    core_note: str = "",
) -> Kernel:
    """Elementwise kernel: `ops` applied in order to x (unary) or to `combine(a, b[, c])`.

    `names` are the reference's tensor arguments (one, or `combine.arity`); `fast` adds the
    float4 path (`_pointwise_fast`). `notes` (one per op) and `core_note` (the combine's) are
    the reference's spellings, written as a comment before each op's statement.
    """
    if fast:
        return _pointwise_fast(name, ops, names, combine, notes, core_note)
    body = _ops_lines(ops, "        ", notes)
    local = ("x", "y", "z")
    if combine is None:
        params = "const scalar_t* __restrict__ in0"
        load = "float v = static_cast<float>(in0[i]);"
    else:
        params = ", ".join(f"const scalar_t* __restrict__ in{k}" for k in range(len(names)))
        load = (
            "".join(f"float {local[k]} = static_cast<float>(in{k}[i]);\n        " for k in range(len(names)))
            + (f"// {core_note}\n        " if core_note else "")  # ends with the next indent, as a load
            + f"float v = {combine.cuda};"
        )
    host_in = "".join(
        f"    TORCH_CHECK({n}.sizes() == {names[0]}.sizes(), "
        f'"{n} and {names[0]} must have the same shape");\n'
        for n in names[1:]
    ) + "".join(f"    auto {n}_c = {n}.contiguous();\n" for n in names)
    ptrs = ", ".join(f"{n}_c.data_ptr<scalar_t>()" for n in names)
    sig = ", ".join(f"torch::Tensor {n}" for n in names)
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
        f"    auto out = torch::empty_like({names[0]}_c);\n"
        "    int64_t n = out.numel();\n"
        "    if (n == 0) return out;\n"
        f"    int blocks = (int)std::min<int64_t>((n + {THREADS - 1}) / {THREADS}, 65535);\n"
        f"{_dispatch(name + '_cuda', launch, names[0] + '_c')}"
        "    return out;\n}\n"
    )
    return Kernel(source, f"torch::Tensor {name}_cuda({sig});", f"{name}_cuda", names)


def _pointwise_fast(
    name: str,
    ops: tuple[PointOp, ...],
    names: tuple[str, ...],
    combine: BinaryOp | None,
    notes: tuple[str, ...] = (),
    core_note: str = "",
) -> Kernel:
    """The elementwise kernel with a float4 path: one `__device__` function `{name}_op` holds the
    arithmetic; the host launches `{name}_vec4_kernel` on float4 views when every tensor is
    float32, `n % 4 == 0` and every pointer is 16-byte aligned, else the scalar kernel."""
    local = ("x", "y", "z")
    k = len(names)
    if combine is None:
        op_params, head = "float v", ""
    else:
        op_params = ", ".join(f"float {local[i]}" for i in range(k))
        head = f"{_note(core_note, '    ')}    float v = {combine.cuda};\n"
    op_fn = (
        f"__device__ __forceinline__ float {name}_op({op_params}) {{\n{head}"
        f"{_ops_lines(ops, '    ', notes)}    return v;\n}}\n\n"
    )
    params = ", ".join(f"const scalar_t* __restrict__ in{i}" for i in range(k))
    scalar_args = ", ".join(f"static_cast<float>(in{i}[i])" for i in range(k))
    vec_params = ", ".join(f"const float4* __restrict__ in{i}" for i in range(k))
    vec_loads = "".join(f"        float4 a{i} = in{i}[i];\n" for i in range(k))
    vec_lanes = "".join(
        f"        r.{c} = {name}_op({', '.join(f'a{i}.{c}' for i in range(k))});\n" for c in "xyzw"
    )
    host_in = "".join(
        f"    TORCH_CHECK({n}.sizes() == {names[0]}.sizes(), "
        f'"{n} and {names[0]} must have the same shape");\n'
        for n in names[1:]
    ) + "".join(f"    auto {n}_c = {n}.contiguous();\n" for n in names)
    sig = ", ".join(f"torch::Tensor {n}" for n in names)
    fp32 = " && ".join(f"{n}_c.scalar_type() == torch::kFloat32" for n in names)
    aligned = " && ".join(f"aligned16({n}_c.data_ptr())" for n in names)
    vec_ptrs = ", ".join(f"reinterpret_cast<const float4*>({n}_c.data_ptr<float>())" for n in names)
    ptrs = ", ".join(f"{n}_c.data_ptr<scalar_t>()" for n in names)
    launch = f"{name}_kernel<scalar_t><<<blocks, {THREADS}>>>({ptrs}, out.data_ptr<scalar_t>(), n);"
    source = (
        "\n#include <torch/extension.h>\n#include <cstdint>\n\n"
        f"{op_fn}"
        "template <typename scalar_t>\n"
        f"__global__ void {name}_kernel({params}, scalar_t* __restrict__ out, int64_t n) {{\n"
        "    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;"
        " i += (int64_t)gridDim.x * blockDim.x)\n"
        f"        out[i] = static_cast<scalar_t>({name}_op({scalar_args}));\n"
        "}\n\n"
        f"__global__ void {name}_vec4_kernel({vec_params}, float4* __restrict__ out, int64_t n4) {{\n"
        "    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n4;"
        " i += (int64_t)gridDim.x * blockDim.x) {\n"
        f"{vec_loads}"
        "        float4 r;\n"
        f"{vec_lanes}"
        "        out[i] = r;\n"
        "    }\n}\n\n"
        "static bool aligned16(const void* p) {\n"
        "    return reinterpret_cast<std::uintptr_t>(p) % 16 == 0;\n}\n\n"
        f"torch::Tensor {name}_cuda({sig}) {{\n{host_in}"
        f"    auto out = torch::empty_like({names[0]}_c);\n"
        "    int64_t n = out.numel();\n"
        "    if (n == 0) return out;\n"
        f"    if ({fp32} && n % 4 == 0 && {aligned} && aligned16(out.data_ptr())) {{\n"
        "        int64_t n4 = n / 4;\n"
        f"        int blocks = (int)std::min<int64_t>((n4 + {THREADS - 1}) / {THREADS}, 65535);\n"
        f"        {name}_vec4_kernel<<<blocks, {THREADS}>>>({vec_ptrs}, "
        "reinterpret_cast<float4*>(out.data_ptr<float>()), n4);\n"
        "        return out;\n"
        "    }\n"
        f"    int blocks = (int)std::min<int64_t>((n + {THREADS - 1}) / {THREADS}, 65535);\n"
        f"{_dispatch(name + '_cuda', launch, names[0] + '_c')}"
        "    return out;\n}\n"
    )
    return Kernel(source, f"torch::Tensor {name}_cuda({sig});", f"{name}_cuda", names)


def _dim_kernel(
    name: str, helpers: str, out_type: str, body: str, alloc: str, x: str, extra: str = ""
) -> Kernel:
    """A kernel over the (outer, R, inner) view of `x` around `dim`, one block per (outer, inner) pair,
    and its wrapper `{name}_cuda(x, dim[, keepdim]{extra})` (keepdim when `alloc` uses `sizes`).

    `helpers` (device functions) follow the include; `body` is the kernel's body, with `x`,
    `out` (of `out_type`), `R` and `inner` in scope; `alloc` is the wrapper's line creating `out`;
    `extra` adds wrapper parameters (", double eps") passed on as the kernel's last arguments.
    """
    extra_names = "".join(", (float)" + p.split()[-1] for p in extra.split(",")[1:])
    extra_params = "".join(", float " + p.split()[-1] for p in extra.split(",")[1:])
    launch = (
        f"{name}_kernel<scalar_t><<<(unsigned int)(outer * inner), {THREADS}>>>("
        f"xc.data_ptr<scalar_t>(), out.data_ptr<{out_type}>(), R, inner{extra_names});"
    )
    reduces = "sizes" in alloc  # the output drops (or keeps as 1) the reduced dim
    sig = f"torch::Tensor {x}, int64_t dim{', bool keepdim' if reduces else ''}{extra}"
    source = (
        f"\n#include <torch/extension.h>\n\n{helpers}"
        "template <typename scalar_t>\n"
        f"__global__ void {name}_kernel(const scalar_t* __restrict__ x, {out_type}* __restrict__ out, "
        f"int64_t R, int64_t inner{extra_params}) {{\n{body}"
        "}\n\n"
        f"torch::Tensor {name}_cuda({sig}) {{\n{_dim_view(x, reduces)}{alloc}"
        "    if (out.numel() == 0) return out;\n"
        f"{_dispatch(name + '_cuda', launch)}"
        "    return out;\n}\n"
    )
    return Kernel(source, f"torch::Tensor {name}_cuda({sig});", f"{name}_cuda", (x,))


_REDUCE = {  # kind: (helper index in `_blocks`, init, combine(acc, v), final(acc))
    "sum": (0, "0.0f", "acc += v;", "acc"),
    "mean": (0, "0.0f", "acc += v;", "acc / R"),
    "amax": (1, "-INFINITY", "acc = fmaxf(acc, v);", "acc"),
    "amin": (2, "INFINITY", "acc = fminf(acc, v);", "acc"),
}


def reduce_dim(
    name: str,
    kind: str,
    x: str = "x",
    pre: tuple[PointOp, ...] = (),
    post: tuple[PointOp, ...] = (),
    fast: bool = False,
    notes: tuple[str, ...] = (),
    core_note: str = "",
) -> Kernel:
    """sum / mean / amax / amin over one dim of `pre(x)`, then `post`; one block per output element
    (`fast`: the block combines its values through warp shuffles). `notes` (one per op of `pre`
    then `post`) and `core_note` (the reduction's) become comments before their statements."""
    which, init, combine, final = _REDUCE[kind]
    blocks = _blocks(fast)
    helper, shared = blocks[which], blocks[3]
    block_fn = ("block_sum", "block_max", "block_min")[which]
    body = (
        f"    __shared__ float sh[{shared}];\n"
        "    const scalar_t* row = x + (blockIdx.x / inner) * R * inner + blockIdx.x % inner;\n"
        f"{_note(core_note, '    ')}"
        f"    float acc = {init};\n"
        "    for (int64_t r = threadIdx.x; r < R; r += blockDim.x) {\n"
        "        float v = pre(static_cast<float>(row[r * inner]));\n"
        f"        {combine}\n"
        "    }\n"
        f"    acc = {block_fn}(acc, sh);\n"
        f"    if (threadIdx.x == 0) out[blockIdx.x] = static_cast<scalar_t>(post({final}));\n"
    )
    alloc = "    auto out = torch::empty(sizes, xc.options());\n"
    pre_notes, post_notes = _cut(notes, len(pre))
    helpers = f"{helper}\n{_device_fn('pre', pre, pre_notes)}{_device_fn('post', post, post_notes)}"
    return _dim_kernel(name, helpers, "scalar_t", body, alloc, x)


def arg_reduce_dim(
    name: str,
    kind: str,
    x: str = "x",
    pre: tuple[PointOp, ...] = (),
    notes: tuple[str, ...] = (),
    core_note: str = "",
) -> Kernel:
    """argmax / argmin over one dim of `pre(x)`; ties go to the smallest index, as in PyTorch.
    `notes` (one per op of `pre`) and `core_note` become comments before their statements."""
    better = ">" if kind == "argmax" else "<"
    init = "-INFINITY" if kind == "argmax" else "INFINITY"
    body = (
        f"    __shared__ float sv[{THREADS}];\n"
        f"    __shared__ int64_t si[{THREADS}];\n"
        "    const scalar_t* row = x + (blockIdx.x / inner) * R * inner + blockIdx.x % inner;\n"
        f"{_note(core_note, '    ')}"
        f"    float best = {init};\n"
        "    int64_t bi = R;\n"
        "    for (int64_t r = threadIdx.x; r < R; r += blockDim.x) {\n"
        "        float v = pre(static_cast<float>(row[r * inner]));\n"
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
    alloc = "    auto out = torch::empty(sizes, xc.options().dtype(torch::kLong));\n"
    return _dim_kernel(name, _device_fn("pre", pre, notes), "int64_t", body, alloc, x)


def softmax_dim(
    name: str,
    log: bool,
    x: str = "x",
    pre: tuple[PointOp, ...] = (),
    fast: bool = False,
    notes: tuple[str, ...] = (),
    core_note: str = "",
) -> Kernel:
    """Softmax or log-softmax over one dim of `pre(x)`: max, sum of exp, write — three passes
    (`fast`: block max and sum through warp shuffles). `notes` (one per op of `pre`) and
    `core_note` become comments before their statements."""
    write = "v - logf(s)" if log else "expf(v) / s"
    block_sum, block_max, _, shared = _blocks(fast)
    body = (
        f"    __shared__ float sh[{shared}];\n"
        "    int64_t base = (blockIdx.x / inner) * R * inner + blockIdx.x % inner;\n"
        f"{_note(core_note, '    ')}"
        "    float m = -INFINITY;\n"
        "    for (int64_t r = threadIdx.x; r < R; r += blockDim.x)"
        " m = fmaxf(m, pre(static_cast<float>(x[base + r * inner])));\n"
        "    m = block_max(m, sh);\n"
        "    float s = 0.0f;\n"
        "    for (int64_t r = threadIdx.x; r < R; r += blockDim.x)"
        " s += expf(pre(static_cast<float>(x[base + r * inner])) - m);\n"
        "    s = block_sum(s, sh);\n"
        "    for (int64_t r = threadIdx.x; r < R; r += blockDim.x) {\n"
        "        float v = pre(static_cast<float>(x[base + r * inner])) - m;\n"
        f"        out[base + r * inner] = static_cast<scalar_t>({write});\n"
        "    }\n"
    )
    alloc = "    auto out = torch::empty_like(xc);\n"
    helpers = f"{block_sum}\n{block_max}\n{_device_fn('pre', pre, notes)}"
    return _dim_kernel(name, helpers, "scalar_t", body, alloc, x)


def norm_dim(
    name: str,
    kind: str,
    x: str = "x",
    post: tuple[PointOp, ...] = (),
    fast: bool = False,
    notes: tuple[str, ...] = (),
) -> Kernel:
    """LayerNorm (no affine, biased variance) or RMSNorm over one dim, then `post`; two passes
    (`fast`: block sums through warp shuffles). `notes` (one per op of `post`) become comments
    before their statements; the norm itself gets none (a reference may spell it over several
    statements)."""
    block_sum, _, _, shared = _blocks(fast)
    if kind == "layer_norm":
        stats = (
            "    float mean = block_sum(s, sh) / R;\n"
            "    float q = 0.0f;\n"
            "    for (int64_t r = threadIdx.x; r < R; r += blockDim.x) {\n"
            "        float d = static_cast<float>(x[base + r * inner]) - mean;\n"
            "        q += d * d;\n"
            "    }\n"
            "    float inv = rsqrtf(block_sum(q, sh) / R + eps);\n"
        )
        first = "s += static_cast<float>(x[base + r * inner]);"
        write = "(static_cast<float>(x[base + r * inner]) - mean) * inv"
    else:
        stats = "    float inv = rsqrtf(block_sum(s, sh) / R + eps);\n"
        first = "{ float v = static_cast<float>(x[base + r * inner]); s += v * v; }"
        write = "static_cast<float>(x[base + r * inner]) * inv"
    body = (
        f"    __shared__ float sh[{shared}];\n"
        "    int64_t base = (blockIdx.x / inner) * R * inner + blockIdx.x % inner;\n"
        "    float s = 0.0f;\n"
        f"    for (int64_t r = threadIdx.x; r < R; r += blockDim.x) {first}\n"
        f"{stats}"
        "    for (int64_t r = threadIdx.x; r < R; r += blockDim.x)\n"
        f"        out[base + r * inner] = static_cast<scalar_t>(post({write}));\n"
    )
    alloc = "    auto out = torch::empty_like(xc);\n"
    helpers = f"{block_sum}\n{_device_fn('post', post, notes)}"
    return _dim_kernel(name, helpers, "scalar_t", body, alloc, x, extra=", double eps")


def matmul_epilogue(
    name: str,
    bias: bool,
    ops: tuple[PointOp, ...],
    names: tuple[str, ...] = ("a", "b", "bias"),
    trans_a: bool = False,
    trans_b: bool = False,
    notes: tuple[str, ...] = (),
    core_note: str = "",
) -> Kernel:
    """fp32 op(A) @ op(B) with 16x16 shared-memory tiles, then `+ bias[col]` and `ops` fused.

    `trans_a`: A is stored (K, M) and used as A.T; `trans_b`: B is stored (N, K) and used as B.T.
    `notes` (one per op) and `core_note` (the product with its bias) become comments before
    their statements.
    """
    a, b = names[0], names[1]
    bname = names[2] if bias else ""
    a_load = "a[(int64_t)(k0 + tx) * M + row]" if trans_a else "a[(int64_t)row * K + k0 + tx]"
    b_load = "b[(int64_t)col * K + k0 + ty]" if trans_b else "b[(int64_t)(k0 + ty) * N + col]"
    bias_param = "const float* __restrict__ bias, " if bias else ""
    bias_line = "        v += bias[col];\n" if bias else ""
    bias_arg = f"{bname}_c.data_ptr<float>(), " if bias else ""
    sig = f"torch::Tensor {a}, torch::Tensor {b}" + (f", torch::Tensor {bname}" if bias else "")
    dims = (
        f"    int M = {a}_c.size({1 if trans_a else 0}), K = {a}_c.size({0 if trans_a else 1}), "
        f"N = {b}_c.size({0 if trans_b else 1});\n"
    )
    source = (
        "\n#include <torch/extension.h>\n\n#define TILE 16\n\n"
        f"__global__ void {name}_kernel("
        f"const float* __restrict__ a, const float* __restrict__ b, {bias_param}"
        "float* __restrict__ out, int M, int N, int K) {\n"
        "    __shared__ float ta[TILE][TILE];\n"
        "    __shared__ float tb[TILE][TILE];\n"
        "    int tx = threadIdx.x, ty = threadIdx.y;\n"
        "    int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;\n"
        f"{_note(core_note, '    ')}"
        "    float acc = 0.0f;\n"
        "    for (int k0 = 0; k0 < K; k0 += TILE) {\n"
        f"        ta[ty][tx] = (row < M && k0 + tx < K) ? {a_load} : 0.0f;\n"
        f"        tb[ty][tx] = (k0 + ty < K && col < N) ? {b_load} : 0.0f;\n"
        "        __syncthreads();\n"
        "        for (int k = 0; k < TILE; ++k) acc += ta[ty][k] * tb[k][tx];\n"
        "        __syncthreads();\n"
        "    }\n"
        "    if (row < M && col < N) {\n"
        f"        float v = acc;\n{bias_line}{_ops_lines(ops, '        ', notes)}"
        "        out[(int64_t)row * N + col] = v;\n"
        "    }\n}\n\n"
        f"torch::Tensor {name}_cuda({sig}) {{\n"
        f"    TORCH_CHECK({a}.scalar_type() == torch::kFloat32 && {b}.scalar_type() == torch::kFloat32,"
        ' "float32 only");\n'
        f"    auto {a}_c = {a}.contiguous();\n"
        f"    auto {b}_c = {b}.contiguous();\n"
        + (f"    auto {bname}_c = {bname}.contiguous();\n" if bias else "")
        + dims
        + f"    auto out = torch::empty({{M, N}}, {a}_c.options());\n"
        "    if (M == 0 || N == 0) return out;\n"
        "    dim3 threads(TILE, TILE);\n"
        "    dim3 blocks((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);\n"
        f"    {name}_kernel<<<blocks, threads>>>({a}_c.data_ptr<float>(), {b}_c.data_ptr<float>(), {bias_arg}"
        "out.data_ptr<float>(), M, N, K);\n"
        "    return out;\n}\n"
    )
    args = (a, b, bname) if bias else (a, b)
    return Kernel(source, f"torch::Tensor {name}_cuda({sig});", f"{name}_cuda", args)


def loss_reduce(
    name: str,
    loss: LossOp,
    reduction: str,
    names: tuple[str, str] = ("predictions", "targets"),
    fast: bool = False,
    core_note: str = "",
) -> Kernel:
    """fp32 loss to a 0-d tensor: per-block partial sums, then one block sums them (deterministic;
    `fast`: the block sums go through warp shuffles). `core_note` (the reference's loss
    expression) becomes a comment before the per-element statements."""
    p, t = names
    block_sum, _, _, shared = _blocks(fast)
    scale = "1.0f / n" if reduction == "mean" else "1.0f"
    source = (
        f"\n#include <torch/extension.h>\n\n{block_sum}\n"
        f"__global__ void {name}_partial(const float* __restrict__ p, const float* __restrict__ t, "
        "float* __restrict__ partial, int64_t n) {\n"
        f"    __shared__ float sh[{shared}];\n"
        "    float acc = 0.0f;\n"
        "    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;"
        " i += (int64_t)gridDim.x * blockDim.x) {\n"
        "        float x = p[i], y = t[i];\n"
        f"{_note(core_note, '        ')}"
        f"        {loss.cuda}\n"
        "        acc += v;\n"
        "    }\n"
        "    acc = block_sum(acc, sh);\n"
        "    if (threadIdx.x == 0) partial[blockIdx.x] = acc;\n"
        "}\n\n"
        f"__global__ void {name}_final(const float* __restrict__ partial, float* __restrict__ out, int num, "
        "float scale) {\n"
        f"    __shared__ float sh[{shared}];\n"
        "    float acc = 0.0f;\n"
        "    for (int i = threadIdx.x; i < num; i += blockDim.x) acc += partial[i];\n"
        "    acc = block_sum(acc, sh);\n"
        "    if (threadIdx.x == 0) out[0] = acc * scale;\n"
        "}\n\n"
        f"torch::Tensor {name}_cuda(torch::Tensor {p}, torch::Tensor {t}) {{\n"
        f"    TORCH_CHECK({p}.sizes() == {t}.sizes(),"
        f' "{p} and {t} must have the same shape");\n'
        f"    auto pc = {p}.contiguous();\n"
        f"    auto tc = {t}.contiguous();\n"
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
        source, f"torch::Tensor {name}_cuda(torch::Tensor {p}, torch::Tensor {t});", f"{name}_cuda", names
    )
