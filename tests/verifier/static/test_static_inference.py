"""Operators, `sum`/`max`/… and `operator.*` in forward-reachable code are judged by what their operands
provably are (static/forward.py `NonTensors`): a value is possibly a tensor unless it is built from
literals, metadata (`.numel()`, `.size()`, `.shape`, …), `len()`/`int()`, plain module constants,
`self.<attr>`s stored only plain values, parameters every call site passes plain values, and the
results of the file's own functions that return only plain values. Honest launch arithmetic stays
clean; every binding form that once hid a tensor (unpacking, `for`, `:=`, lambdas, helpers,
annotations, containers) is flagged."""

from __future__ import annotations

import pytest
from cudice.verifier.source.result import Diagnostic, Severity
from cudice.verifier.static.checks import check_source

_HEADER = '''
import functools
import itertools
import math
import numpy
import operator
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
__global__ void k(const float* x, float* y, int n) { }
void run(torch::Tensor x, torch::Tensor y, int64_t blocks) {
    k<<<blocks, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
}
"""
ext = load_inline(
    name="g", cpp_sources="void run(torch::Tensor x, torch::Tensor y, int64_t blocks);",
    cuda_sources=src, functions=["run"],
)
BLOCK = 256
'''

_MODEL = """
class ModelNew(nn.Module):
    def _act(self, t):
        return t * (t > 0)

    def __init__(self, eps=1e-5, dims=(1, 2)):
        super().__init__()
        self.eps = eps
        self.dims = dims
        self.scale = 2 * eps
        self.weight = nn.Parameter(torch.ones(4))

    def forward(self, x):
        y = torch.empty_like(x)
{body}
        return y
"""


def _check(body: str, prelude: str = "") -> list[Diagnostic]:
    lines = "".join(f"        {line}\n" for line in body.strip().splitlines())
    return check_source(_HEADER + prelude + _MODEL.format(body=lines.rstrip("\n")), "inference.py")


def _errors(diags: list[Diagnostic]) -> set[str]:
    return {d.code for d in diags if d.severity is Severity.ERROR}


HONEST: dict[str, tuple[str, str]] = {
    "numel launch maths": ("n = x.numel()\nblocks = (n + 255) // 256\next.run(x, y, blocks)", ""),
    "module constant": ("ext.run(x, y, (x.numel() + BLOCK - 1) // BLOCK)", ""),
    "init scalars": ("assert self.eps * 1.0 > 0 and len(self.dims) == 2\next.run(x, y, 1)", ""),
    "init arithmetic": ("assert self.scale < 1.0\next.run(x, y, 1)", ""),
    "shape maths": (
        "rows = x.shape[0] * x.shape[1]\nassert rows >= 0 and x.size(-1) > 0\next.run(x, y, rows)",
        "",
    ),
    "shape unpacking": ("b, c = x.shape[:2]\nfor d in x.shape:\n    assert d > 0\next.run(x, y, b * c)", ""),
    "metadata comparisons": (
        "assert x.dim() == 2 and x.stride(-1) == 1 and x.dtype == torch.float32\n"
        "assert x.shape == y.shape and x.device.type == 'cuda'\next.run(x, y, -(-x.numel() // 256))",
        "",
    ),
    "loop counter": ("total = 0\nfor i in range(x.dim()):\n    total += x.size(i)\next.run(x, y, total)", ""),
    "walrus on metadata": ("if (n := x.numel()) > 0:\n    ext.run(x, y, math.ceil(n / 256))", ""),
    "comprehension over shape": (
        "sizes = [s * 2 for s in x.shape]\next.run(x, y, max(sizes) + min(x.shape))",
        "",
    ),
    "helper called with plain values": (
        "ext.run(x, y, _cdiv(x.numel(), 256))",
        "\ndef _cdiv(a, b):\n    return (a + b - 1) // b\n",
    ),
    "helper returning a plain value": (
        "blocks = _grid(x)\next.run(x, y, blocks * 1)",
        "\ndef _grid(t):\n    n = t.numel()\n    return (n + 255) // 256\n",
    ),
    "enumerate counter": (
        "for i, t in enumerate([x, y]):\n    assert i < 2 and t.numel() > 0\next.run(x, y, 1)",
        "",
    ),
    "local lambda for launch maths": (
        "cdiv = lambda a, b: (a + b - 1) // b\next.run(x, y, cdiv(x.numel(), 256))",
        "",
    ),
    "lambda called in place": ("ext.run(x, y, (lambda n: (n + 255) // 256)(x.numel()))", ""),
    "closure over launch sizes": (
        "n = x.numel()\n\ndef grid():\n    return (n + 255) // 256\n\next.run(x, y, grid())",
        "",
    ),
    "numpy on shapes": ("ext.run(x, y, int(numpy.prod(x.shape)) // 256 + 1)", ""),
    "math.prod of a shape": ("ext.run(x, y, math.prod(x.shape) // 256 + 1)", ""),
    "max with a key over shapes": ("ext.run(x, y, max(x.shape, key=abs))", ""),
    "helper method named like an extension function": (
        "ext.run(x, y, _T().run(x.numel()))\nassert _T().run(4) > 0",
        "\nclass _T:\n    def run(self, n):\n        return (n + 255) // 256\n",
    ),
    "local alias of math": ("op = math.ceil\next.run(x, y, op(x.numel() / 256) * 1)", ""),
    "string formatting": ("msg = 'n=%d' % x.numel()\nassert x.numel() >= 0, msg\next.run(x, y, 1)", ""),
    "int of an item": ("k = int(x.numel())\next.run(x, y, k // 256 + 1)", ""),
    "torch.cuda queries": (
        "sms = torch.cuda.get_device_properties(x.device).multi_processor_count\next.run(x, y, sms * 4)",
        "",
    ),
}


@pytest.mark.parametrize("name", list(HONEST))
def test_honest_launch_arithmetic_stays_clean(name: str) -> None:
    body, prelude = HONEST[name]
    diags = _check(body, prelude)
    assert diags == [], [(d.code, d.location.line if d.location else None, d.message) for d in diags]


CHEATS: dict[str, tuple[str, str]] = {
    "tuple unpacking": ("t, z = x, 0\ny = t * (t > z)", ""),
    "for target": ("for t in (x,):\n    y = t * (t > 0)", ""),
    "walrus": ("if (t := x) is not None:\n    y = t * (t > 0)", ""),
    "lambda parameter": ("y = (lambda t: t * (t > 0))(x)", ""),
    "enumerate element": ("for i, t in enumerate([x]):\n    y = t * i", ""),
    "local lambda given a tensor": ("act = lambda t: t * (t > 0)\ny = act(x)", ""),
    "local lambda passed away": ("act = lambda t: t * 2\ny = list(map(act, [x.numel()]))", ""),
    "in-file class with a metadata name": (
        "y = _H().size(x) * 2",
        "\nclass _H:\n    def size(self, t):\n        return t\n",
    ),
    "closure over a tensor": ("def act():\n    return x * (x > 0)\n\ny = act()", ""),
    "list filled with a tensor": ("ks = [1]\nks.append(x)\ny = ks[1] * 2", ""),
    "container element stored": ("ks = [1]\nks[0] = x\ny = ks[0] * 2", ""),
    "helper called through getattr": (
        "n = self._act(x.numel())\ny = getattr(self, '_act')(x)",
        "",
    ),
    "helper called through a computed getattr": (
        "n = self._act(x.numel())\ny = getattr(self, '_' + 'act')(x)",
        "",
    ),
    "helper called through the class": (
        "n = self._act(x.numel())\ny = ModelNew._act(self, x)",
        "",
    ),
    "namedtuple field named like metadata": (
        "R = collections.namedtuple('R', 'shape')\ny = R(x).shape * 2",
        "\nimport collections\n",
    ),
    "comprehension variable": ("y = [t * (t > 0) for t in [x]][0]", ""),
    "unannotated helper": ("y = _act(x)", "\ndef _act(t):\n    return t * (t > 0)\n"),
    "helper annotated int": ("y = _act(x)", "\ndef _act(t: int):\n    return t * (t > 0)\n"),
    "list subscript": ("y = [x][0] * ([x][0] > 0)", ""),
    "operator starred": ("y = operator.mul(*(x, operator.gt(*(x, 0))))", ""),
    "sum over a generator": ("y = sum(c for c in x.unbind(0))", ""),
    "max over unbind": ("y = max(*x.unbind(0))", ""),
    "reduce with operator.add": ("y = functools.reduce(operator.add, x.unbind(0))", ""),
    "map with operator.mul": ("y = list(map(operator.mul, x.unbind(0), x.unbind(0)))[0]", ""),
    "operator fetched with getattr": ("y = getattr(operator, 'mul')(x, x)", ""),
    "operator fetched with getattr, passed": (
        "y = functools.reduce(getattr(operator, 'add'), x.unbind(0))",
        "",
    ),
    "builtin passed to map": ("y = list(map(abs, x.unbind(0)))[0]", ""),
    "math.prod over unbind": ("y = math.prod(x.unbind(0))", ""),
    "itertools.accumulate": ("y = list(itertools.accumulate(x.unbind(0)))[-1]", ""),
    "augmented assignment": ("y = x.clone()\ny += 1", ""),
    "call result": ("y = ext.run(x, y, 1) * 2", ""),
    "unary minus": ("y = -x", ""),
    "tensor attribute of init": ("y = self.weight * 2", ""),
    "plain attribute times a tensor": ("y = self.dims[0] * x", ""),
}


@pytest.mark.parametrize("name", list(CHEATS))
def test_operators_on_values_not_provably_plain_are_torch_ops(name: str) -> None:
    body, prelude = CHEATS[name]
    diags = _check("ext.run(x, y, 1)\n" + body, prelude)
    assert "static.torch_op_in_forward" in _errors(diags), [(d.code, d.message) for d in diags]


def test_forward_parameter_annotated_float_is_still_possibly_a_tensor() -> None:
    text = _HEADER + (
        "\nclass ModelNew(nn.Module):\n    def forward(self, x: float):\n        y = torch.empty_like(x)\n"
        "        ext.run(x, y, 1)\n        return x * (x > 0)\n"
    )
    assert "static.torch_op_in_forward" in _errors(check_source(text, "inference.py"))


def test_a_helper_called_with_a_tensor_anywhere_is_not_plain() -> None:
    """One call site passing a tensor makes the parameter possibly a tensor for all of them."""
    prelude = "\ndef _scale(v):\n    return v * 2\n"
    assert _check("ext.run(x, y, _scale(x.numel()))", prelude) == []
    diags = _check("ext.run(x, y, _scale(x.numel()))\ny = _scale(x)", prelude)
    assert "static.torch_op_in_forward" in _errors(diags)


def test_a_self_attribute_stored_a_tensor_anywhere_is_not_plain() -> None:
    text = _HEADER + (
        "\nclass ModelNew(nn.Module):\n    def __init__(self, eps):\n        super().__init__()\n"
        "        self.eps = eps\n        self.eps = torch.full((1,), eps)\n\n"
        "    def forward(self, x):\n        y = torch.empty_like(x)\n        ext.run(x, y, 1)\n"
        "        k = self.eps * 2\n        return y\n"
    )
    assert "static.torch_op_in_forward" in _errors(check_source(text, "inference.py"))


def test_the_message_says_how_launch_arithmetic_stays_recognisable() -> None:
    diags = _check("ext.run(x, y, 1)\nt, z = x, 0\ny = t * (t > z)")
    messages = [d.message for d in diags if d.code == "static.torch_op_in_forward"]
    assert messages and all("not provably a plain number" in m for m in messages), messages
    assert any("`.numel()`" in m for m in messages)


def test_a_closure_reads_its_enclosing_functions_names_not_a_module_constant() -> None:
    """`N` is a plain module constant, but the lambda stored in `__init__` closes over `__init__`'s
    own `N`, a tensor."""
    text = _HEADER + (
        "N = 4\n\nclass ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        N = torch.ones(4)\n        self.f = lambda: N * 2\n\n    def forward(self, x):\n"
        "        y = torch.empty_like(x)\n        ext.run(x, y, 1)\n        return self.f()\n"
    )
    assert "static.torch_op_in_forward" in _errors(check_source(text, "inference.py"))


def test_object_setattr_of_a_tensor_makes_the_attribute_not_plain() -> None:
    text = _HEADER + (
        "\nclass ModelNew(nn.Module):\n    def __init__(self, eps):\n        super().__init__()\n"
        "        self.eps = eps\n        object.__setattr__(self, 'eps', torch.full((1,), eps))\n\n"
        "    def forward(self, x):\n        y = torch.empty_like(x)\n        ext.run(x, y, 1)\n"
        "        k = self.eps * 2\n        return y\n"
    )
    assert "static.torch_op_in_forward" in _errors(check_source(text, "inference.py"))


def test_numpy_on_a_value_not_provably_plain_is_host_compute() -> None:
    diags = _check("h = torch.empty(x.shape)\nh.copy_(x)\na = numpy.asarray([h][0])\next.run(x, y, 1)")
    assert "static.host_compute" in _errors(diags), [(d.code, d.message) for d in diags]


def test_a_subclass_store_or_override_counts_for_a_base_method() -> None:
    """`Base.forward` reads `self.eps` and `self.scale()`; the subclass stores a tensor there and
    overrides `scale` to return one."""
    base = (
        "\nclass Base(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.eps = 1.0\n\n    def scale(self):\n        return 2\n\n    def forward(self, x):\n"
        "        y = torch.empty_like(x)\n        ext.run(x, y, 1)\n        k = {use}\n        return y\n"
    )
    for sub, use in [
        ("        self.eps = torch.ones(1)\n", "self.eps * 2"),
        ("\n    def scale(self):\n        return torch.ones(1)\n", "self.scale() * 2"),
    ]:
        text = (
            _HEADER
            + base.format(use=use)
            + ("\nclass ModelNew(Base):\n    def __init__(self):\n        super().__init__()\n" + sub)
        )
        assert "static.torch_op_in_forward" in _errors(check_source(text, "inference.py")), use
    clean = _HEADER + base.format(use="self.eps * self.scale()") + "\nclass ModelNew(Base):\n    pass\n"
    assert check_source(clean, "inference.py") == []


def test_a_module_constant_changed_by_a_function_is_not_plain() -> None:
    for change in ["global K\n    K = torch.ones(1)", "TABLE['k'] = torch.ones(1)"]:
        prelude = f"\nK = 2\nTABLE = {{'k': 1}}\n\ndef _set():\n    {change}\n"
        use = "K * 2" if "global" in change else "TABLE['k'] * 2"
        diags = _check(f"_set()\nk = {use}\next.run(x, y, 1)", prelude)
        assert "static.torch_op_in_forward" in _errors(diags), change
