"""Varied wrappers for the infilling pairs: the same solution with the names and small habits of
the file around its CUDA source changed, consistently, the way different people write it.

An infilling prompt states the wrapper (its prefix and suffix), and the answer must keep what the
wrapper says: the host function `functions=[...]` names, the declaration in the C++ source. A
model trained on one wrapper layout only (`files.solution_file`, every name spelled from the
composition) copies that layout instead of reading the prompt: the bundled model wrote word salad
as soon as a scaffold's names or first line differed from its corpus's (docs/benchmarks.md,
2026-12-05). `vary_wrapper(solution, stem, function, rng)` renames, as whole identifiers through
the whole file (CUDA source included):

- the source variables `{stem}_source` and `{stem}_cpp_source`, the extension variable
  `{stem}_ext` and the extension's `name="{stem}"`;
- the host function `function` (in the C++ declaration, its CUDA definition, `functions=[...]`
  and the call in `forward`);

and sometimes puts a comment line first (never a `# cudice:` directive, which would change where
the verifier looks for the reference), has `forward` call the extension's module variable
instead of an attribute set in `__init__`, or takes an `eps` as `float` where the corpus writes
`double` (in the declaration, the host function and the kernels alike; hand-written files do
both). Kernel names inside the CUDA source are the answer's
own and stay. Every new name carries a role suffix (`_src`, `_ext`, `_forward`, ...), so none is
a Python keyword or builtin, a C++ keyword, or a name the file already uses; `wrapper_names`
lists what was renamed.

`bake_arguments(solution, function, extra_args, rng)` varies the host function's signature: some
of the literal arguments that `forward` passes after the tensors (a `dim`, a `keepdim`, an `eps`)
leave the signature, the declaration and the call, and become locals of the host function with
the same value. People write `row_sum(x)` as often as `row_sum(x, 1, false)`; a model that has
only seen the corpus's signatures writes a host function the scaffold does not declare.

Not covered: other layouts of the wrapper (several `load_inline` calls, sources read from files,
`extra_cuda_cflags`), which the corpus never writes; an argument that is not a literal
(`self.eps`) is never baked.
"""

from __future__ import annotations

import random
import re

FLOAT_EPS_SHARE = 0.4  # varied wrappers whose `double eps` becomes `float eps` throughout
BASES = ("op", "fused", "custom", "my_op", "kernel", "impl", "cuda_op", "fast", "k", "mod")
SOURCE_SUFFIXES = ("_source", "_src", "_cuda_source", "_code", "_kernel_source", "_cu", "_cuda_src")
CPP_SUFFIXES = ("_cpp_source", "_cpp", "_decl", "_cpp_src", "_header", "_decls")
EXT_SUFFIXES = ("_ext", "_module", "_lib", "_mod", "_extension", "_cuda_ext")
FUNCTION_SUFFIXES = ("_cuda", "_forward", "_fwd", "_launch", "_op", "_run", "_impl")
MODULE_SUFFIXES = ("", "_ext", "_v1", "_extension", "_inline")
FIRST_LINES = (
    "# Custom CUDA kernel replacing the PyTorch ops of Model.\n",
    "# Fused CUDA implementation (load_inline).\n",
    "# ModelNew: the same computation with an inline CUDA extension.\n",
    '"""Inline CUDA version of the model."""\n\n',
)
VARY_SHARE = 0.75  # the other infilling pairs keep the corpus's own wrapper
BAKE_SHARE = 0.5  # of the varied pairs with literal extra arguments: some of them baked in
_CPP_LITERALS = {"True": "true", "False": "false"}


def _base(stem: str, rng: random.Random) -> str:
    """A stem for the new names: the composition's first op or a generic word."""
    first = stem.split("_")[0]
    pool = [*BASES, first] if first.isidentifier() and first.isalpha() else list(BASES)
    return rng.choice(pool)


def wrapper_names(stem: str, function: str, rng: random.Random) -> dict[str, str]:
    """Old identifier -> new identifier for one wrapper (module docstring); all new names differ
    from each other and from the old ones."""
    while True:
        base = _base(stem, rng)
        names = {
            f"{stem}_source": base + rng.choice(SOURCE_SUFFIXES),
            f"{stem}_cpp_source": base + rng.choice(CPP_SUFFIXES),
            f"{stem}_ext": base + rng.choice(EXT_SUFFIXES),
            function: _base(stem, rng) + rng.choice(FUNCTION_SUFFIXES),
        }
        new = list(names.values())
        if len(set(new)) == len(new) and not set(new) & set(names):
            return names


def vary_wrapper(solution: str, stem: str, function: str, rng: random.Random) -> str:
    """`solution` (a `files.solution_file` text whose identifiers are spelled from `stem`, host
    function `function`) with its wrapper varied (module docstring)."""
    used = set(re.findall(r"\b\w+\b", solution))
    names = wrapper_names(stem, function, rng)
    while used & set(names.values()):  # a new name the file already has (a helper, a kernel)
        names = wrapper_names(stem, function, rng)
    whole = r"\b(" + "|".join(map(re.escape, names)) + r")\b"  # one pass: no rename sees another's
    solution = re.sub(whole, lambda m: names[m.group(1)], solution)
    module = rng.choice([names[f"{stem}_ext"], _base(stem, rng) + rng.choice(MODULE_SUFFIXES)])
    if module in names or module in used:  # an old name, or one the file has: the extension's own
        module = names[f"{stem}_ext"]
    solution = solution.replace(f'    name="{stem}",\n', f'    name="{module}",\n', 1)
    ext = names[f"{stem}_ext"]
    if rng.random() < 0.3:  # forward calls the module variable; __init__ keeps no attribute
        solution = solution.replace(f"        self.{ext} = {ext}\n", "", 1)
        solution = solution.replace(f"self.{ext}.", f"{ext}.")
    if rng.random() < 0.3:
        solution = rng.choice(FIRST_LINES) + solution
    if "double eps" in solution and rng.random() < FLOAT_EPS_SHARE:
        solution = re.sub(r"\bdouble eps\b", "float eps", solution)
    return solution


def _cpp_literal(expr: str) -> str | None:
    """The C++ spelling of a Python literal argument (int, float, bool), None for anything else."""
    if expr in _CPP_LITERALS:
        return _CPP_LITERALS[expr]
    if re.fullmatch(r"-?(\d+\.\d*|\d*\.\d+|\d+)(e-?\d+)?", expr):  # an int, a float
        return expr
    return None


def bake_arguments(solution: str, function: str, extra_args: tuple[str, ...], rng: random.Random) -> str:
    """`solution` with some of `extra_args` (the literal ones, each with probability 1/2, at least
    one) moved from host function `function`'s signature into its body (module docstring).
    Unchanged when no argument is a literal or the file is not laid out as `files.solution_file`
    writes it."""
    n = len(extra_args)
    literals = [i for i, a in enumerate(extra_args) if _cpp_literal(a) is not None]
    decl = re.search(rf'"torch::Tensor {re.escape(function)}\(([^)]*)\);"', solution)
    call = re.search(rf"\.{re.escape(function)}\(([^()\n]*)\)\n", solution)
    if not literals or decl is None or call is None:
        return solution
    params, args = decl.group(1).split(", "), call.group(1).split(", ")
    definition = f"torch::Tensor {function}({decl.group(1)}) {{\n"
    if len(params) != len(args) or len(args) < n or tuple(args[-n:]) != extra_args:
        return solution
    if any(solution.count(part) != 1 for part in (definition, decl.group(0), call.group(0))):
        return solution
    chosen = {i for i in literals if rng.random() < 0.5} or {rng.choice(literals)}
    first = len(args) - n  # index of the first extra argument
    keep = [k for k in range(len(args)) if k - first not in chosen]
    locals_ = "".join(f"    {params[first + i]} = {_cpp_literal(extra_args[i])};\n" for i in sorted(chosen))
    new_params = ", ".join(params[k] for k in keep)
    solution = solution.replace(definition, f"torch::Tensor {function}({new_params}) {{\n{locals_}", 1)
    solution = solution.replace(decl.group(0), f'"torch::Tensor {function}({new_params});"', 1)
    new_call = f".{function}({', '.join(args[k] for k in keep)})\n"
    return solution.replace(call.group(0), new_call, 1)  # forward comes after the CUDA source
