"""The operator tables of the corpus: each op's PyTorch spelling and its fp32 CUDA statement.

An elementwise op is a `PointOp`: the Python expression a reference `forward` writes (with `{x}`
for its operand) and the CUDA statement that applies it to the float register `v`. Constants are
baked into both spellings when the op is instantiated (`leaky_relu(0.1)` → `F.leaky_relu(x,
negative_slope=0.1)` and `v = v > 0.0f ? v : v * 0.1f;`), so a kernel never reads a parameter
the reference does not state. The CUDA formulas follow PyTorch's definitions
(https://pytorch.org/docs/stable/nn.functional.html): GELU is the erf form unless
`approximate="tanh"`, softplus uses PyTorch's default threshold of 20, ELU uses alpha 1.

Losses are `LossOp`s: the per-element term as a CUDA statement on `d = p - t` (or on `p`, `t`)
and the reference spelling for `reduction="mean"` or `"sum"`.

Not covered: ops whose CUDA needs more than one statement on `v` (e.g. a hardswish with a
lookup), broadcasting binary ops, integer dtypes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


def cuda_float(value: float) -> str:
    """A float literal CUDA reads as fp32: 0.1 → '0.1f', 2 → '2.0f'."""
    text = repr(float(value))
    return f"{text}f"


@dataclass(frozen=True, slots=True)
class PointOp:
    name: str  # C/Python identifier part, e.g. "leaky_relu"
    title: str  # words for docstrings, e.g. "LeakyReLU (slope 0.1)"
    python: str  # reference expression, `{x}` is the operand
    cuda: str  # CUDA statement on the float `v`
    needs_f: bool = False  # the reference uses `torch.nn.functional as F`
    spellings: tuple[str, ...] = ()  # other ways a reference writes the same op (`{x}` the operand)

    def spell(self, operand: str, choice: int) -> str:
        """The op applied to `operand` in spelling `choice` (taken modulo the number of spellings)."""
        forms = (self.python, *self.spellings)
        return forms[choice % len(forms)].format(x=operand)


def _scaled(name: str, value: float) -> str:
    return f"{name}{str(value).replace('.', 'p').replace('-', 'm')}"


def unary_op(kind: str, value: float | None = None) -> PointOp:
    """An instantiated unary op; `value` is the constant of parametrised ops."""
    table: dict[str, PointOp] = {
        "relu": PointOp("relu", "ReLU", "torch.relu({x})", "v = fmaxf(v, 0.0f);"),
        "sigmoid": PointOp("sigmoid", "sigmoid", "torch.sigmoid({x})", "v = 1.0f / (1.0f + expf(-v));"),
        "tanh": PointOp("tanh", "tanh", "torch.tanh({x})", "v = tanhf(v);"),
        "gelu": PointOp(
            "gelu", "GELU", "F.gelu({x})", "v = 0.5f * v * (1.0f + erff(v * 0.70710678f));", True
        ),
        "gelu_tanh": PointOp(
            "gelu_tanh",
            "GELU (tanh approximation)",
            'F.gelu({x}, approximate="tanh")',
            "v = 0.5f * v * (1.0f + tanhf(0.79788456f * (v + 0.044715f * v * v * v)));",
            True,
        ),
        "silu": PointOp("silu", "SiLU", "F.silu({x})", "v = v / (1.0f + expf(-v));", True),
        "elu": PointOp("elu", "ELU", "F.elu({x})", "v = v > 0.0f ? v : expm1f(v);", True),
        "softplus": PointOp(
            "softplus", "softplus", "F.softplus({x})", "v = v > 20.0f ? v : log1pf(expf(v));", True
        ),
        "softsign": PointOp("softsign", "softsign", "F.softsign({x})", "v = v / (1.0f + fabsf(v));", True),
        "hardsigmoid": PointOp(
            "hardsigmoid",
            "hard sigmoid",
            "F.hardsigmoid({x})",
            "v = fminf(fmaxf(v / 6.0f + 0.5f, 0.0f), 1.0f);",
            True,
        ),
        "abs": PointOp("abs", "absolute value", "torch.abs({x})", "v = fabsf(v);"),
        "square": PointOp("square", "square", "{x} * {x}", "v = v * v;"),
        "exp": PointOp("exp", "exponential", "torch.exp({x})", "v = expf(v);"),
        "sqrt": PointOp("sqrt", "square root", "torch.sqrt({x})", "v = sqrtf(v);"),
        "neg": PointOp("neg", "negation", "torch.neg({x})", "v = -v;"),
        "hardtanh": PointOp(
            "hardtanh", "hardtanh", "F.hardtanh({x})", "v = fminf(fmaxf(v, -1.0f), 1.0f);", True
        ),
        "relu6": PointOp("relu6", "ReLU6", "F.relu6({x})", "v = fminf(fmaxf(v, 0.0f), 6.0f);", True),
        "mish": PointOp(
            "mish", "Mish", "F.mish({x})", "v = v * tanhf(v > 20.0f ? v : log1pf(expf(v)));", True
        ),
        "selu": PointOp(
            "selu",
            "SELU",
            "F.selu({x})",
            "v = 1.0507009873554805f * (v > 0.0f ? v : 1.6732632423543772f * expm1f(v));",
            True,
        ),
    }
    if kind in table:
        if value is not None:
            raise ValueError(f"unary op {kind!r} takes no constant (got {value}); drop the value")
        return replace(table[kind], spellings=_SPELLINGS.get(kind, ()))
    if value is None:
        raise ValueError(f"unary op {kind!r} needs a constant; pass value=")
    if kind not in _VALUED_UNARY:
        raise ValueError(f"unknown unary op {kind!r}; known: {', '.join([*table, *_VALUED_UNARY])}")
    sign, magnitude = ("-", -value) if value < 0 else ("+", value)
    fields = {
        "v": value,
        "c": cuda_float(value),
        "sign": sign,
        "mag": magnitude,
        "cmag": cuda_float(magnitude),
    }
    title, python, cuda, needs_f = _VALUED_UNARY[kind]
    spellings = tuple(f.format(**fields) for f in _VALUED_SPELLINGS.get(kind, ()))
    if kind == "scale" and value != 0:
        spellings += (f"{{x}} / {1 / value!r}",) if (1 / value) == round(1 / value, 3) else ()
    return PointOp(
        _scaled(kind, value),
        title.format(**fields),
        python.format(**fields),
        cuda.format(**fields),
        needs_f,
        spellings,
    )


# Other spellings of the same op in references (PyTorch method, functional and expanded forms),
# so the model learns the op rather than one string. `torch.nn.functional` appears as `F.` only
# when the op needs it anyway; the full path is also used, which needs no extra import.
_SPELLINGS: dict[str, tuple[str, ...]] = {
    "relu": ("F.relu({x})", "{x}.relu()", "torch.clamp({x}, min=0)", "torch.nn.functional.relu({x})"),
    "sigmoid": ("{x}.sigmoid()", "torch.nn.functional.sigmoid({x})", "1 / (1 + torch.exp(-{x}))"),
    "tanh": ("{x}.tanh()", "torch.nn.functional.tanh({x})"),
    "gelu": ("torch.nn.functional.gelu({x})", 'F.gelu({x}, approximate="none")'),
    "gelu_tanh": ('torch.nn.functional.gelu({x}, approximate="tanh")',),
    "silu": ("{x} * torch.sigmoid({x})", "torch.nn.functional.silu({x})"),
    "elu": ("torch.nn.functional.elu({x})", "F.elu({x}, alpha=1.0)"),
    "softplus": ("torch.nn.functional.softplus({x})",),
    "softsign": ("{x} / (1 + torch.abs({x}))", "torch.nn.functional.softsign({x})"),
    "hardsigmoid": ("torch.nn.functional.hardsigmoid({x})",),
    "abs": ("{x}.abs()", "torch.absolute({x})"),
    "square": ("{x} ** 2", "torch.square({x})", "{x}.pow(2)"),
    "exp": ("{x}.exp()",),
    "sqrt": ("{x}.sqrt()", "{x} ** 0.5"),
    "neg": ("-{x}", "torch.neg({x})"),
    "hardtanh": ("torch.nn.functional.hardtanh({x})", "torch.clamp({x}, -1.0, 1.0)"),
    "relu6": ("torch.nn.functional.relu6({x})", "torch.clamp({x}, 0.0, 6.0)"),
    "mish": ("{x} * torch.tanh(F.softplus({x}))",),
    "selu": ("torch.selu({x})",),
}
_VALUED_SPELLINGS: dict[str, tuple[str, ...]] = {
    "leaky_relu": ("F.leaky_relu({{x}}, {v})", "torch.nn.functional.leaky_relu({{x}}, negative_slope={v})"),
    "scale": ("{v} * {{x}}", "torch.mul({{x}}, {v})"),
    "shift": ("torch.add({{x}}, {v})",),
    "clamp": ("{{x}}.clamp(-{v}, {v})", "torch.clamp({{x}}, -{v}, {v})"),
}

# Unary ops with a constant: title, reference expression (`{{x}}` stays the operand), CUDA
# statement and whether the reference uses F. `{v}` is the constant, `{c}` its fp32 literal,
# `{sign}`, `{mag}` and `{cmag}` its sign, magnitude and the magnitude's literal.
_VALUED_UNARY: dict[str, tuple[str, str, str, bool]] = {
    "leaky_relu": (
        "LeakyReLU (slope {v})",
        "F.leaky_relu({{x}}, negative_slope={v})",
        "v = v > 0.0f ? v : v * {c};",
        True,
    ),
    "scale": ("scaling by {v}", "{{x}} * {v}", "v = v * {c};", False),
    "shift": ("adding {v}", "{{x}} {sign} {mag}", "v = v {sign} {cmag};", False),
    "clamp": (
        "clamping to [-{v}, {v}]",
        "torch.clamp({{x}}, min=-{v}, max={v})",
        "v = fminf(fmaxf(v, -{c}), {c});",
        False,
    ),
}


UNARY_PLAIN = (
    "relu",
    "sigmoid",
    "tanh",
    "gelu",
    "gelu_tanh",
    "silu",
    "elu",
    "softplus",
    "softsign",
    "hardsigmoid",
    "abs",
    "square",
    "neg",
    "hardtanh",
    "relu6",
    "mish",
    "selu",
)
UNARY_VALUED = {
    "leaky_relu": (0.01, 0.1, 0.2),
    "scale": (0.5, 2.0, 3.0, 0.1),
    "shift": (1.0, -0.5, 0.5),
    "clamp": (0.5, 1.0, 2.0),
}
# Ops a chain may append (bounded outputs, so chains never overflow fp32).
CHAIN_OPS = (
    "relu",
    "sigmoid",
    "tanh",
    "gelu",
    "silu",
    "softsign",
    "hardsigmoid",
    "abs",
    "elu",
    "hardtanh",
    "relu6",
    "mish",
    "gelu_tanh",
)
# Constant ops a chain may append (name, value).
CHAIN_VALUED = (("scale", 2.0), ("scale", 0.5), ("shift", 1.0), ("clamp", 1.0), ("leaky_relu", 0.1))


def all_unary_ops() -> list[PointOp]:
    ops = [unary_op(k) for k in UNARY_PLAIN]
    ops += [unary_op(k, v) for k, vals in UNARY_VALUED.items() for v in vals]
    return ops


@dataclass(frozen=True, slots=True)
class BinaryOp:
    """An elementwise op of `arity` same-shape tensors (2 or 3): `{a}`, `{b}`, `{c}` in Python,
    the floats `x`, `y`, `z` in CUDA."""

    name: str
    title: str
    python: str  # `{a}`, `{b}` (and `{c}`) operands
    cuda: str  # float expression of `x`, `y` (and `z`)
    spellings: tuple[str, ...] = ()
    arity: int = 2

    def spell(self, operands: tuple[str, ...], choice: int) -> str:
        forms = (self.python, *self.spellings)
        return forms[choice % len(forms)].format(**dict(zip("abc", operands, strict=False)))


BINARY_OPS = {
    "add": BinaryOp("add", "sum", "{a} + {b}", "x + y", ("torch.add({a}, {b})",)),
    "sub": BinaryOp("sub", "difference", "{a} - {b}", "x - y", ("torch.sub({a}, {b})",)),
    "mul": BinaryOp("mul", "product", "{a} * {b}", "x * y", ("torch.mul({a}, {b})",)),
    "maximum": BinaryOp(
        "maximum", "elementwise maximum", "torch.maximum({a}, {b})", "fmaxf(x, y)", ("torch.max({a}, {b})",)
    ),
    "minimum": BinaryOp(
        "minimum", "elementwise minimum", "torch.minimum({a}, {b})", "fminf(x, y)", ("torch.min({a}, {b})",)
    ),
    "sqdiff": BinaryOp(
        "sqdiff", "squared difference", "({a} - {b}) ** 2", "(x - y) * (x - y)", ("torch.square({a} - {b})",)
    ),
    "avg": BinaryOp("avg", "average", "({a} + {b}) / 2", "(x + y) * 0.5f", ("0.5 * ({a} + {b})",)),
    "mul_add": BinaryOp(
        "mul_add",
        "product plus a third tensor",
        "{a} * {b} + {c}",
        "x * y + z",
        ("torch.addcmul({c}, {a}, {b})",),
        3,
    ),
    "add_mul": BinaryOp("add_mul", "sum times a third tensor", "({a} + {b}) * {c}", "(x + y) * z", (), 3),
    "add3": BinaryOp("add3", "sum of three tensors", "{a} + {b} + {c}", "x + y + z", (), 3),
}


@dataclass(frozen=True, slots=True)
class LossOp:
    name: str
    title: str
    python: str  # reference return expression with `{r}` for the reduction ("mean" | "sum")
    cuda: str  # CUDA statements ending with the element's loss in `v` (inputs `x` = p[i], `y` = t[i])
    targets: str = "normal"  # how get_inputs draws targets: "normal", "sign" (+-1) or "binary" (0/1)


# Losses of d = |x - y| with one float parameter c (default 1.0): name, title, keyword and the
# CUDA branches `small : large` of `v = d < c ? small : large`.
_PARAM_LOSSES = {
    "huber": ("huber_loss", "Huber loss", "delta", "0.5f * d * d : {c} * (d - 0.5f * {c})"),
    "smooth_l1": ("smooth_l1_loss", "smooth L1 loss", "beta", "0.5f * d * d / {c} : d - 0.5f * {c}"),
}


def loss_op(kind: str, value: float | None = None) -> LossOp:
    if kind == "mse":
        return LossOp(
            "mse_loss",
            "mean squared error",
            'F.mse_loss(predictions, targets, reduction="{r}")',
            "float d = x - y;\n        float v = d * d;",
        )
    if kind == "l1":
        return LossOp(
            "l1_loss",
            "L1 loss",
            'F.l1_loss(predictions, targets, reduction="{r}")',
            "float v = fabsf(x - y);",
        )
    if kind in _PARAM_LOSSES:
        name, title, keyword, branches = _PARAM_LOSSES[kind]
        param = 1.0 if value is None else value
        c = cuda_float(param)
        return LossOp(
            _scaled(name, param),
            f"{title} ({keyword} {param})",
            f'F.{name}(predictions, targets, reduction="{{r}}", {keyword}={param})',
            f"float d = fabsf(x - y);\n        float v = d < {c} ? {branches.format(c=c)};",
        )
    if kind == "hinge":
        return LossOp(
            "hinge_loss",
            "hinge loss",
            "torch.{r}(torch.clamp(1 - predictions * targets, min=0))",
            "float v = fmaxf(1.0f - x * y, 0.0f);",
            targets="sign",
        )
    if kind == "bce_logits":
        return LossOp(
            "bce_logits_loss",
            "binary cross-entropy with logits",
            'F.binary_cross_entropy_with_logits(predictions, targets, reduction="{r}")',
            "float v = fmaxf(x, 0.0f) - x * y + log1pf(expf(-fabsf(x)));",
            targets="binary",
        )
    if kind == "log_cosh":
        return LossOp(
            "log_cosh_loss",
            "log-cosh loss",
            "torch.{r}(torch.log(torch.cosh(predictions - targets)))",
            "float d = fabsf(x - y);\n        float v = d + log1pf(expf(-2.0f * d)) - 0.69314718f;",
        )
    if kind == "sq_hinge":
        return LossOp(
            "squared_hinge_loss",
            "squared hinge loss",
            "torch.{r}(torch.clamp(1 - predictions * targets, min=0) ** 2)",
            "float h = fmaxf(1.0f - x * y, 0.0f);\n        float v = h * h;",
            targets="sign",
        )
    raise ValueError(
        f"unknown loss {kind!r}; known: mse, l1, huber, smooth_l1, hinge, bce_logits, log_cosh, sq_hinge"
    )
