"""Each function reached from forward is judged with its own local names only, and a class's
`self.<attr>` kinds come from the class alone (static/forward.py, static/bindings.py): another
function's local kernel alias neither makes a plain call a launch (a false tensor finding, or a
hidden torch call) nor decides what a helper class stored, whatever order the functions come in."""

from __future__ import annotations

import pytest
from cudice.verifier.source.result import Diagnostic, Severity
from cudice.verifier.static.checks import check_source

_HEADER = '''
import math
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
__global__ void k(float* y, int n) { }
void run(torch::Tensor y) { k<<<1, 256>>>(y.data_ptr<float>(), y.numel()); }
"""
ext = load_inline(name="g", cpp_sources="void run(torch::Tensor y);", cuda_sources=src, functions=["run"])
'''


def _launcher(name: str) -> str:
    """A module-level `_launch(y)` that launches the kernel through its local alias `name`."""
    return f"\ndef _launch(y):\n    {name} = ext.run\n    {name}(y)\n    return y\n"


# a helper whose local `op` is the kernel; forward's own `op` is `math.ceil` (grid maths, no tensor)
_LAUNCHER = _launcher("op")
_FORWARD_OWN_OP = """
class ModelNew(nn.Module):
    def forward(self, x):
        op = math.ceil
        blocks = op(x.numel() / 256)
        assert blocks * 256 >= x.numel()
        return _launch(torch.empty_like(x))
"""

# a helper class stores what it is given; `ModelNew` gives it `math.ceil`, and a function judged
# before its method has a local `fn` that is the kernel
_TILER = """
class Tiler:
    def __init__(self, fn):
        self.fn = fn

    def blocks(self, n):
        return self.fn(n / 256) * 256
"""
_LAUNCHER_FN = _launcher("fn")
_MODEL_WITH_TILER = """
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.t = Tiler(math.ceil)

    def forward(self, x):
        assert self.t.blocks(x.numel()) >= x.numel()
        return _launch(torch.empty_like(x))
"""

# forward launches through the kernel; the last line is the cheat under test
_CHEAT_FORWARD = """
class ModelNew(nn.Module):
{init}
    def forward(self, x):
        y = torch.empty_like(x)
        ext.run(y)
        return {ret}
"""
_INIT = "    def __init__(self):\n        super().__init__()\n        {body}\n"


def _check(rest: str) -> list[Diagnostic]:
    return check_source(_HEADER + rest, "scopes.py")


def _described(diags: list[Diagnostic]) -> list[tuple[str, int | None, str]]:
    return [(d.code, d.location.line if d.location else None, d.message) for d in diags]


def _errors(diags: list[Diagnostic]) -> set[str]:
    return {d.code for d in diags if d.severity is Severity.ERROR}


def test_a_kernel_alias_of_a_helper_does_not_make_forwards_own_name_a_kernel() -> None:
    """`op = ext.run` in `_launch` (judged just before forward) once made forward's `op(...)` a
    launch, so `blocks` was a tensor and `blocks * 256 >= n` a false torch finding."""
    diags = _check(_LAUNCHER + _FORWARD_OWN_OP)
    assert diags == [], _described(diags)


@pytest.mark.parametrize("order", ["launcher first", "tiler first"])
def test_a_helper_classs_attribute_kinds_do_not_depend_on_who_asks_first(order: str) -> None:
    """`Tiler.fn` holds `math.ceil`: its kinds were read with the local kernel names of whichever
    function was judged first, so `self.fn(n / 256) * 256` became tensor arithmetic after `_launch`."""
    parts = [_LAUNCHER_FN, _TILER] if order == "launcher first" else [_TILER, _LAUNCHER_FN]
    diags = _check("".join(parts) + _MODEL_WITH_TILER)
    assert diags == [], _described(diags)


def test_a_helper_classs_torch_attribute_is_not_read_through_another_functions_kernel_alias() -> None:
    """`Post.act` holds the module-level `act = torch.relu`; read with `_launch`'s local `act = ext.run`
    it was a kernel, and `self.act(t)` in `Post.__call__` passed as a launch."""
    rest = (
        """
act = torch.relu
"""
        + _launcher("act")
        + """

class Post:
    def __init__(self):
        self.act = act

    def __call__(self, t):
        return self.act(t)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.post = Post()

    def forward(self, x):
        return self.post(_launch(torch.empty_like(x)))
"""
    )
    diags = _check(rest)
    assert "static.torch_op_in_forward" in _errors(diags), _described(diags)


def test_a_kernel_alias_local_to_init_counts_as_a_launch() -> None:
    """`op = ext.run; self.op = op` in `__init__`: `self.op(y)` in forward launches the kernel."""
    rest = _CHEAT_FORWARD.format(
        init=_INIT.format(body="op = ext.run\n        self.op = op"), ret="y"
    ).replace("ext.run(y)", "self.op(y)")
    diags = _check(rest)
    assert diags == [], _described(diags)


@pytest.mark.parametrize(
    ("before", "init", "ret"),
    [
        pytest.param("f = torch.relu\n", "", "f(y)", id="module-level alias"),
        pytest.param("", _INIT.format(body="self.f = torch.relu"), "self.f(y)", id="init attribute"),
        pytest.param(
            "", _INIT.format(body="f = torch.relu\n        self.f = f"), "self.f(y)", id="init local alias"
        ),
        pytest.param(
            "",
            _INIT.format(body="f = torch.relu\n        g = f\n        self.f = g"),
            "self.f(y)",
            id="init alias chain",
        ),
        pytest.param(
            "",
            _INIT.format(
                body="f = ext.run\n        if True:\n            f = torch.relu\n        self.f = f"
            ),
            "self.f(y)",
            id="init alias rebound to torch",
        ),
        pytest.param(
            "def _post(t):\n    f = torch.relu\n    return f(t)\n", "", "_post(y)", id="helper local alias"
        ),
        pytest.param(
            _LAUNCHER + "def _post(t):\n    op = torch.relu\n    return op(t)\n",
            "",
            "_launch(_post(y))",
            id="helper alias next to a launcher's",
        ),
    ],
)
def test_a_torch_alias_across_functions_is_still_caught(before: str, init: str, ret: str) -> None:
    diags = _check(before + _CHEAT_FORWARD.format(init=init, ret=ret))
    assert "static.torch_op_in_forward" in _errors(diags), _described(diags)


def test_a_torch_callable_under_the_name_of_a_launchers_alias_is_caught() -> None:
    """Forward's own `op` comes from a container of torch functions; `_launch`'s `op` is the kernel."""
    forward = _CHEAT_FORWARD.format(init="", ret="op(y)").replace(
        "        ext.run(y)\n", "        ext.run(y)\n        op = OPS[0]\n"
    )
    diags = _check("OPS = [torch.relu]\n" + _LAUNCHER + forward)
    assert "static.torch_op_in_forward" in _errors(diags), _described(diags)


# what a call of `ModelNew` can run beyond its methods (static/reach.py), and what replaces forward or
# the extension (static/protocol.py, static/forward.py `_extension_replaced`)
_REACHED = {
    "descriptor class attribute": (
        "class _D:\n    def __get__(self, obj, typ=None):\n        return lambda t: torch.clamp_min(t, 0)\n"
        "\nclass ModelNew(nn.Module):\n    act = _D()\n\n    def forward(self, x):\n"
        "        y = torch.empty_like(x)\n        ext.run(y)\n        return self.act(x)\n",
        {"static.torch_op_in_forward"},
    ),
    "singledispatchmethod registration": (
        "import functools\n\nclass ModelNew(nn.Module):\n    @functools.singledispatchmethod\n"
        "    def forward(self, x):\n        y = torch.empty_like(x)\n        ext.run(y)\n        return y\n\n"
        "    @forward.register\n    def _(self, x: torch.Tensor):\n        ext.run(x)\n"
        "        return torch.relu(x)\n",
        {"static.torch_op_in_forward"},
    ),
    "extension attribute replaced": (
        "def _impl(y):\n    y.copy_(torch.relu(y))\n\next.run = _impl\n\nclass ModelNew(nn.Module):\n"
        "    def forward(self, x):\n        y = torch.empty_like(x)\n        ext.run(y)\n        return y\n",
        {"static.monkey_patch", "static.torch_op_in_forward"},
    ),
    "extension name rebound": (
        "_real = ext\n\nclass _NS:\n    @staticmethod\n    def run(y):\n        _real.run(y)\n"
        "        y.copy_(torch.relu(y))\n\next = _NS()\n\nclass ModelNew(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.ext = ext\n\n"
        "    def forward(self, x):\n        y = torch.empty_like(x)\n"
        "        self.ext.run(y)\n        return y\n",
        {"static.monkey_patch", "static.torch_op_in_forward"},
    ),
    "extension attribute replaced through self": (
        "class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.ext = ext\n        self.ext.run = torch.relu_\n\n    def forward(self, x):\n"
        "        y = torch.empty_like(x)\n        self.ext.run(y)\n        return y\n",
        {"static.monkey_patch"},
    ),
    "extension rebound under global": (
        "def _swap():\n    global ext\n    ext = torch\n\nclass ModelNew(nn.Module):\n"
        "    def forward(self, x):\n        _swap()\n        y = torch.empty_like(x)\n"
        "        ext.run(y)\n        return y\n",
        {"static.monkey_patch"},
    ),
    "setattr on the extension": (
        "setattr(ext, 'run', torch.relu_)\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n"
        "        y = torch.empty_like(x)\n        ext.run(y)\n        return y\n",
        {"static.monkey_patch"},
    ),
    "descriptor stored on the class by the module": (
        "class _D:\n    def __get__(self, obj, typ=None):\n        return torch.relu\n"
        "\nclass ModelNew(nn.Module):\n    def forward(self, x):\n"
        "        y = torch.empty_like(x)\n        ext.run(y)\n        return self.act(x)\n"
        "\nsetattr(ModelNew, 'act', _D())\n",
        {"static.torch_op_in_forward"},
    ),
    "__dict__ merged in place": (
        "def _fwd(x):\n    return torch.relu(x)\n\nclass ModelNew(nn.Module):\n    def __init__(self):\n"
        "        super().__init__()\n        self.__dict__ |= {'forward': _fwd}\n\n"
        "    def forward(self, x):\n        y = torch.empty_like(x)\n        ext.run(y)\n        return y\n",
        {"static.monkey_patch"},
    ),
    "namespace passed to a call": (
        "def _fwd(x):\n    return torch.relu(x)\n\nclass ModelNew(nn.Module):\n    def __init__(self):\n"
        "        super().__init__()\n        dict.update(vars(self), forward=_fwd)\n\n"
        "    def forward(self, x):\n        y = torch.empty_like(x)\n        ext.run(y)\n        return y\n",
        {"static.monkey_patch"},
    ),
    "update_wrapper onto the module": (
        "import functools\n\nclass _NS:\n    pass\n\nclass ModelNew(nn.Module):\n    def __init__(self):\n"
        "        super().__init__()\n        functools.update_wrapper(self, _NS(), assigned=())\n\n"
        "    def forward(self, x):\n        y = torch.empty_like(x)\n        ext.run(y)\n        return y\n",
        {"static.monkey_patch"},
    ),
    "__setstate__ with forward": (
        "def _fwd(x):\n    return torch.relu(x)\n\nclass ModelNew(nn.Module):\n    def __init__(self):\n"
        "        super().__init__()\n        self.__setstate__({'forward': _fwd})\n\n"
        "    def forward(self, x):\n"
        "        y = torch.empty_like(x)\n        ext.run(y)\n        return y\n",
        {"static.monkey_patch"},
    ),
    "locals() in the class body": (
        "def _fwd(self, x):\n    return torch.relu(x)\n\nclass ModelNew(nn.Module):\n"
        "    def forward(self, x):\n        y = torch.empty_like(x)\n        ext.run(y)\n        return y\n\n"
        "    locals()['forward'] = _fwd\n",
        {"static.monkey_patch"},
    ),
}


@pytest.mark.parametrize("name", list(_REACHED))
def test_code_a_call_can_reach_or_that_replaces_forward_or_the_extension_is_judged(name: str) -> None:
    rest, codes = _REACHED[name]
    diags = _check(rest)
    assert codes <= _errors(diags), _described(diags)


def test_other_names_of_the_extension_a_lazy_loader_and_a_local_are_not_replacements() -> None:
    rest = (
        "ext2 = ext\n_lazy = None\n\ndef _get():\n    global _lazy\n    if _lazy is None:\n"
        "        _lazy = load_inline(name='h', cpp_sources='void run(torch::Tensor y);', cuda_sources=src,"
        " functions=['run'])\n    return _lazy\n\nclass ModelNew(nn.Module):\n    def __init__(self):\n"
        "        super().__init__()\n        self.ext = ext2\n\n    def forward(self, x):\n"
        "        y = torch.empty_like(x)\n        self.ext.run(y)\n        _get().run(y)\n"
        "        ext = self.ext\n        ext.run(y)\n        return y\n"
    )
    diags = _check(rest)
    assert "static.monkey_patch" not in _errors(diags), _described(diags)


def test_a_wrapper_function_built_with_functools_wraps_is_not_a_replacement() -> None:
    rest = (
        "import functools\n\ndef _timed(fn):\n    @functools.wraps(fn)\n    def inner(*a):\n"
        "        return fn(*a)\n\n    functools.update_wrapper(inner, fn)\n    return inner\n\n"
        "class ModelNew(nn.Module):\n    def forward(self, x):\n        y = torch.empty_like(x)\n"
        "        ext.run(y)\n        return y\n"
    )
    diags = _check(rest)
    assert "static.monkey_patch" not in _errors(diags), _described(diags)
