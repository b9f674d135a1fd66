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


@dataclass(frozen=True, slots=True)
class ProblemSpec:
    """Everything both files need; built by a family in `cudice.model.train.corpus.families`."""

    family: str
    name: str  # identifier of the kernel/extension, e.g. "relu_sigmoid"
    composition: str  # the split key, e.g. "unary:relu>sigmoid"
    level: int  # 1 = one op, 2 = a composition (RL curriculum order)
    title: str  # module docstring words, e.g. "elementwise ReLU"
    summary: str  # class docstring, e.g. "Applies ReLU to the input."
    params: tuple[str, ...]  # forward's tensor arguments
    body: tuple[str, ...]  # forward's statements (the last one returns)
    sizes: tuple[tuple[str, int], ...]  # module-level size constants, in order
    inputs: tuple[tuple[str, str], ...]  # get_inputs: (variable, expression)
    extra_args: tuple[str, ...] = ()  # literals passed to the wrapper after the tensors
    uses_f: bool = False  # the reference imports torch.nn.functional as F
    dtype: str = "float32"


def reference_file(spec: ProblemSpec) -> str:
    imports = "import torch\nimport torch.nn as nn\n" + (
        "import torch.nn.functional as F\n" if spec.uses_f else ""
    )
    params = ", ".join(f"{p}: torch.Tensor" for p in spec.params)
    body = "".join(f"        {line}\n" for line in spec.body)
    sizes = "".join(f"{k} = {v}\n" for k, v in spec.sizes)
    inputs = "".join(f"    {var} = {expr}\n" for var, expr in spec.inputs)
    returned = ", ".join(var for var, _ in spec.inputs)
    return (
        f'"""KernelBench-format reference: {spec.title}."""\n\n{imports}\n\n'
        "class Model(nn.Module):\n"
        f'    """{spec.summary}"""\n\n'
        "    def __init__(self):\n        super().__init__()\n\n"
        f"    def forward(self, {params}) -> torch.Tensor:\n{body}\n\n"
        f"{sizes}\n\n"
        f"def get_inputs():\n{inputs}    return [{returned}]\n\n\n"
        "def get_init_inputs():\n    return []\n"
    )


def solution_file(spec: ProblemSpec, kernel: Kernel) -> str:
    n = spec.name
    params = ", ".join(f"{p}: torch.Tensor" for p in spec.params)
    call = ", ".join([*kernel.args, *spec.extra_args])
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
        "    def __init__(self):\n        super().__init__()\n"
        f"        self.{n}_ext = {n}_ext\n\n"
        f"    def forward(self, {params}) -> torch.Tensor:\n"
        f"        return self.{n}_ext.{kernel.function}({call})\n"
    )
