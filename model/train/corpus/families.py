"""The problem families: every composition a family can build, and one random instance of it.

A family is a `Family` in `FAMILIES` (a registry: one signature, no if/elif chain): its
`compositions()` lists every `Composition` (the split key, the curriculum level, whether it may
be held out) and `build(composition, rng)` draws shapes and a dtype and returns the
`ProblemSpec` plus the `Kernel` that solves it. Compositions are enumerated without randomness,
so the train/held-out split (`cudice.model.train.corpus.split`) does not depend on the seed;
only the instances (shapes, dtypes) do.

Families: unary (one op or a chain), binary (+ epilogue), reduce (sum/mean/amax/amin/max over a
dim), argreduce (argmax/argmin), softmax (softmax/log-softmax over a dim), norm (LayerNorm,
RMSNorm), matmul (+ bias + epilogue), loss (MSE, L1, Huber, smooth L1, hinge; mean or sum).
Half and bfloat16 inputs appear only where PyTorch itself rounds once (single ops, reductions,
softmax, LayerNorm); chains, epilogues, RMSNorm (written as several ops), matmul and losses
are fp32, so a kernel that rounds once stays within the verifier's 1e-2 tolerance.

Not covered: broadcasting, integer inputs, ops with parameters (Linear, affine norms), convs.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cudice.model.train.corpus import kernels
from cudice.model.train.corpus.files import ProblemSpec
from cudice.model.train.corpus.kernels import Kernel
from cudice.model.train.corpus.ops import (
    BINARY_OPS,
    CHAIN_OPS,
    PointOp,
    all_unary_ops,
    loss_op,
    unary_op,
)

MAX_NUMEL = 1 << 22
DIMS_2D = (100, 127, 255, 256, 511, 1000, 1024, 2047, 3000, 4096, 4097, 8192, 16384, 32768, 65536)
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
DIMS_3D_MID = (3, 16, 17, 64, 100, 128, 255, 256)
DIMS_3D_LAST = (5, 32, 64, 100, 128, 257, 512, 1000, 1024)
POSITIONS = ((2, 0), (2, 1), (2, -1), (3, 0), (3, 1), (3, 2), (3, -1))  # (rank, dim)
LOW_PRECISION = ("float16", "bfloat16")


@dataclass(frozen=True, slots=True)
class Composition:
    family: str
    key: str  # "unary:relu>sigmoid" — the split key
    level: int  # 1 = one op, 2 = a composition
    protected: bool  # always in training (primitives, the bundled examples)
    parts: tuple[Any, ...]  # what `build` needs


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    compositions: Callable[[], list[Composition]]
    build: Callable[[Composition, random.Random], tuple[ProblemSpec, Kernel]]


# --- shapes and inputs ------------------------------------------------------------------------
def _shape(rng: random.Random, rank: int) -> tuple[tuple[str, int], ...]:
    dims: tuple[int, ...]
    names: tuple[str, ...]
    while True:
        if rank == 2:
            dims = (rng.choice(BATCHES), rng.choice(DIMS_2D))
            names = ("batch_size", "dim")
        else:
            dims = (rng.choice(BATCHES[1:6]), rng.choice(DIMS_3D_MID), rng.choice(DIMS_3D_LAST))
            names = ("batch_size", "dim1", "dim2")
        numel = 1
        for d in dims:
            numel *= d
        if 64 <= numel <= MAX_NUMEL:
            return tuple(zip(names, dims, strict=True))


def _randn(sizes: tuple[tuple[str, int], ...], dtype: str) -> str:
    args = ", ".join(k for k, _ in sizes)
    return f"torch.randn({args})" if dtype == "float32" else f"torch.randn({args}, dtype=torch.{dtype})"


def _dtype(rng: random.Random, low_precision_ok: bool) -> str:
    if not low_precision_ok:
        return "float32"
    return rng.choices(("float32", *LOW_PRECISION), weights=(3, 1, 1))[0]


def _chain_body(ops: tuple[PointOp, ...], start: str) -> tuple[str, ...]:
    """`return op(start)` for one op; otherwise `x = ...` lines, then the return of the last op."""
    lines = [] if start == "x" else [f"x = {start}"]
    for op in ops[:-1]:
        lines.append(f"x = {op.python.format(x='x')}")
    lines.append(f"return {ops[-1].python.format(x='x')}")
    return tuple(lines)


# --- unary ------------------------------------------------------------------------------------
_CHAIN_HEADS = ("scale2p0", "shift1p0", "relu", "gelu", "abs", "square", "tanh")


def _unary_compositions() -> list[Composition]:
    ops = {op.name: op for op in all_unary_ops()}
    chain = [ops[n] for n in CHAIN_OPS]
    out = [Composition("unary", f"unary:{op.name}", 1, True, (op,)) for op in ops.values()]
    for a in ops.values():
        out += [Composition("unary", f"unary:{a.name}>{b.name}", 2, False, (a, b)) for b in chain if b != a]
    for head in _CHAIN_HEADS:
        for b in chain:
            out += [
                Composition("unary", f"unary:{head}>{b.name}>{c.name}", 2, False, (ops[head], b, c))
                for c in chain
                if c != b and b != ops[head]
            ]
    return out


def _unary_build(comp: Composition, rng: random.Random) -> tuple[ProblemSpec, Kernel]:
    ops: tuple[PointOp, ...] = comp.parts
    dtype = _dtype(rng, len(ops) == 1)
    sizes = _shape(rng, rng.choice((2, 2, 2, 3)))
    name = "_".join(op.name for op in ops)
    titles = ", then ".join(op.title for op in ops)
    spec = ProblemSpec(
        "unary",
        name,
        comp.key,
        comp.level,
        f"elementwise {titles}",
        f"Applies {titles} to the input.",
        ("x",),
        _chain_body(ops, "x"),
        sizes,
        (("x", _randn(sizes, dtype)),),
        uses_f=any(op.needs_f for op in ops),
        dtype=dtype,
    )
    return spec, kernels.pointwise(name, ops)


# --- binary -----------------------------------------------------------------------------------
def _binary_compositions() -> list[Composition]:
    epilogues = [unary_op(n) for n in CHAIN_OPS] + [unary_op("scale", 2.0), unary_op("scale", 0.5)]
    out = []
    for op in BINARY_OPS.values():
        out.append(Composition("binary", f"binary:{op.name}", 1, True, (op, ())))
        out += [Composition("binary", f"binary:{op.name}>{e.name}", 2, False, (op, (e,))) for e in epilogues]
    return out


def _binary_build(comp: Composition, rng: random.Random) -> tuple[ProblemSpec, Kernel]:
    op, epi = comp.parts
    dtype = _dtype(rng, not epi)
    sizes = _shape(rng, rng.choice((2, 2, 3)))
    name = "_".join([op.name, *(e.name for e in epi)])
    expr = op.python.format(a="a", b="b")
    body = _chain_body(epi, expr) if epi else (f"return {expr}",)
    title = f"elementwise {op.title} of two tensors" + "".join(f", then {e.title}" for e in epi)
    spec = ProblemSpec(
        "binary",
        name,
        comp.key,
        comp.level,
        title,
        f"Computes the {title}.",
        ("a", "b"),
        body,
        sizes,
        (("a", _randn(sizes, dtype)), ("b", _randn(sizes, dtype))),
        uses_f=any(e.needs_f for e in epi),
        dtype=dtype,
    )
    return spec, kernels.pointwise(name, epi, binary=op)


# --- reductions over a dim ---------------------------------------------------------------------
_REDUCE_PY = {
    "sum": ("sum", "torch.sum(x, dim={d})"),
    "mean": ("mean", "torch.mean(x, dim={d})"),
    "amax": ("amax", "torch.amax(x, dim={d})"),
    "amin": ("amin", "torch.amin(x, dim={d})"),
    "max": ("amax", "torch.max(x, dim={d}).values"),
    "argmax": ("argmax", "torch.argmax(x, dim={d})"),
    "argmin": ("argmin", "torch.argmin(x, dim={d})"),
}
_REDUCE_TITLE = {
    "sum": "sum",
    "mean": "mean",
    "amax": "maximum",
    "amin": "minimum",
    "max": "maximum",
    "argmax": "argmax",
    "argmin": "argmin",
}


def _dim_compositions(
    family: str, kinds: tuple[str, ...], protected: tuple[str, ...] = ()
) -> Callable[[], list[Composition]]:
    def compositions() -> list[Composition]:
        out = []
        for kind in kinds:
            for rank, d in POSITIONS:
                key = f"{family}:{kind}:r{rank}d{d}"
                level = 1 if d in (-1, rank - 1) else 2
                out.append(
                    Composition(
                        family,
                        key,
                        level,
                        key in protected or (rank, d) in ((2, 1), (2, -1)),
                        (kind, rank, d),
                    )
                )
        return out

    return compositions


def _reduce_build(comp: Composition, rng: random.Random) -> tuple[ProblemSpec, Kernel]:
    kind, rank, d = comp.parts
    sizes = _shape(rng, rank)
    dtype = _dtype(rng, True)
    kernel_kind, python = _REDUCE_PY[kind]
    name = f"{kernel_kind}_reduce"
    title = f"{_REDUCE_TITLE[kind]} over dimension {d}"
    kernel = (
        kernels.arg_reduce_dim(name, kernel_kind)
        if kernel_kind.startswith("arg")
        else kernels.reduce_dim(name, kernel_kind)
    )
    return _over_dim_spec(comp, name, title, f"Takes the {title}.", python.format(d=d), sizes, dtype), kernel


def _softmax_build(comp: Composition, rng: random.Random) -> tuple[ProblemSpec, Kernel]:
    kind, rank, d = comp.parts
    sizes = _shape(rng, rank)
    dtype = _dtype(rng, True)
    word = "softmax" if kind == "softmax" else "log-softmax"
    if rank == 2 and d in (1, -1):
        title, summary = f"row-wise {word}", f"{word[0].upper()}{word[1:]} over the last dimension."
    else:
        title, summary = f"{word} over dimension {d}", f"{word[0].upper()}{word[1:]} over dimension {d}."
    spec = _over_dim_spec(comp, kind, title, summary, f"torch.{kind}(x, dim={d})", sizes, dtype)
    return spec, kernels.softmax_dim(kind, log=kind == "log_softmax")


def _over_dim_spec(
    comp: Composition,
    name: str,
    title: str,
    summary: str,
    expression: str,
    sizes: tuple[tuple[str, int], ...],
    dtype: str,
) -> ProblemSpec:
    """A problem on one input `x` over the dim of `comp` (given to `Model.__init__`): returns `expression`."""
    _, _, d = comp.parts
    return ProblemSpec(
        comp.family,
        name,
        comp.key,
        comp.level,
        title,
        summary,
        ("x",),
        (f"return {expression}",),
        sizes,
        (("x", _randn(sizes, dtype)),),
        extra_args=(str(d),),
        dtype=dtype,
    )


# --- norms --------------------------------------------------------------------------------------
def _norm_compositions() -> list[Composition]:
    return [
        Composition(
            "norm",
            f"norm:{kind}:r{rank}:eps{eps}",
            1 if rank == 2 else 2,
            rank == 2 and eps == 1e-5,
            (kind, rank, eps),
        )
        for kind in ("layer_norm", "rms_norm")
        for rank in (2, 3)
        for eps in (1e-5, 1e-6)
    ]


def _norm_build(comp: Composition, rng: random.Random) -> tuple[ProblemSpec, Kernel]:
    kind, rank, eps = comp.parts
    sizes = _shape(rng, rank)
    if kind == "layer_norm":
        dtype = _dtype(rng, True)
        body = (f"return F.layer_norm(x, x.shape[-1:], eps={eps})",)
        title = "LayerNorm over the last dimension (no affine)"
    else:
        dtype = "float32"
        body = (f"return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + {eps})",)
        title = "RMSNorm over the last dimension (no weight)"
    spec = ProblemSpec(
        "norm",
        kind,
        comp.key,
        comp.level,
        title,
        f"Applies {title}.",
        ("x",),
        body,
        sizes,
        (("x", _randn(sizes, dtype)),),
        extra_args=(repr(eps),),
        uses_f=kind == "layer_norm",
        dtype=dtype,
    )
    return spec, kernels.norm_last_dim(kind, kind)


# --- matmul with epilogues -------------------------------------------------------------------------
_MM_ACTS = ("relu", "gelu", "sigmoid", "tanh", "silu")
_MM_M = (16, 31, 64, 100, 128, 256, 257, 512)
_MM_K = (32, 64, 100, 128, 255, 256, 512, 1000)
_MM_N = (16, 33, 64, 128, 200, 256, 511, 1024)


def _matmul_compositions() -> list[Composition]:
    singles = [unary_op(n) for n in _MM_ACTS] + [
        unary_op("scale", 2.0),
        unary_op("scale", 0.5),
        unary_op("leaky_relu", 0.1),
    ]
    epilogues: list[tuple[PointOp, ...]] = [()] + [(e,) for e in singles]
    epilogues += [(unary_op("scale", s), unary_op(a)) for s in (2.0, 0.5) for a in _MM_ACTS]
    out = []
    for bias in (False, True):
        for epi in epilogues:
            key = "matmul:" + ">".join((["bias"] if bias else []) + [e.name for e in epi] or ["plain"])
            out.append(
                Composition(
                    "matmul", key, 1 if not epi else 2, not epi or (not bias and len(epi) == 1), (bias, epi)
                )
            )
    return out


def _matmul_build(comp: Composition, rng: random.Random) -> tuple[ProblemSpec, Kernel]:
    bias, epi = comp.parts
    sizes = (("M", rng.choice(_MM_M)), ("K", rng.choice(_MM_K)), ("N", rng.choice(_MM_N)))
    name = "_".join(["matmul", *(["bias"] if bias else []), *(e.name for e in epi)])
    start = "torch.matmul(a, b)" + (" + bias" if bias else "")
    body = _chain_body(epi, start) if epi else (f"return {start}",)
    title = (
        "matrix multiplication" + (" plus a bias" if bias else "") + "".join(f", then {e.title}" for e in epi)
    )
    inputs = [("a", "torch.randn(M, K)"), ("b", "torch.randn(K, N)")] + (
        [("bias", "torch.randn(N)")] if bias else []
    )
    spec = ProblemSpec(
        "matmul",
        name,
        comp.key,
        comp.level,
        title,
        f"Computes a {title}.",
        tuple(v for v, _ in inputs),
        body,
        sizes,
        tuple(inputs),
        uses_f=any(e.needs_f for e in epi),
    )
    return spec, kernels.matmul_epilogue(name, bias, epi)


# --- losses --------------------------------------------------------------------------------------------
_LOSSES = (
    ("mse", None),
    ("l1", None),
    ("huber", 1.0),
    ("huber", 0.5),
    ("huber", 2.0),
    ("smooth_l1", 1.0),
    ("smooth_l1", 0.5),
    ("hinge", None),
)


def _loss_compositions() -> list[Composition]:
    out = []
    for kind, value in _LOSSES:
        loss = loss_op(kind, value)
        for r in ("mean", "sum"):
            protected = r == "mean" and value in (None, 1.0)
            out.append(
                Composition("loss", f"loss:{loss.name}:{r}", 1 if r == "mean" else 2, protected, (loss, r))
            )
    return out


def _loss_build(comp: Composition, rng: random.Random) -> tuple[ProblemSpec, Kernel]:
    loss, r = comp.parts
    sizes = _shape(rng, 2)
    args = ", ".join(k for k, _ in sizes)
    targets = (
        f"torch.randint(0, 2, ({args},)).float() * 2 - 1" if loss.hinge_targets else f"torch.randn({args})"
    )
    name = f"{loss.name}_{r}"
    title = f"{loss.title} ({r} over all elements)"
    spec = ProblemSpec(
        "loss",
        name,
        comp.key,
        comp.level,
        title,
        f"Computes the {title}.",
        ("predictions", "targets"),
        (f"return {loss.python.format(r=r)}",),
        sizes,
        (("predictions", f"torch.randn({args})"), ("targets", targets)),
        uses_f=not loss.hinge_targets,
    )
    return spec, kernels.loss_reduce(name, loss, r)


FAMILIES: dict[str, Family] = {
    "unary": Family("unary", _unary_compositions, _unary_build),
    "binary": Family("binary", _binary_compositions, _binary_build),
    "reduce": Family(
        "reduce", _dim_compositions("reduce", ("sum", "mean", "amax", "amin", "max")), _reduce_build
    ),
    "argreduce": Family("argreduce", _dim_compositions("argreduce", ("argmax", "argmin")), _reduce_build),
    "softmax": Family(
        "softmax",
        _dim_compositions("softmax", ("softmax", "log_softmax"), ("softmax:softmax:r2d1",)),
        _softmax_build,
    ),
    "norm": Family("norm", _norm_compositions, _norm_build),
    "matmul": Family("matmul", _matmul_compositions, _matmul_build),
    "loss": Family("loss", _loss_compositions, _loss_build),
}
