"""The problem families: every composition a family can build, and one random instance of it.

A family is a `Family` in `FAMILIES` (a registry: one signature, no if/elif chain): its
`compositions()` lists every `Composition` (the split key, the curriculum level, the number of
ops it chains, whether it may be held out) and `build(composition, rng, timed)` draws an
instance and returns the `ProblemSpec` plus the `Kernel` that solves it. A composition is what
decides the kernel's computation (which ops, in which order, fused how); everything else is the
instance's, drawn by `rng`: shapes, rank (1-4) and the reduced dim's position (any, negative
too; the last dim more often), dtype, the reference's layout (`files.STYLES`), the tensors' and
constants' names, each op's spelling (`ops.PointOp.spell`), nested or one statement per op,
constants as literals or `__init__` arguments, keepdim, and the answer's variant (plain or
`fast`, see `kernels`). Compositions are enumerated without randomness, so the train/held-out
split (`cudice.model.train.corpus.split`) does not depend on the seed.

Two size regimes (`timed`): small shapes (64 .. 4M elements, odd sizes and non-multiples of the
block size, to teach bounds checks) or timed shapes, large enough that PyTorch's own kernel takes
tens of microseconds or more on a current datacenter GPU so the verifier can time a candidate
against it: every tensor op touches at least 16M elements (`TIMED_MIN_NUMEL`), the inputs
together take at most 256 MiB (`TIMED_MAX_BYTES`), no dim of a timed shape is below 16, a
reduced dim is at most 65536 long with at least 256 rows around it, and a matmul has every dim
>= 1024 and 2^32 .. 2^34 multiply-adds. The model never writes a size: the answer is the same
kernel in both regimes.

Families: unary (one op or a chain of two or three), binary (two- and three-input ops, then an
epilogue chain), reduce (prologue op > sum/mean/max/min > epilogue op, over any dim), argreduce
(prologue > argmax/argmin), softmax (prologue, e.g. a temperature > softmax/log-softmax), norm
(LayerNorm/RMSNorm over any dim > epilogue op), matmul (transposes x bias x epilogue chain), loss
(MSE, L1, Huber, smooth L1, hinge, squared hinge, BCE with logits, log-cosh; mean or sum).
Half and bfloat16 inputs appear only where PyTorch itself rounds once (single ops, plain
reductions, softmax, LayerNorm written with F.layer_norm); everything else is fp32, so a kernel
that rounds once stays within the verifier's 1e-2 tolerance.

Not covered: broadcasting, integer inputs, ops with parameters (Linear, affine norms), convs.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cudice.model.train.corpus import kernels
from cudice.model.train.corpus.files import STYLES, ProblemSpec
from cudice.model.train.corpus.kernels import Kernel
from cudice.model.train.corpus.ops import (
    BINARY_OPS,
    CHAIN_OPS,
    CHAIN_VALUED,
    PointOp,
    all_unary_ops,
    loss_op,
    unary_op,
)

MAX_NUMEL = 1 << 22
LOW_PRECISION = ("float16", "bfloat16")
ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2}
SIZE_VALUES = (1, 2, 3, 4, 5, 7, 8, 16, 17, 32, 64, 100, 127, 128, 255, 256, 500, 512, 1000, 1024, 2048, 4096)
TIMED_MIN_NUMEL = 1 << 24
TIMED_MAX_BYTES = 256 << 20
TIMED_VALUES = (16, 32, 64, 128, 256, 384, 512, 768, 1000, 1024, 2048, 3072, 4096, 8192, 16384, 65536)
TIMED_MAX_REDUCED = 65536  # a longer reduced dim leaves most of the GPU idle in a row-per-block kernel
TIMED_MIN_ROWS = 256
FAST_SHARE = 0.5  # answers written in the `fast` variant, where the family has one
# Size-constant names by rank, one tuple per naming habit (the bundled examples' names twice).
SIZE_NAMES = {
    1: (("n",), ("size",), ("N",), ("num_elements",), ("length",)),
    2: (
        ("batch_size", "dim"),
        ("batch_size", "dim"),
        ("N", "D"),
        ("batch", "features"),
        ("rows", "cols"),
        ("M", "N"),
        ("M", "K"),
        ("batch_size", "features"),
        ("batch_size", "hidden_dim"),
        ("num_rows", "num_cols"),
        ("B", "D"),
    ),
    3: (("batch_size", "dim1", "dim2"), ("B", "S", "H"), ("batch", "seq_len", "hidden"), ("N", "C", "L")),
    4: (("batch_size", "channels", "height", "width"), ("B", "C", "H", "W"), ("N", "C", "dim1", "dim2")),
}
ONE_INPUT = ("x", "x", "x", "input", "inp", "t", "data", "h", "X", "tensor", "a")
TWO_INPUTS = (("a", "b"), ("x", "y"), ("A", "B"), ("lhs", "rhs"), ("x1", "x2"), ("input", "other"))
THREE_INPUTS = (("a", "b", "c"), ("x", "y", "z"), ("A", "B", "C"), ("x1", "x2", "x3"))
TEMPS = ("y", "out", "z", "h", "tmp", "res")


@dataclass(frozen=True, slots=True)
class Composition:
    family: str
    key: str  # "unary:relu>sigmoid" — the split key
    level: int  # 1 = one op, 2 = a composition
    protected: bool  # always in training (primitives, the bundled examples)
    parts: tuple[Any, ...]  # what `build` needs
    length: int = 1  # ops chained: 1 = a single op (a loss with its reduction is one)


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    compositions: Callable[[], list[Composition]]
    draw: Callable[[Composition, random.Random, bool, str], tuple[ProblemSpec, Kernel]]

    def build(
        self, composition: Composition, rng: random.Random, timed: bool = False, naming: str = "generic"
    ) -> tuple[ProblemSpec, Kernel]:
        """One instance of `composition`; `timed` draws the large, timeable shapes; `naming` (one
        of `NAMINGS`) picks the answer's identifiers and consumes no randomness, so one `rng`
        state gives the same instance in either naming."""
        if naming not in NAMINGS:
            raise ValueError(f"naming={naming!r} must be one of {', '.join(NAMINGS)}")
        return self.draw(composition, rng, timed, naming)


# The answer's identifiers (`{n}_source`, `{n}_kernel`, `{n}_cuda`, `load_inline(name="{n}")`,
# ...): "generic" takes `n` from the kernel template (`GENERIC_NAMES`), the same for every
# composition of a family, so two answers differ only where their computations do (op lines,
# constants, reduction dims, argument names from the reference); "composition" spells the
# composition (`sigmoid_relu_hardtanh`), as the corpus did first. A new composition's name would
# be a token sequence the model never wrote, and a small model falls back to a training
# answer's name and with it that answer's body.
NAMINGS = ("generic", "composition")
GENERIC_NAMES = {
    "unary": "fused",
    "binary": "fused",  # the same elementwise template as unary
    "reduce": "reduce",
    "argreduce": "argreduce",
    "softmax": "softmax",
    "norm": "norm",
    "matmul": "matmul",
    "loss": "loss",
}


def answer_name(family: str, composition_name: str, naming: str) -> str:
    """The stem of the answer's identifiers: `GENERIC_NAMES[family]` or `composition_name`."""
    return GENERIC_NAMES[family] if naming == "generic" else composition_name


# --- instance drawing -------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Shape:
    sizes: tuple[tuple[str, str], ...]  # module-level constants
    args: str  # the arguments of torch.randn, e.g. "batch_size, dim" or "batch_size, *input_shape"
    doc: str  # "(batch_size, dim)"


def _small_dims(rng: random.Random, rank: int) -> list[int]:
    while True:
        dims = [rng.choice(SIZE_VALUES) for _ in range(rank)]
        if rank == 1:
            dims = [rng.choice((1000, 4096, 65536, 100000, 1 << 20))]
        if 64 <= math.prod(dims) <= MAX_NUMEL:
            return dims


def _timed_dims(rng: random.Random, rank: int, bytes_per_elem: int, reduced: int | None) -> list[int]:
    """Dims whose product lies in [max(TIMED_MIN_NUMEL, hi / 2), hi], hi = TIMED_MAX_BYTES /
    `bytes_per_elem` (the bytes of one element over all inputs); one dim, at a random position,
    is computed to land there (a round number three times in four). With `reduced`, that dim is
    <= TIMED_MAX_REDUCED and the others multiply to >= TIMED_MIN_ROWS."""
    hi = TIMED_MAX_BYTES // bytes_per_elem
    lo = max(TIMED_MIN_NUMEL, hi // 2)
    while True:
        dims = [rng.choice(TIMED_VALUES) for _ in range(rank - 1)]
        prod = math.prod(dims)
        first, last = -(-lo // prod), hi // prod
        if last < max(first, 16):
            continue
        free = rng.randint(max(first, 16), last)
        step = rng.choice((1, 256, 1024, 4096))
        if rng.random() < 0.75 and (free // step) * step >= max(first, 16):
            free = (free // step) * step
        dims.insert(rng.randrange(rank), free)
        numel = math.prod(dims)
        if reduced is not None and (
            dims[reduced] > TIMED_MAX_REDUCED or numel // dims[reduced] < TIMED_MIN_ROWS
        ):
            continue
        return dims


def draw_shape(
    rng: random.Random,
    rank: int,
    avoid: tuple[str, ...] = (),
    timed: bool = False,
    bytes_per_elem: int = 4,
    reduced: int | None = None,
) -> Shape:
    """Sizes of a tensor of `rank` dims, named by one naming habit: 64 .. MAX_NUMEL elements, or
    with `timed` the large regime of `_timed_dims` (`reduced`: the dim a reduction runs over)."""
    while True:
        names = rng.choice(SIZE_NAMES[rank])
        if not set(names) & set(avoid):
            break
    dims = _timed_dims(rng, rank, bytes_per_elem, reduced) if timed else _small_dims(rng, rank)
    if rank >= 2 and names[0] == "batch_size" and rng.random() < 0.25:
        rest = ", ".join(str(d) for d in dims[1:]) + ("," if rank == 2 else "")
        sizes: tuple[tuple[str, str], ...] = (("batch_size", str(dims[0])), ("input_shape", f"({rest})"))
        return Shape(sizes, "batch_size, *input_shape", "(batch_size, *input_shape)")
    sizes = tuple((n, str(d)) for n, d in zip(names, dims, strict=True))
    return Shape(sizes, ", ".join(names), "(" + ", ".join(names) + ")")


def _randn(shape: Shape, dtype: str, rng: random.Random, positive: bool = False) -> str:
    fn = "torch.rand" if positive or rng.random() < 0.3 else "torch.randn"
    return f"{fn}({shape.args})" if dtype == "float32" else f"{fn}({shape.args}, dtype=torch.{dtype})"


def _dtype(rng: random.Random, low_precision_ok: bool) -> str:
    if not low_precision_ok:
        return "float32"
    return rng.choices(("float32", *LOW_PRECISION), weights=(4, 1, 1))[0]


_ATOM = re.compile(r"-?[\w.]+")


def _atomic(expr: str) -> bool:
    """A name, or a call/subscript chain whose first bracket closes at the end (`torch.f(a, b)`)."""
    if _ATOM.fullmatch(expr):
        return not expr.startswith("-")
    head = re.match(r"[\w.]+", expr)
    if not head or expr[head.end() : head.end() + 1] not in "([":
        return False
    depth = 0
    for i, ch in enumerate(expr[head.end() :], start=head.end()):
        depth += ch in "(["
        depth -= ch in ")]"
        if depth == 0 and i != len(expr) - 1 and expr[i + 1] not in "([.":
            return False
    return depth == 0


def _paren(expr: str) -> str:
    return expr if _atomic(expr) else f"({expr})"


NOTE_OPERAND = "v"  # the operand of an op's note: the CUDA register its statement updates


def apply_ops(
    ops: tuple[PointOp, ...], operand: str, rng: random.Random, temp: str
) -> tuple[list[str], str, tuple[str, ...]]:
    """`ops` applied to `operand`: (statements, final expression, notes), nested in one expression
    or one `temp = op(...)` statement per op, by a coin flip; each op in a random spelling. The
    notes are each op in the reference's spelling applied to `NOTE_OPERAND` (`F.elu(v)`), the
    comment `kernels` writes before the op's CUDA statement: the same whether the reference nests
    the ops or not."""
    if not ops:
        return [], operand, ()
    nested = rng.random() < 0.5
    lines: list[str] = []
    notes: list[str] = []
    expr = operand
    for k, op in enumerate(ops):
        choice = rng.randrange(8)
        expr = op.spell(_paren(expr), choice)
        notes.append(op.spell(NOTE_OPERAND, choice))
        if not nested and k < len(ops) - 1:
            lines.append(f"{temp} = {expr}")
            expr = temp
    return lines, expr, tuple(notes)


def _uses_f(text: str) -> bool:
    return "F." in text


def _finish(lines: list[str], expr: str) -> tuple[str, ...]:
    return (*lines, f"return {expr}")


def _style(rng: random.Random) -> str:
    return rng.choice(STYLES)


def _rank(rng: random.Random, comp: Composition, choices: tuple[int, ...]) -> int:
    """A rank from `choices`; a single op is 2-D half the time (the bundled examples' layout)."""
    if comp.length == 1 and rng.random() < 0.5:
        return 2
    return rng.choice(choices)


def _fast(rng: random.Random) -> bool:
    return rng.random() < FAST_SHARE


# --- unary ------------------------------------------------------------------------------------
_HEADS = ("scale2p0", "shift1p0", "relu", "gelu", "abs", "square", "tanh", "neg", "sigmoid", "silu")


def chain_pool() -> list[PointOp]:
    """Ops a chain may append (bounded or mild, so chains never overflow fp32)."""
    return [unary_op(n) for n in CHAIN_OPS] + [unary_op(k, v) for k, v in CHAIN_VALUED]


def _unary_compositions() -> list[Composition]:
    ops = {op.name: op for op in all_unary_ops()}
    chain = chain_pool()
    out = [Composition("unary", f"unary:{op.name}", 1, True, (op,)) for op in ops.values()]
    for a in ops.values():
        out += [
            Composition("unary", f"unary:{a.name}>{b.name}", 2, False, (a, b), 2) for b in chain if b != a
        ]
    for head in _HEADS:
        for b in chain:
            out += [
                Composition("unary", f"unary:{head}>{b.name}>{c.name}", 2, False, (ops[head], b, c), 3)
                for c in chain
                if len({head, b.name, c.name}) == 3
            ]
    return out


def _unary_build(
    comp: Composition, rng: random.Random, timed: bool, naming: str
) -> tuple[ProblemSpec, Kernel]:
    ops: tuple[PointOp, ...] = comp.parts
    dtype = _dtype(rng, len(ops) == 1)
    x = rng.choice(ONE_INPUT)
    rank = _rank(rng, comp, (1, 2, 2, 2, 3, 4))
    shape = draw_shape(rng, rank, avoid=(x,), timed=timed, bytes_per_elem=ITEMSIZE[dtype])
    lines, expr, notes = apply_ops(ops, x, rng, rng.choice(TEMPS))
    body = _finish(lines, expr)
    name = "_".join(op.name for op in ops)
    ident = answer_name(comp.family, name, naming)
    titles = ", then ".join(op.title for op in ops)
    spec = ProblemSpec(
        "unary",
        name,
        comp.key,
        comp.level,
        f"elementwise {titles}",
        f"Applies {titles} to the input.",
        (x,),
        body,
        shape.sizes,
        ((x, _randn(shape, dtype, rng)),),
        uses_f=_uses_f(" ".join(body)),
        ident=ident,
        dtype=dtype,
        style=_style(rng),
        shape_doc=shape.doc,
    )
    fast = dtype == "float32" and _fast(rng)
    return spec, kernels.pointwise(ident, ops, (x,), fast=fast, notes=notes)


# --- binary and ternary elementwise ---------------------------------------------------------------
_ACTS = ("relu", "sigmoid", "tanh", "gelu", "silu")


def _binary_compositions() -> list[Composition]:
    epilogues: list[tuple[PointOp, ...]] = [()] + [(e,) for e in chain_pool()]
    epilogues += [(unary_op("scale", s), unary_op(a)) for s in (2.0, 0.5) for a in _ACTS]
    out = []
    for op in BINARY_OPS.values():
        for epi in epilogues:
            key = "binary:" + ">".join([op.name, *(e.name for e in epi)])
            out.append(Composition("binary", key, 1 if not epi else 2, not epi, (op, epi), 1 + len(epi)))
    return out


def _binary_build(
    comp: Composition, rng: random.Random, timed: bool, naming: str
) -> tuple[ProblemSpec, Kernel]:
    op, epi = comp.parts
    dtype = _dtype(rng, not epi and op.name in ("add", "sub", "mul", "maximum", "minimum"))
    names = rng.choice(TWO_INPUTS if op.arity == 2 else THREE_INPUTS)
    rank = _rank(rng, comp, (1, 2, 2, 3, 4))
    shape = draw_shape(rng, rank, avoid=names, timed=timed, bytes_per_elem=ITEMSIZE[dtype] * op.arity)
    temp = rng.choice(TEMPS)
    expr = op.spell(names, rng.randrange(4))
    core_note = expr
    lines: list[str] = []
    if epi and rng.random() < 0.4:
        lines, expr = [f"{temp} = {expr}"], temp
    more, expr, notes = apply_ops(epi, expr, rng, temp)
    body = _finish(lines + more, expr)
    name = "_".join([op.name, *(e.name for e in epi)])
    ident = answer_name(comp.family, name, naming)
    title = f"elementwise {op.title} of {op.arity} tensors" + "".join(f", then {e.title}" for e in epi)
    spec = ProblemSpec(
        "binary",
        name,
        comp.key,
        comp.level,
        title,
        f"Computes the {title}.",
        names,
        body,
        shape.sizes,
        tuple((n, _randn(shape, dtype, rng)) for n in names),
        uses_f=_uses_f(" ".join(body)),
        ident=ident,
        dtype=dtype,
        style=_style(rng),
        shape_doc=shape.doc,
    )
    fast = dtype == "float32" and _fast(rng)
    return spec, kernels.pointwise(ident, epi, names, combine=op, fast=fast, notes=notes, core_note=core_note)


# --- over one dim: the dim and keepdim as literals or as __init__ arguments -------------------------
def _dim_args(
    rng: random.Random, rank: int, with_keepdim: bool, init_ok: bool = True
) -> tuple[int, str, str, bool, tuple[tuple[str, str, str], ...], tuple[tuple[str, str], ...]]:
    """(dim, its Python spelling, the keepdim keyword text, keepdim, init args, extra constants)."""
    d = rank - 1 if rng.random() < 0.35 else rng.randrange(rank)
    if rng.random() < 0.3:
        d -= rank  # the same dim, counted from the end
    keepdim = with_keepdim and rng.random() < 0.35
    kw = ", keepdim=True" if keepdim else (", keepdim=False" if with_keepdim and rng.random() < 0.15 else "")
    if init_ok and rng.random() < 0.4:
        const = rng.choice(("dim", "reduce_dim", "axis"))
        return d, "self.dim", kw, keepdim, (("dim", "int", const),), ((const, str(d)),)
    return d, str(d), kw, keepdim, (), ()


def _dim_rank(rng: random.Random, comp: Composition, timed: bool, low: int = 1) -> int:
    """A rank for an op over one dim: 2-D half the time for a single op; >= 2 when `timed` (a
    timed 1-D reduction would be one block's work)."""
    low = max(low, 2 if timed else 1)
    if comp.length == 1 and rng.random() < 0.5:
        return max(2, low)
    return rng.choice(tuple(r for r in (1, 2, 2, 3, 3, 4) if r >= low))


def _over_dim_shape(
    rng: random.Random, rank: int, d: int, consts: tuple[tuple[str, str], ...], timed: bool, dtype: str
) -> Shape:
    avoid = tuple(c for c, _ in consts)
    return draw_shape(rng, rank, avoid, timed=timed, bytes_per_elem=ITEMSIZE[dtype], reduced=d % rank)


_RED_PRE = ("none", "abs", "square", "relu", "neg", "scale2p0", "sigmoid")
_RED_POST = ("none", "sqrt", "scale0p5", "tanh", "neg", "relu")
_NONNEG_PRE = ("abs", "square", "relu", "sigmoid")
_RED_KINDS = ("sum", "mean", "amax", "amin")
_REDUCE_SPELL = {
    "sum": ("torch.sum({x}, dim={d}{k})", "{x}.sum(dim={d}{k})", "torch.sum({x}, {d}{k})"),
    "mean": ("torch.mean({x}, dim={d}{k})", "{x}.mean(dim={d}{k})", "torch.mean({x}, {d}{k})"),
    "amax": (
        "torch.amax({x}, dim={d}{k})",
        "torch.max({x}, dim={d}{k}).values",
        "torch.max({x}, dim={d}{k})[0]",
        "{x}.amax(dim={d}{k})",
    ),
    "amin": (
        "torch.amin({x}, dim={d}{k})",
        "torch.min({x}, dim={d}{k}).values",
        "torch.min({x}, dim={d}{k})[0]",
        "{x}.amin(dim={d}{k})",
    ),
}
_REDUCE_TITLE = {"sum": "sum", "mean": "mean", "amax": "maximum", "amin": "minimum"}


def _op_named(name: str) -> PointOp | None:
    if name == "none":
        return None
    table = {op.name: op for op in [*all_unary_ops(), *chain_pool(), unary_op("sqrt")]}
    return table[name]


def _ops_of(*names: str) -> tuple[PointOp, ...]:
    return tuple(op for op in (_op_named(n) for n in names) if op is not None)


def _reduce_compositions() -> list[Composition]:
    out = []
    for kind in _RED_KINDS:
        for pre in _RED_PRE:
            for post in _RED_POST:
                if post == "sqrt" and pre not in _NONNEG_PRE:
                    continue
                key = f"reduce:pre={pre}>{kind}>post={post}"
                plain = pre == "none" and post == "none"
                length = 1 + (pre != "none") + (post != "none")
                out.append(Composition("reduce", key, 1 if plain else 2, plain, (kind, pre, post), length))
    return out


def _title(pre: tuple[PointOp, ...], core: str, post: tuple[PointOp, ...]) -> str:
    head = "".join(f"{op.title}, then " for op in pre)
    return head + core + "".join(f", then {op.title}" for op in post)


def _over_dim_spec(
    comp: Composition,
    rng: random.Random,
    name: str,
    ident: str,
    title: str,
    x: str,
    lines: list[str],
    expr: str,
    shape: Shape,
    dtype: str,
    extra: tuple[str, ...],
    init: tuple[tuple[str, str, str], ...],
    consts: tuple[tuple[str, str], ...],
    positive: bool = False,
) -> ProblemSpec:
    body = _finish(lines, expr)
    return ProblemSpec(
        comp.family,
        name,
        comp.key,
        comp.level,
        title,
        f"{title[0].upper()}{title[1:]}.",
        (x,),
        body,
        shape.sizes + consts,
        ((x, _randn(shape, dtype, rng, positive)),),
        extra_args=extra,
        uses_f=_uses_f(" ".join(body)),
        ident=ident,
        dtype=dtype,
        style=_style(rng),
        init_args=init,
        shape_doc=shape.doc,
    )


def _reduce_build(
    comp: Composition, rng: random.Random, timed: bool, naming: str
) -> tuple[ProblemSpec, Kernel]:
    kind, pre_name, post_name = comp.parts
    pre, post = _ops_of(pre_name), _ops_of(post_name)
    rank = _dim_rank(rng, comp, timed)
    d, dtext, kw, keepdim, init, consts = _dim_args(rng, rank, True)
    dtype = _dtype(rng, not pre and not post)
    shape = _over_dim_shape(rng, rank, d, consts, timed, dtype)
    x = rng.choice(ONE_INPUT)
    temp = rng.choice(TEMPS)
    lines, expr, pre_notes = apply_ops(pre, x, rng, temp)
    if lines or (pre and rng.random() < 0.3):
        lines, expr = [*lines, f"{temp} = {expr}"], temp
    form = rng.choice(_REDUCE_SPELL[kind])
    expr = form.format(x=_paren(expr), d=dtext, k=kw)
    core_note = form.format(x=NOTE_OPERAND, d=dtext, k=kw)
    more, expr, post_notes = apply_ops(post, expr, rng, temp)
    name = "_".join([*(op.name for op in pre), f"{kind}_reduce", *(op.name for op in post)])
    ident = answer_name(comp.family, name, naming)
    title = _title(pre, f"{_REDUCE_TITLE[kind]} over dimension {d}", post)
    extra = (dtext, str(keepdim))
    spec = _over_dim_spec(
        comp, rng, name, ident, title, x, lines + more, expr, shape, dtype, extra, init, consts
    )
    fast = _fast(rng)
    notes = pre_notes + post_notes
    return spec, kernels.reduce_dim(ident, kind, x, pre, post, fast, notes, core_note)


_ARG_PRE = ("none", "abs", "neg", "square", "relu", "scale2p0")


def _argreduce_compositions() -> list[Composition]:
    return [
        Composition(
            "argreduce",
            f"argreduce:pre={pre}>{kind}",
            1 if pre == "none" else 2,
            pre == "none",
            (kind, pre),
            1 + (pre != "none"),
        )
        for kind in ("argmax", "argmin")
        for pre in _ARG_PRE
    ]


def _argreduce_build(
    comp: Composition, rng: random.Random, timed: bool, naming: str
) -> tuple[ProblemSpec, Kernel]:
    kind, pre_name = comp.parts
    pre = _ops_of(pre_name)
    rank = _dim_rank(rng, comp, timed)
    d, dtext, kw, keepdim, init, consts = _dim_args(rng, rank, True)
    dtype = _dtype(rng, not pre)
    shape = _over_dim_shape(rng, rank, d, consts, timed, dtype)
    x = rng.choice(ONE_INPUT)
    lines, expr, notes = apply_ops(pre, x, rng, rng.choice(TEMPS))
    form = rng.choice(("torch.{f}({x}, dim={d}{k})", "{x}.{f}(dim={d}{k})", "torch.{f}({x}, {d}{k})"))
    expr = form.format(f=kind, x=_paren(expr), d=dtext, k=kw)
    core_note = form.format(f=kind, x=NOTE_OPERAND, d=dtext, k=kw)
    name = "_".join([*(op.name for op in pre), kind])
    ident = answer_name(comp.family, name, naming)
    title = _title(pre, f"{kind} over dimension {d}", ())
    spec = _over_dim_spec(
        comp, rng, name, ident, title, x, lines, expr, shape, dtype, (dtext, str(keepdim)), init, consts
    )
    return spec, kernels.arg_reduce_dim(ident, kind, x, pre, notes, core_note)


_SOFT_PRE = ("none", "scale2p0", "scale0p5", "scale0p1", "tanh", "neg")
_SOFT_SPELL = {
    "softmax": ("torch.softmax({x}, dim={d})", "F.softmax({x}, dim={d})", "{x}.softmax(dim={d})"),
    "log_softmax": (
        "torch.log_softmax({x}, dim={d})",
        "F.log_softmax({x}, dim={d})",
        "{x}.log_softmax(dim={d})",
    ),
}


def _softmax_compositions() -> list[Composition]:
    return [
        Composition(
            "softmax",
            f"softmax:pre={pre}>{kind}",
            1 if pre == "none" else 2,
            pre == "none",
            (kind, pre),
            1 + (pre != "none"),
        )
        for kind in ("softmax", "log_softmax")
        for pre in _SOFT_PRE
    ]


def _softmax_build(
    comp: Composition, rng: random.Random, timed: bool, naming: str
) -> tuple[ProblemSpec, Kernel]:
    kind, pre_name = comp.parts
    pre = _ops_of(pre_name) if pre_name != "scale0p1" else (unary_op("scale", 0.1),)
    rank = _dim_rank(rng, comp, timed)
    d, dtext, _, _, init, consts = _dim_args(rng, rank, False)
    dtype = _dtype(rng, not pre)
    shape = _over_dim_shape(rng, rank, d, consts, timed, dtype)
    x = rng.choice(ONE_INPUT)
    lines, expr, notes = apply_ops(pre, x, rng, rng.choice(TEMPS))
    form = rng.choice(_SOFT_SPELL[kind])
    expr = form.format(x=_paren(expr), d=dtext)
    core_note = form.format(x=NOTE_OPERAND, d=dtext)
    word = "softmax" if kind == "softmax" else "log-softmax"
    name = "_".join([*(op.name for op in pre), kind])
    ident = answer_name(comp.family, name, naming)
    title = _title(pre, f"{word} over dimension {d}", ())
    spec = _over_dim_spec(comp, rng, name, ident, title, x, lines, expr, shape, dtype, (dtext,), init, consts)
    fast = _fast(rng)
    return spec, kernels.softmax_dim(ident, kind == "log_softmax", x, pre, fast, notes, core_note)


# --- norms over one dim ------------------------------------------------------------------------------
def _norm_compositions() -> list[Composition]:
    posts: list[tuple[PointOp, ...]] = [()] + [(e,) for e in chain_pool()]
    return [
        Composition(
            "norm",
            "norm:" + ">".join([kind, *(e.name for e in post)]),
            1 if not post else 2,
            not post,
            (kind, post),
            1 + len(post),
        )
        for kind in ("layer_norm", "rms_norm")
        for post in posts
    ]


def _norm_expr(
    kind: str, x: str, d: int, dtext: str, eps: str, rank: int, rng: random.Random
) -> tuple[list[str], str, bool]:
    """(statements, expression, is F.layer_norm): the norm of `x` over `dtext` in one of its spellings."""
    last = d in (-1, rank - 1)
    if kind == "layer_norm":
        if last and rng.random() < 0.6:
            shape = rng.choice((f"{x}.shape[-1:]", f"({x}.shape[-1],)", f"{x}.size()[-1:]"))
            return [], f"F.layer_norm({x}, {shape}, eps={eps})", True
        mean = f"{x}.mean(dim={dtext}, keepdim=True)"
        var = f"{x}.var(dim={dtext}, keepdim=True, unbiased=False)"
        if rng.random() < 0.5:
            return [f"mu = {mean}", f"var = {var}"], f"({x} - mu) / torch.sqrt(var + {eps})", False
        return [], f"({x} - {mean}) * torch.rsqrt({var} + {eps})", False
    forms: tuple[tuple[list[str], str], ...] = (
        ([], f"{x} * torch.rsqrt({x}.pow(2).mean({dtext}, keepdim=True) + {eps})"),
        ([f"rms = torch.sqrt(torch.mean({x} ** 2, dim={dtext}, keepdim=True) + {eps})"], f"{x} / rms"),
        ([], f"{x} / torch.sqrt(({x} * {x}).mean(dim={dtext}, keepdim=True) + {eps})"),
    )
    lines, expr = rng.choice(forms)
    return list(lines), expr, False


def _norm_build(
    comp: Composition, rng: random.Random, timed: bool, naming: str
) -> tuple[ProblemSpec, Kernel]:
    kind, post = comp.parts
    rank = _dim_rank(rng, comp, timed, low=2)
    d, dtext, _, _, init, consts = _dim_args(rng, rank, False)
    eps_value = rng.choice(("1e-5", "1e-6", "1e-8", "0.001"))
    eps_init = rng.random() < 0.4
    eps = "self.eps" if eps_init else eps_value
    if eps_init:
        init = (*init, ("eps", "float", "eps"))
        consts = (*consts, ("eps", eps_value))
    x = rng.choice(tuple(n for n in ONE_INPUT if n not in ("h",)))
    lines, expr, plain_f = _norm_expr(kind, x, d, dtext, eps, rank, rng)
    dtype = _dtype(rng, plain_f and not post)
    shape = _over_dim_shape(rng, rank, d, consts, timed, dtype)
    more, expr, notes = apply_ops(post, expr, rng, rng.choice(("y", "out", "res")))
    word = "LayerNorm (no affine)" if kind == "layer_norm" else "RMSNorm (no weight)"
    name = "_".join([kind, *(e.name for e in post)])
    ident = answer_name(comp.family, name, naming)
    title = _title((), f"{word} over dimension {d}", post)
    spec = _over_dim_spec(
        comp, rng, name, ident, title, x, lines + more, expr, shape, dtype, (dtext, eps), init, consts
    )
    return spec, kernels.norm_dim(ident, kind, x, post, fast=_fast(rng), notes=notes)


# --- matmul with transposes, bias and epilogues --------------------------------------------------------
_MM_M = (16, 31, 64, 100, 128, 256, 257, 512)
_MM_K = (32, 64, 100, 128, 255, 256, 512, 1000)
_MM_N = (16, 33, 64, 128, 200, 256, 511, 1024)
_MM_TIMED = (1024, 1031, 1536, 2048, 2047, 3072, 4096)
_MM_NAMES = (("A", "B"), ("a", "b"), ("x", "w"), ("lhs", "rhs"), ("mat1", "mat2"))
_MM_SIZES = (
    ("M", "K", "N"),
    ("m", "k", "n"),
    ("rows", "inner", "cols"),
    ("batch_size", "in_features", "out_features"),
)
_BIAS_NAMES = ("bias", "offset", "beta")


def _matmul_compositions() -> list[Composition]:
    epilogues: list[tuple[PointOp, ...]] = [()] + [(e,) for e in chain_pool()]
    epilogues += [(unary_op("scale", s), unary_op(a)) for s in (2.0, 0.5) for a in _ACTS]
    out = []
    for ta in (False, True):
        for tb in (False, True):
            for bias in (False, True):
                for epi in epilogues:
                    parts = (["tA"] if ta else []) + (["tB"] if tb else []) + (["bias"] if bias else [])
                    key = "matmul:" + ">".join(["mm", *parts, *(e.name for e in epi)])
                    plain = not epi and not bias
                    length = 1 + bias + len(epi)
                    out.append(
                        Composition("matmul", key, 1 if plain else 2, plain, (ta, tb, bias, epi), length)
                    )
    return out


def _mm_dims(rng: random.Random, timed: bool) -> tuple[int, int, int]:
    """(M, K, N): small and odd, or timed (every dim >= 1024, 2^32 .. 2^34 multiply-adds, inputs
    <= TIMED_MAX_BYTES)."""
    if not timed:
        return rng.choice(_MM_M), rng.choice(_MM_K), rng.choice(_MM_N)
    while True:
        m, k, n = (rng.choice(_MM_TIMED) for _ in range(3))
        if 1 << 32 <= m * k * n <= 1 << 34 and 4 * (m * k + k * n + n) <= TIMED_MAX_BYTES:
            return m, k, n


def _matmul_build(
    comp: Composition, rng: random.Random, timed: bool, naming: str
) -> tuple[ProblemSpec, Kernel]:
    ta, tb, bias, epi = comp.parts
    a, b = rng.choice(_MM_NAMES)
    c = rng.choice(_BIAS_NAMES)
    m, k, n = rng.choice(_MM_SIZES)
    sizes = tuple((name, str(v)) for name, v in zip((m, k, n), _mm_dims(rng, timed), strict=True))
    t_form = rng.choice(("{x}.T", "{x}.t()", "{x}.transpose(0, 1)"))
    left = t_form.format(x=a) if ta else a
    right = t_form.format(x=b) if tb else b
    core = rng.choice(("torch.matmul({l}, {r})", "{l} @ {r}", "torch.mm({l}, {r})")).format(l=left, r=right)
    expr = f"{core} + {c}" if bias else core
    core_note = expr
    temp = rng.choice(("y", "out", "h", "z"))
    lines: list[str] = []
    if epi and rng.random() < 0.4:
        lines, expr = [f"{temp} = {expr}"], temp
    more, expr, notes = apply_ops(epi, expr, rng, temp)
    body = _finish(lines + more, expr)
    name = "_".join(["matmul", *(["tA"] if ta else []), *(["tB"] if tb else []), *(["bias"] if bias else [])])
    name = "_".join([name, *(e.name for e in epi)])
    ident = answer_name(comp.family, name, naming)
    what = "matrix multiplication" + (" of A transposed" if ta else "") + (" by B transposed" if tb else "")
    title = what + (" plus a bias" if bias else "") + "".join(f", then {e.title}" for e in epi)
    inputs = [
        (a, f"torch.randn({k}, {m})" if ta else f"torch.randn({m}, {k})"),
        (b, f"torch.randn({n}, {k})" if tb else f"torch.randn({k}, {n})"),
    ] + ([(c, f"torch.randn({n})")] if bias else [])
    names = tuple(v for v, _ in inputs)
    spec = ProblemSpec(
        "matmul",
        name,
        comp.key,
        comp.level,
        title,
        f"Computes a {title}.",
        names,
        body,
        sizes,
        tuple(inputs),
        uses_f=_uses_f(" ".join(body)),
        ident=ident,
        style=_style(rng),
        shape_doc=f"({m}, {k})",
    )
    return spec, kernels.matmul_epilogue(ident, bias, epi, names, ta, tb, notes, core_note)


# --- losses ----------------------------------------------------------------------------------------------
_LOSSES = (
    ("mse", None),
    ("l1", None),
    ("huber", 1.0),
    ("huber", 0.5),
    ("huber", 2.0),
    ("smooth_l1", 1.0),
    ("smooth_l1", 0.5),
    ("hinge", None),
    ("sq_hinge", None),
    ("bce_logits", None),
    ("log_cosh", None),
)
_LOSS_NAMES = (
    ("predictions", "targets"),
    ("pred", "target"),
    ("input", "target"),
    ("y_pred", "y_true"),
    ("output", "label"),
)
# Other spellings of a loss (`{p}`, `{t}`, `{r}` the reduction).
_LOSS_SPELL = {
    "mse_loss": (
        "torch.{r}(({p} - {t}) ** 2)",
        "(({p} - {t}) ** 2).{r}()",
        "torch.{r}(torch.square({p} - {t}))",
    ),
    "l1_loss": ("torch.{r}(torch.abs({p} - {t}))", "({p} - {t}).abs().{r}()"),
    "hinge_loss": ("torch.{r}(torch.relu(1 - {p} * {t}))",),
}


def _loss_compositions() -> list[Composition]:
    out = []
    for kind, value in _LOSSES:
        loss = loss_op(kind, value)
        for r in ("mean", "sum"):
            protected = r == "mean" and value in (None, 1.0) and kind in ("mse", "l1", "huber")
            out.append(
                Composition("loss", f"loss:{loss.name}>{r}", 1 if r == "mean" else 2, protected, (loss, r))
            )
    return out


def _loss_build(
    comp: Composition, rng: random.Random, timed: bool, naming: str
) -> tuple[ProblemSpec, Kernel]:
    loss, r = comp.parts
    p, t = rng.choice(_LOSS_NAMES)
    shape = draw_shape(rng, rng.choice((1, 2, 2, 3)), avoid=(p, t), timed=timed, bytes_per_elem=8)
    args = shape.args
    targets = {
        "normal": _randn(shape, "float32", rng),
        "sign": f"torch.randint(0, 2, ({args},)).float() * 2 - 1",
        "binary": f"torch.randint(0, 2, ({args},)).float()",
    }[loss.targets]
    canonical = loss.python.format(r=r).replace("predictions", "{p}").replace("targets", "{t}")
    forms = (canonical, *_LOSS_SPELL.get(loss.name, ()))
    if r == "mean" and 'reduction="mean"' in canonical:
        forms += (canonical.replace(', reduction="mean"', ""),)
    expr = rng.choice(forms).format(p=p, t=t, r=r)
    if expr.startswith("F."):
        expr = rng.choice(("F.", "torch.nn.functional.")) + expr[2:]
    name = f"{loss.name}_{r}"
    ident = answer_name(comp.family, name, naming)
    title = f"{loss.title} ({r} over all elements)"
    spec = ProblemSpec(
        "loss",
        name,
        comp.key,
        comp.level,
        title,
        f"Computes the {title}.",
        (p, t),
        (f"return {expr}",),
        shape.sizes,
        ((p, _randn(shape, "float32", rng)), (t, targets)),
        uses_f=_uses_f(expr),
        ident=ident,
        style=_style(rng),
        shape_doc=shape.doc,
    )
    return spec, kernels.loss_reduce(ident, loss, r, (p, t), fast=_fast(rng), core_note=expr)


def twin_parts() -> dict[str, str]:
    """Parts of composition keys whose CUDA text another part has too, byte for byte -> the
    smallest name of their group: `hardtanh` -> `clamp1p0` (both `v = fminf(fmaxf(v, -1.0f),
    1.0f);`). Two compositions that differ only by such parts have the same answer in generic
    naming (`split.answer_class` keeps them on one side of the split)."""
    groups: dict[str, set[str]] = {}
    point = [*all_unary_ops(), *chain_pool(), unary_op("sqrt"), unary_op("scale", 0.1)]
    for op in point:
        groups.setdefault("point:" + op.cuda, set()).add(op.name)
    for bop in BINARY_OPS.values():
        groups.setdefault("binary:" + bop.cuda, set()).add(bop.name)
    for kind, value in _LOSSES:
        loss = loss_op(kind, value)
        groups.setdefault("loss:" + loss.cuda, set()).add(loss.name)
    return {n: min(g) for g in groups.values() for n in g if n != min(g)}


FAMILIES: dict[str, Family] = {
    "unary": Family("unary", _unary_compositions, _unary_build),
    "binary": Family("binary", _binary_compositions, _binary_build),
    "reduce": Family("reduce", _reduce_compositions, _reduce_build),
    "argreduce": Family("argreduce", _argreduce_compositions, _argreduce_build),
    "softmax": Family("softmax", _softmax_compositions, _softmax_build),
    "norm": Family("norm", _norm_compositions, _norm_build),
    "matmul": Family("matmul", _matmul_compositions, _matmul_build),
    "loss": Family("loss", _loss_compositions, _loss_build),
}
