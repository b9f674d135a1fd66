"""The taint rules of `static/taint.py`: torch-derived values called in forward code, reflection,
and classes deriving from `nn` layers — and the glue next to them that must stay allowed."""

from __future__ import annotations

import textwrap

import pytest
from cudice.verifier.config import VerifyConfig
from cudice.verifier.source.result import Diagnostic, Severity
from cudice.verifier.static.checks import check_source

_HEADER = '''
import functools
import operator
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
__global__ void k(const float* x, float* y, int n) { }
void run(torch::Tensor x, torch::Tensor y) {
    k<<<(x.numel() + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
}
"""
ext = load_inline(name="t", cpp_sources="void run(torch::Tensor x, torch::Tensor y);",
                  cuda_sources=src, functions=["run"])


class Model(nn.Module):
    def forward(self, x):
        return x


def get_inputs():
    return [torch.randn(4, 4)]
'''


def _module(init: str, forward: str, prelude: str = "", base: str = "nn.Module") -> str:
    init_body = textwrap.indent(textwrap.dedent(init).strip() or "pass", " " * 8)
    fwd_body = textwrap.indent(textwrap.dedent(forward).strip(), " " * 8)
    return (
        _HEADER
        + textwrap.dedent(prelude)
        + f"""

class ModelNew({base}):
    def __init__(self):
        super().__init__()
{init_body}

    def forward(self, x):
        y = torch.empty_like(x)
        ext.run(x, y)
{fwd_body}
"""
    )


def _check(text: str, policy: str = "default") -> list[Diagnostic]:
    return check_source(text, "cand.py", VerifyConfig(static_policy=policy))


def _errors(diags: list[Diagnostic]) -> list[Diagnostic]:
    return [d for d in diags if d.severity is Severity.ERROR]


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


# (init, forward, prelude, base, code, the line the finding must be on)
VIOLATIONS = {
    "type(x).relu": ("", "return type(x).relu(x)", "", "nn.Module", "static.torch_op_in_forward", "type(x)"),
    "type(x).__add__": (
        "",
        "return type(x).__add__(x, y)",
        "",
        "nn.Module",
        "static.torch_op_in_forward",
        "__add__",
    ),
    "x.__class__ via a local": (
        "",
        "T = x.__class__\nf = T.tanh\nreturn f(y)",
        "",
        "nn.Module",
        "static.torch_op_in_forward",
        "return f(y)",
    ),
    "x.__getattribute__": (
        "",
        'return x.__getattribute__("relu")()',
        "",
        "nn.Module",
        "static.dynamic_code",
        "__getattribute__",
    ),
    "object.__getattribute__(torch)": (
        "",
        'return object.__getattribute__(torch, "relu")(x)',
        "",
        "nn.Module",
        "static.dynamic_code",
        "object.__getattribute__",
    ),
    "vars(torch)": (
        "",
        'return vars(torch)["relu"](x)',
        "",
        "nn.Module",
        "static.dynamic_code",
        "vars(torch)",
    ),
    "torch.__dict__": (
        "",
        'return torch.__dict__["relu"](x)',
        "",
        "nn.Module",
        "static.dynamic_code",
        "__dict__",
    ),
    "methodcaller": (
        "",
        'return operator.methodcaller("relu")(x)',
        "",
        "nn.Module",
        "static.dynamic_code",
        "methodcaller",
    ),
    "partial(getattr)": (
        "",
        'g = functools.partial(getattr, x)\nreturn g("relu")()',
        "",
        "nn.Module",
        "static.dynamic_code",
        "functools.partial",
    ),
    "getattr with a computed name": (
        "",
        'name = "re" + "lu"\nreturn getattr(x, name)()',
        "",
        "nn.Module",
        "static.dynamic_code",
        "getattr(x, name)",
    ),
    "layer.forward": (
        "self.act = nn.ReLU()",
        "return self.act.forward(x)",
        "",
        "nn.Module",
        "static.torch_op_in_forward",
        "self.act.forward",
    ),
    "layer.__call__ through a local": (
        "self.act = nn.ReLU()",
        "m = self.act\nf = m.__call__\nreturn f(x)",
        "",
        "nn.Module",
        "static.torch_op_in_forward",
        "return f(x)",
    ),
    "_modules table": (
        "self.act = nn.ReLU()",
        'return self._modules["act"](x)',
        "",
        "nn.Module",
        "static.torch_op_in_forward",
        "_modules",
    ),
    "children()": (
        "self.act = nn.ReLU()",
        "return next(iter(self.children()))(x)",
        "",
        "nn.Module",
        "static.torch_op_in_forward",
        "children",
    ),
    "get_submodule": (
        "self.act = nn.ReLU()",
        'return self.get_submodule("act")(x)',
        "",
        "nn.Module",
        "static.torch_op_in_forward",
        "get_submodule",
    ),
    "modules() loop": (
        "self.act = nn.ReLU()",
        "for m in self.modules():\n    if m is not self:\n        x = m(x)\nreturn x",
        "",
        "nn.Module",
        "static.torch_op_in_forward",
        "x = m(x)",
    ),
    "named_children() loop": (
        "self.act = nn.ReLU()",
        "for _, m in self.named_children():\n    x = m(x)\nreturn x",
        "",
        "nn.Module",
        "static.torch_op_in_forward",
        "x = m(x)",
    ),
    "Sequential from an appended list": (
        "layers = []\nlayers.append(nn.ReLU())\nself.seq = nn.Sequential(*layers)",
        "return self.seq(x)",
        "",
        "nn.Module",
        "static.torch_op_in_forward",
        "self.seq(x)",
    ),
    "dict filled by subscript": (
        'table = {}\ntable["a"] = nn.ReLU()\nself.table = table',
        'return self.table["a"](x)',
        "",
        "nn.Module",
        "static.torch_op_in_forward",
        'self.table["a"](x)',
    ),
    "list attribute appended": (
        "self.ops = []\nself.ops.append(nn.GELU())",
        "return self.ops[0](x)",
        "",
        "nn.Module",
        "static.torch_op_in_forward",
        "self.ops[0]",
    ),
    "tuple attribute": (
        "self.ops = (nn.Tanh(),)",
        "return self.ops[0](x)",
        "",
        "nn.Module",
        "static.torch_op_in_forward",
        "self.ops[0]",
    ),
    "layer passed to a helper": (
        "self.act = nn.ReLU()",
        "return apply(self.act, x)",
        "def apply(f, v):\n    return f(v)\n",
        "nn.Module",
        "static.torch_op_in_forward",
        "return f(v)",
    ),
    "nn layer base, super().forward": (
        "",
        "return super().forward(x)",
        "",
        "nn.ReLU",
        "static.torch_op_in_forward",
        "super().forward",
    ),
    "nn layer base, inherited internals": (
        "",
        "return self._conv_forward(x, self.weight, self.bias)",
        "",
        "nn.Conv2d",
        "static.torch_op_in_forward",
        "_conv_forward",
    ),
    "helper layer held without forward": (
        "self.h = _Act()",
        "return self.h(x)",
        "class _Act(nn.Tanh):\n    pass\n",
        "nn.Module",
        "static.torch_op_in_forward",
        "self.h(x)",
    ),
    # a container built by a call keeps what its arguments and keywords hold
    "dict(act=...) keyword": (
        "self.t = dict(act=torch.relu)",
        "return self.t.get('act')(x)",
        "",
        "nn.Module",
        "static.torch_op_in_forward",
        "self.t.get",
    ),
    "namespace built by a library call": (
        "self.ns = functools.partial(dict, act=nn.functional.relu)()",
        "return self.ns['act'](x)",
        "",
        "nn.Module",
        "static.torch_op_in_forward",
        "self.ns[",
    ),
    "types.SimpleNamespace": (
        "self.ns = types.SimpleNamespace(act=nn.functional.relu)",
        "return self.ns.act(x)",
        "import types\n",
        "nn.Module",
        "static.torch_op_in_forward",
        "self.ns.act",
    ),
    "layer stored into a held object's attribute": (
        "self.h = _H()\nself.h.f = nn.ReLU()",
        "return self.h.f(x)",
        "class _H:\n    pass\n",
        "nn.Module",
        "static.torch_op_in_forward",
        "self.h.f(x)",
    ),
    "any outside call holding a torch function": (
        "self.ops = collections.OrderedDict(act=torch.relu)",
        "return self.ops['act'](x)",
        "import collections\n",
        "nn.Module",
        "static.torch_op_in_forward",
        "self.ops[",
    ),
}


@pytest.mark.parametrize("name", list(VIOLATIONS))
def test_torch_derived_values_and_reflection_are_violations(name: str) -> None:
    init, forward, prelude, base, code, needle = VIOLATIONS[name]
    text = _module(init, forward, prelude, base)
    errors = _errors(_check(text))
    line = _line_of(text, needle)
    assert any(d.code == code and d.location is not None and d.location.line == line for d in errors), [
        (d.code, d.location.line if d.location else None, d.message) for d in errors
    ]


def test_class_deriving_from_a_layer_without_forward_is_a_violation_on_the_class() -> None:
    text = _HEADER + textwrap.dedent(
        """
        class _Base(nn.ReLU):
            def launch(self, x):
                y = torch.empty_like(x)
                ext.run(x, y)
                return y


        class ModelNew(_Base):
            def __call__(self, x):
                self.launch(x)
                return super().__call__(x)
        """
    )
    errors = [d for d in _errors(_check(text)) if d.code == "static.torch_op_in_forward"]
    line = _line_of(text, "class ModelNew(_Base)")
    found = [d for d in errors if d.location is not None and d.location.line == line]
    assert found, [(d.location.line if d.location else None, d.message) for d in errors]
    assert "torch.nn.ReLU" in found[0].message and "define `forward`" in found[0].message


def test_message_names_the_construct_the_line_and_the_fix() -> None:
    text = _module("self.act = nn.ReLU()", "return self.act.forward(x)")
    line = _line_of(text, "self.act.forward")
    (d,) = [d for d in _errors(_check(text)) if d.location is not None and d.location.line == line]
    assert "`self.act.forward(...)`" in d.message and f"(line {line})" in d.message
    assert "Call your own kernel" in d.message


def test_reflection_message_says_what_to_do() -> None:
    text = _module("", 'return x.__getattribute__("relu")()')
    (d,) = [d for d in _errors(_check(text)) if d.code == "static.dynamic_code"]
    assert "__getattribute__" in d.message and "call your own kernel" in d.message


def test_lenient_policy_warns_on_torch_derived_calls() -> None:
    diags = _check(_module("", "return type(x).relu(x)"), "lenient")
    hits = [d for d in diags if d.code == "static.torch_op_in_forward"]
    assert hits and all(d.severity is Severity.WARNING for d in hits)


HONEST = {
    "layer held for its weights": (
        "self.linear = nn.Linear(4, 4)",
        "w = self.linear.weight.t().contiguous()\n"
        "assert w.size(0) == self.linear.weight.shape[1] and self.linear.bias is not None\n"
        "return y",
        "",
        "nn.Module",
    ),
    "own parameters, buffers and device plumbing": (
        'self.weight = nn.Parameter(torch.randn(4))\nself.register_buffer("mask", torch.zeros(4))',
        "s = torch.cuda.current_stream()\n"
        "assert s is not None and x.dtype == torch.float32 and self.weight.numel() == self.mask.numel()\n"
        "return y.view(x.size(0), -1)",
        "",
        "nn.Module",
    ),
    "ModuleList of the file's own modules": (
        "self.blocks = nn.ModuleList([Block() for _ in range(2)])\n"
        "self.seq = nn.Sequential(Block(), Block())",
        "for b in self.blocks:\n    y = b(y)\nreturn self.seq(y)",
        "class Block(nn.Module):\n    def forward(self, v):\n"
        "        out = torch.empty_like(v)\n        ext.run(v.contiguous(), out)\n        return out\n",
        "nn.Module",
    ),
    "modules() walked for checks only": (
        "self.linear = nn.Linear(4, 4)",
        "for m in self.modules():\n"
        "    if isinstance(m, nn.Linear):\n        assert m.weight.dim() == 2\nreturn y",
        "",
        "nn.Module",
    ),
    "type(self) and x.__class__ read, not called": (
        "",
        "assert type(self).__name__ == 'ModelNew' and x.__class__ is torch.Tensor\nreturn y",
        "",
        "nn.Module",
    ),
    "literal getattr of the extension": ("", 'f = getattr(ext, "run")\nf(x, y)\nreturn y', "", "nn.Module"),
    "nn layer base with its own forward": (
        "",
        "assert self.weight.size(0) == self.out_features and self.bias is not None\nreturn y",
        "",
        "nn.Linear",
    ),
    "helper deriving from a layer, held for its weights": (
        "self.lin = _Lin(4, 4)",
        "assert self.lin.weight.is_contiguous() and self.lin.bias is not None\nreturn y",
        "class _Lin(nn.Linear):\n    def fan_in(self):\n        return self.in_features\n",
        "nn.Module",
    ),
    "in-file nn.Module base reached through super()": (
        "",
        "return super().forward(y)",
        "class Base(nn.Module):\n    def forward(self, v):\n"
        "        out = torch.empty_like(v)\n        ext.run(v, out)\n        return out\n",
        "Base",
    ),
}


@pytest.mark.parametrize("name", list(HONEST))
def test_glue_next_to_the_taint_rules_stays_clean(name: str) -> None:
    init, forward, prelude, base = HONEST[name]
    if base == "nn.Linear":
        text = _module(init, forward, prelude, base).replace("super().__init__()", "super().__init__(4, 4)")
    else:
        text = _module(init, forward, prelude, base)
    diags = _check(text)
    assert not diags, [(d.code, d.location.line if d.location else None, d.message) for d in diags]


def test_a_modulelist_of_own_modules_still_has_their_forward_judged() -> None:
    prelude = "class Block(nn.Module):\n    def forward(self, v):\n        return torch.relu(v)\n"
    text = _module(
        "self.blocks = nn.ModuleList([Block()])", "for b in self.blocks:\n    y = b(y)\nreturn y", prelude
    )
    line = _line_of(text, "return torch.relu(v)")
    assert any(
        d.code == "static.torch_op_in_forward" and d.location is not None and d.location.line == line
        for d in _errors(_check(text))
    )


def test_a_modulelist_mixing_torch_layers_stays_a_torch_container() -> None:
    prelude = "class Block(nn.Module):\n    def forward(self, v):\n        return v\n"
    text = _module(
        "self.blocks = nn.ModuleList([Block(), nn.ReLU()])",
        "for b in self.blocks:\n    y = b(y)\nreturn y",
        prelude,
    )
    assert any(d.code == "static.torch_op_in_forward" for d in _errors(_check(text)))


def test_a_layer_handed_to_map_is_a_call_of_it() -> None:
    text = _module("self.act = nn.ReLU()", "return list(map(self.act, [x]))[0]")
    line = _line_of(text, "map(self.act")
    assert any(
        d.code == "static.torch_op_in_forward" and d.location is not None and d.location.line == line
        for d in _errors(_check(text))
    )


def test_a_layer_held_by_a_plain_helper_object_is_followed() -> None:
    prelude = "class Holder:\n    def __init__(self):\n        self.layer = nn.ReLU()\n"
    text = _module("self.h = Holder()", "return self.h.layer(x)", prelude)
    line = _line_of(text, "self.h.layer(x)")
    assert any(
        d.code == "static.torch_op_in_forward" and d.location is not None and d.location.line == line
        for d in _errors(_check(text))
    )


@pytest.mark.parametrize(
    ("forward", "flagged"),
    [
        ("z = torch.Tensor.contiguous(x)\nreturn y", False),  # x.contiguous(): glue
        ("z = torch.Tensor.view(y, -1)\nreturn z", False),
        ("return torch.Tensor.relu(y)", True),  # y.relu(): compute
        ("return torch._C.TensorBase.sigmoid(y)", True),
        ("return torch.Tensor.frobnicate(y)", True),  # neither glue nor known: flagged
    ],
)
def test_an_unbound_tensor_method_is_judged_as_the_method(forward: str, flagged: bool) -> None:
    text = _module("", forward)
    found = [d for d in _errors(_check(text)) if d.code == "static.torch_op_in_forward"]
    assert bool(found) is flagged, [d.message for d in found]
    if flagged:  # on the forward's line that spells the method
        line = _line_of(text, forward.splitlines()[-1])
        assert any(d.location is not None and d.location.line == line for d in found), found
