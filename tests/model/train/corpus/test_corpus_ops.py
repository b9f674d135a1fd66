"""The op tables, checked without a GPU: every Python spelling of an op computes what its CUDA
statement computes, on sample values.

The CUDA statements (`ops.py`) are turned into Python by a small translation (fp32 literals lose
their `f`, `fmaxf` -> max, `a ? b : c` -> `b if a else c`, ...) and evaluated per element in
double precision; the spellings run through torch in float64. This is where a wrong constant or
a swapped branch would hide; the kernels' indexing is the GPU template check's job
(tests/model/train/corpus/test_corpus_gpu.py).
"""

from __future__ import annotations

import math
import re

import pytest
from cudice.model.train.corpus.families import chain_pool
from cudice.model.train.corpus.ops import BINARY_OPS, all_unary_ops, loss_op, unary_op

torch = pytest.importorskip("torch")
F = torch.nn.functional

CUDA_MATH = {
    "fmaxf": max,
    "fminf": min,
    "expf": math.exp,
    "tanhf": math.tanh,
    "erff": math.erf,
    "log1pf": math.log1p,
    "expm1f": math.expm1,
    "fabsf": abs,
    "sqrtf": math.sqrt,
    "logf": math.log,
    "INFINITY": math.inf,
}
SAMPLES = [-3.7, -2.0, -1.0, -0.6, -0.25, 0.0, 0.3, 0.5, 0.9, 1.0, 1.7, 2.5, 4.2]


def _ternaries(expr: str) -> str:
    """`c ? a : b` -> `(a if c else b)`, innermost first; a branch ends at an unmatched bracket."""
    while "?" in expr:
        q = expr.rindex("?")
        depth, start = 0, 0
        for i in range(q - 1, -1, -1):
            depth += expr[i] == ")"
            depth -= expr[i] == "("
            if depth < 0:
                start = i + 1
                break
        depth, colon, end = 0, -1, len(expr)
        for i in range(q + 1, len(expr)):
            depth += expr[i] == "("
            depth -= expr[i] == ")"
            if expr[i] == ":" and depth == 0 and colon < 0:
                colon = i
            if depth < 0 or (expr[i] in ";," and depth == 0):
                end = i
                break
        cond, yes, no = expr[start:q], expr[q + 1 : colon], expr[colon + 1 : end]
        expr = f"{expr[:start]}({yes.strip()} if {cond.strip()} else {no.strip()}){expr[end:]}"
    return expr


def run_cuda(statements: str, **values: float) -> dict[str, float]:
    """Execute CUDA statements on Python floats; returns the variables afterwards."""
    scope: dict[str, object] = dict(CUDA_MATH)
    scope.update(values)
    for line in statements.split(";"):
        line = re.sub(r"\b(\d+\.\d*(?:[eE][-+]?\d+)?)f\b", r"\1", line.strip())
        line = re.sub(r"^float\s+", "", line)
        if line:
            target, rhs = line.split("=", 1)
            exec(f"{target.strip()} = {_ternaries(rhs)}", scope)
    return scope  # type: ignore[return-value]


def _forms(op: object) -> list[str]:
    return [op.python, *op.spellings]  # type: ignore[attr-defined]


@pytest.mark.parametrize("op", [*all_unary_ops(), *chain_pool(), unary_op("sqrt")], ids=lambda o: o.name)
def test_every_spelling_of_a_unary_op_matches_its_cuda_statement(op: object) -> None:
    samples = [s for s in SAMPLES if s >= 0] if op.name == "sqrt" else SAMPLES  # type: ignore[attr-defined]
    x = torch.tensor(samples, dtype=torch.float64)
    want = torch.tensor([run_cuda(op.cuda, v=s)["v"] for s in samples], dtype=torch.float64)  # type: ignore[attr-defined]
    for form in _forms(op):
        got = eval(form.format(x="x"), {"torch": torch, "F": F, "x": x})
        assert torch.allclose(got.double(), want, rtol=1e-5, atol=1e-6), (form, got, want)


@pytest.mark.parametrize("op", list(BINARY_OPS.values()), ids=lambda o: o.name)
def test_every_spelling_of_a_combining_op_matches_its_cuda_expression(op: object) -> None:
    a = torch.tensor(SAMPLES, dtype=torch.float64)
    b, c = a.flip(0) * 0.7 + 0.1, a * 0.3 - 0.2
    want = torch.tensor(
        [
            run_cuda(f"v = {op.cuda}", x=p, y=q, z=r)["v"]
            for p, q, r in zip(a.tolist(), b.tolist(), c.tolist(), strict=True)
        ],  # type: ignore[attr-defined]
        dtype=torch.float64,
    )
    for form in _forms(op):
        got = eval(form.format(a="a", b="b", c="c"), {"torch": torch, "a": a, "b": b, "c": c})
        assert torch.allclose(got.double(), want, rtol=1e-6, atol=1e-9), (form, got, want)


LOSSES = [("mse", None), ("l1", None), ("huber", 0.5), ("huber", 2.0), ("smooth_l1", 0.5), ("hinge", None)]
LOSSES += [("sq_hinge", None), ("bce_logits", None), ("log_cosh", None), ("smooth_l1", 1.0)]


@pytest.mark.parametrize("kind,value", LOSSES)
def test_a_loss_statement_summed_matches_the_reference_sum(kind: str, value: float | None) -> None:
    loss = loss_op(kind, value)
    predictions = torch.tensor(SAMPLES, dtype=torch.float64)
    targets = {
        "normal": predictions.flip(0) * 0.8 + 0.3,
        "sign": torch.tensor([1.0, -1.0] * 6 + [1.0], dtype=torch.float64),
        "binary": torch.tensor([1.0, 0.0, 0.0] * 4 + [1.0], dtype=torch.float64),
    }[loss.targets]
    total = sum(
        run_cuda(loss.cuda, x=p, y=t)["v"]
        for p, t in zip(predictions.tolist(), targets.tolist(), strict=True)
    )
    for r, want in (("sum", total), ("mean", total / len(SAMPLES))):
        got = eval(
            loss.python.format(r=r), {"torch": torch, "F": F, "predictions": predictions, "targets": targets}
        )
        assert float(got) == pytest.approx(want, rel=1e-6), (loss.name, r)


def _warp_step_and_identity(helper: str) -> tuple[str, float]:
    """The shuffle step `v = f(v, __shfl_down_sync(..., v, o))` as Python on `v` and `w` (the
    shuffled value), and the value warp 0 reads past the last warp's slot."""
    step = re.search(r"for \(int o = 16; o > 0; o >>= 1\) v = (.+);", helper)
    ident = re.search(r"sh\[lane\] : (.+);", helper)
    assert step and ident
    expr = step.group(1).replace("__shfl_down_sync(0xffffffffu, v, o)", "w")
    value = run_cuda(f"v = {ident.group(1)}")["v"]
    return expr, value  # type: ignore[return-value]


def _emulate_block(helper: str, values: list[float], block: int = 256) -> float:
    """Thread 0's result of the generated `block_*` for one value per thread: shuffles within
    each warp of 32 (a lane past the warp's end reads its own value), one slot per warp, then
    warp 0 folds the slots (the identity past the last one)."""
    expr, identity = _warp_step_and_identity(helper)

    def warp(vals: list[float]) -> float:
        vals = list(vals)
        o = 16
        while o > 0:
            vals = [
                eval(expr, dict(CUDA_MATH), {"v": vals[i], "w": vals[i + o] if i + o < 32 else vals[i]})
                for i in range(32)
            ]
            o >>= 1
        return vals[0]

    slots = [warp(values[w * 32 : (w + 1) * 32]) for w in range(block // 32)]
    return warp([slots[i] if i < len(slots) else identity for i in range(32)])


@pytest.mark.parametrize("fn,reduce", [("sum", sum), ("max", max), ("min", min)])
def test_the_warp_shuffle_block_reductions_equal_the_plain_ones(fn: str, reduce: object) -> None:
    from cudice.model.train.corpus import kernels

    helper = {"sum": kernels._WARP_SUM, "max": kernels._WARP_MAX, "min": kernels._WARP_MIN}[fn]
    assert f"__device__ float block_{fn}(float v, float* sh)" in helper  # the plain helper's name
    for block in (256, 64, 32):
        values = [math.sin(i * 1.7) * 3 + (i % 7) for i in range(block)]
        want = reduce(values)  # type: ignore[operator]
        assert _emulate_block(helper, values, block) == pytest.approx(want, rel=1e-12, abs=1e-12)


def test_the_float4_path_applies_the_same_op_to_each_lane_as_the_scalar_loop() -> None:
    from cudice.model.train.corpus.kernels import pointwise

    op = BINARY_OPS["mul_add"]
    k = pointwise("f", (unary_op("relu"),), ("a", "b", "c"), combine=op, fast=True)
    for lane in "xyzw":
        assert f"r.{lane} = f_op(a0.{lane}, a1.{lane}, a2.{lane});" in k.source
    assert "out[i] = static_cast<scalar_t>(f_op(static_cast<float>(in0[i]), " in k.source
    fn = re.search(r"float f_op\(float x, float y, float z\) \{\n(.*?)return v;", k.source, re.S)
    assert fn is not None
    got = run_cuda(fn.group(1).replace("\n", ""), x=-1.5, y=2.0, z=0.25)["v"]
    assert got == max(run_cuda(f"v = {op.cuda}", x=-1.5, y=2.0, z=0.25)["v"], 0.0)
    guard = re.search(r"if \((.*?)\) \{\n\s+int64_t n4 = n / 4;", k.source)
    assert guard is not None
    for need in ("a_c.scalar_type() == torch::kFloat32", "c_c.scalar_type() == torch::kFloat32"):
        assert need in guard.group(1)
    for need in ("n % 4 == 0", "aligned16(a_c.data_ptr())", "aligned16(c_c.data_ptr())", "aligned16(out"):
        assert need in guard.group(1)
