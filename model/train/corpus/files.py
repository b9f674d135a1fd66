"""Render a problem as the two files KernelBench works with: the reference and the `ModelNew`.

`reference_file(spec)` writes the layout of `examples/relu.py` (module docstring, `Model` with a
one-line class docstring, module-level size constants, `get_inputs`, `get_init_inputs`), so the
bundled examples are in the training distribution. `solution_file(spec, kernel)` writes the
layout of `examples/relu_cuda.py`: one `load_inline` extension built at import time, a
`ModelNew` whose `forward` only calls the wrapper (the verifier's anti-cheat allows exactly
that), and no reference comment (the verifier is given the reference explicitly).

Not covered: problems with `get_init_inputs` arguments or parameters (every corpus `Model` is
stateless; its constants sit in `forward`).
"""

from __future__ import annotations

from dataclasses import dataclass

from cudice.model.train.corpus.kernels import Kernel

STYLES = ("cudice", "kernelbench", "bare")


@dataclass(frozen=True, slots=True)
class ProblemSpec:
    """Everything both files need; built by a family in `cudice.model.train.corpus.families`."""

    family: str
    name: str  # the composition in a word, e.g. "relu_sigmoid" (file names; `ident` if that is empty)
    composition: str  # the split key, e.g. "unary:relu>sigmoid"
    level: int  # 1 = one op, 2 = a composition (RL curriculum order)
    title: str  # module docstring words, e.g. "elementwise ReLU"
    summary: str  # class docstring, e.g. "Applies ReLU to the input."
    params: tuple[str, ...]  # forward's tensor arguments
    body: tuple[str, ...]  # forward's statements (the last one returns)
    sizes: tuple[tuple[str, str], ...]  # module-level constants (name, Python literal), in order
    inputs: tuple[tuple[str, str], ...]  # get_inputs: (variable, expression)
    extra_args: tuple[str, ...] = ()  # expressions passed to the wrapper after the tensors
    uses_f: bool = False  # the reference imports torch.nn.functional as F
    dtype: str = "float32"
    style: str = "cudice"  # one of STYLES: how the reference file is laid out
    init_args: tuple[tuple[str, str, str], ...] = ()  # Model.__init__: (attribute, type, module constant)
    shape_doc: str = ""  # the input's shape in words, e.g. "(batch_size, dim)"
    ident: str = ""  # stem of the answer's identifiers (families.answer_name); empty: `name`

    @property
    def answer_name(self) -> str:
        """The stem the answer's identifiers and `load_inline(name=...)` use."""
        return self.ident or self.name


def _imports(spec: ProblemSpec) -> str:
    return "import torch\nimport torch.nn as nn\n" + (
        "import torch.nn.functional as F\n" if spec.uses_f else ""
    )


def _inputs(spec: ProblemSpec) -> str:
    inputs = "".join(f"    {var} = {expr}\n" for var, expr in spec.inputs)
    returned = ", ".join(var for var, _ in spec.inputs)
    init = ", ".join(const for _, _, const in spec.init_args)
    return (
        f"def get_inputs():\n{inputs}    return [{returned}]\n\n\n"
        f"def get_init_inputs():\n    return [{init}]\n"
    )


def reference_file(spec: ProblemSpec) -> str:
    """The reference in `spec.style`: "cudice" (examples/relu.py's layout), "kernelbench" (multi-line
    docstrings with Args/Returns, `super(Model, self)`, constants in `__init__`) or "bare"."""
    if spec.style not in STYLES:
        raise ValueError(f"style={spec.style!r} must be one of {', '.join(STYLES)}")
    body = "".join(f"        {line}\n" for line in spec.body)
    sizes = "".join(f"{k} = {v}\n" for k, v in spec.sizes)
    typed = spec.style != "bare"
    params = ", ".join(f"{p}: torch.Tensor" if typed else p for p in spec.params)
    ret = " -> torch.Tensor" if typed else ""
    init_params = "".join(f", {a}: {t}" if typed else f", {a}" for a, t, _ in spec.init_args)
    stores = "".join(f"        self.{a} = {a}\n" for a, _, _ in spec.init_args)
    if spec.style == "cudice":
        return (
            f'"""KernelBench-format reference: {spec.title}."""\n\n{_imports(spec)}\n\n'
            "class Model(nn.Module):\n"
            f'    """{spec.summary}"""\n\n'
            f"    def __init__(self{init_params}):\n        super().__init__()\n{stores}\n"
            f"    def forward(self, {params}){ret}:\n{body}\n\n"
            f"{sizes}\n\n{_inputs(spec)}"
        )
    if spec.style == "bare":
        return (
            f"{_imports(spec)}\n\nclass Model(nn.Module):\n"
            f"    def __init__(self{init_params}):\n        super().__init__()\n{stores}\n"
            f"    def forward(self, {params}):\n{body}\n\n{sizes}\n\n{_inputs(spec)}"
        )
    arg_docs = "".join(
        f"            {p} (torch.Tensor): tensor of shape {spec.shape_doc or '(any)'}.\n" for p in spec.params
    )
    init_doc = (
        '        """\n        Args:\n'
        + "".join(
            f"            {a} ({t}): the {a.replace('_', ' ')} the model uses.\n"
            for a, t, _ in spec.init_args
        )
        + '        """\n'
        if spec.init_args
        else ""
    )
    return (
        f"{_imports(spec)}\nclass Model(nn.Module):\n"
        f'    """\n    {spec.summary}\n    """\n'
        f"    def __init__(self{init_params}):\n{init_doc}        super(Model, self).__init__()\n{stores}\n"
        f"    def forward(self, {params}){ret}:\n"
        f'        """\n        {spec.title[0].upper()}{spec.title[1:]}.\n\n        Args:\n{arg_docs}\n'
        '        Returns:\n            torch.Tensor: the result.\n        """\n'
        f"{body}\n{sizes}\n{_inputs(spec)}"
    )


def solution_file(spec: ProblemSpec, kernel: Kernel) -> str:
    """The `ModelNew` file; its identifiers are `spec.answer_name` + `_source`, `_cpp_source`, `_ext`
    (the kernel's own are `kernel`'s: `_kernel`, `_cuda`, ...)."""
    n = spec.answer_name
    params = ", ".join(f"{p}: torch.Tensor" for p in spec.params)
    call = ", ".join([*kernel.args, *spec.extra_args])
    init_params = "".join(f", {a}: {t}" for a, t, _ in spec.init_args)
    stores = "".join(f"        self.{a} = {a}\n" for a, _, _ in spec.init_args)
    return (
        "import torch\nimport torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\n\n"
        f'{n}_source = """{kernel.source}"""\n\n'
        f'{n}_cpp_source = "{kernel.cpp_decl}"\n\n'
        f"{n}_ext = load_inline(\n"
        f'    name="{n}",\n'
        f"    cpp_sources={n}_cpp_source,\n"
        f"    cuda_sources={n}_source,\n"
        f'    functions=["{kernel.function}"],\n'
        "    verbose=False,\n)\n\n\n"
        "class ModelNew(nn.Module):\n"
        f"    def __init__(self{init_params}):\n        super().__init__()\n{stores}"
        f"        self.{n}_ext = {n}_ext\n\n"
        f"    def forward(self, {params}) -> torch.Tensor:\n"
        f"        return self.{n}_ext.{kernel.function}({call})\n"
    )
