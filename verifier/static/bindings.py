"""What the names of a candidate hold, found from the AST before forward is judged.

`Bindings` answers, for `static/forward.py`: which names and `self.<attr>`s hold the compiled
extension (`ext = load_inline(...)`, `self.ext = ext`, or an object of a class it binds with
`py::class_`: `self.op = ext.ReluOp()`), one of its functions (`self.fn = ext.f`,
`relu = ext.relu`, `partial(ext.f)`, `getattr(ext, "f")`, a local `launch = relu`), a torch
callable (`self.conv = nn.Conv2d(...)`, `mm = torch.mm` as a class attribute, `nn.ModuleList`,
`OPS = {"mm": torch.mm}`, a loop variable over such a container), a tensor (`nn.Parameter`,
`register_buffer`) or the reference `Model`. `self.<attr>` kinds are per class (`kinds_for`): a
helper class's methods see what its own `__init__` (and its in-file bases') stored, read with
that `__init__`'s own local names (`f = torch.relu; self.f = f`), never the asking function's. What
a function's own names hold comes in as `LocalNames` (its class's kinds, its local aliases), so a
`Bindings` holds only module-wide facts. `dotted()` (`static/names.py`) resolves import and
module-level aliases to canonical paths.

Not covered: names bound through `setattr`, containers filled after construction, attributes of
other objects than `self`; those read as "other", i.e. neither kernel nor torch.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from cudice.verifier.source.document import callee_name
from cudice.verifier.static.names import dotted as dotted
from cudice.verifier.static.policy import COMPUTE_METHODS, NN_NON_COMPUTE
from cudice.verifier.static.reach import CodeIndex, lambda_function
from cudice.verifier.static.sources import ModuleConstants

TORCH_SUBMODULES_COMPUTE = (
    "torch.nn.functional.",
    "torch.ops.",
    "torch.special.",
    "torch.linalg.",
    "torch.fft.",
)


def self_attr(node: ast.AST) -> str | None:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return node.attr
    return None


def is_compute_ref(d: str) -> bool:
    """A reference (not a call) to a torch compute function, e.g. `torch.relu`, `F.gelu`."""
    if not d.startswith("torch.") or d.startswith("torch.cuda."):
        return False
    return d.startswith(TORCH_SUBMODULES_COMPUTE) or d.rsplit(".", 1)[-1] in COMPUTE_METHODS


def literal_prefix(e: ast.JoinedStr) -> str:
    """The constant text an f-string starts with (`f"conv{i}"` → `conv`)."""
    first = e.values[0] if e.values else None
    return first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else ""


def module_lambdas(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    """Module-level `name = lambda ...: body`, as functions forward can reach by name."""
    out: dict[str, ast.FunctionDef] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Lambda):
            for t in stmt.targets:
                if isinstance(t, ast.Name):
                    out[t.id] = lambda_function(t.id, stmt.value)
    return out


@dataclass(frozen=True, slots=True)
class CandidateModule:
    """A parsed candidate and the names static/checks.py found in it before forward is judged."""

    tree: ast.Module
    cls: ast.ClassDef  # ModelNew
    aliases: dict[str, str]  # import and module-level aliases: `F` -> "torch.nn.functional"
    exposed: set[str]  # the extension's Python function names
    extension_names: set[str]  # module-level names bound to a `load_inline` module
    reference_names: set[str]  # names of the reference `Model`
    extension_classes: set[str] = field(default_factory=set)  # `py::class_` names the extension binds


@dataclass(frozen=True, slots=True)
class LocalNames:
    """What names hold inside one function: the `self.<attr>` kinds its class stored, and the
    function's own names bound to extension functions and to torch callables."""

    self_kinds: Mapping[str, str]  # self attr -> "ext" | "kernel" | "torch" | "tensor" | "reference"
    kernels: AbstractSet[str] = frozenset()
    torch: AbstractSet[str] = frozenset()


@dataclass(frozen=True, slots=True)
class _InitLocals:
    """How `__init__` (or a class body) reads a stored value: its `LocalNames`, and the values its own
    local names were assigned."""

    names: LocalNames
    values: Mapping[str, list[ast.expr]]


class Bindings:
    """What the names of one candidate hold, decided before forward is judged: module-level names
    when built, the `self.<attr>` kinds of each class when first asked for (`kinds_for`)."""

    def __init__(self, module: CandidateModule) -> None:
        self.tree, self.cls = module.tree, module.cls
        self.aliases, self.exposed = module.aliases, module.exposed
        self.reference_names = module.reference_names
        self.extension_classes = module.extension_classes
        self.module_funcs = {n.name: n for n in self.tree.body if isinstance(n, ast.FunctionDef)}
        self.module_funcs.update(module_lambdas(self.tree))
        self.index = CodeIndex(self.tree, self.module_funcs)
        self.methods = self.index.methods(self.cls)  # over ModelNew's in-file bases too
        self.extensions = set(module.extension_names)  # names/self-attrs holding a load_inline module
        self.kernel_names: set[str] = set()  # module-level names bound to an extension function
        self.torch_names: set[str] = set()  # module-level containers of torch compute functions
        self.constants = ModuleConstants(self.tree)
        self._module_bindings()
        self._class_kinds: dict[int, dict[str, str]] = {id(self.cls): self.attr_kinds(self.cls)}

    def _module_bindings(self) -> None:
        """Module-level names bound to the extension or one of its functions, or to a container of
        torch callables."""
        outside = LocalNames({})
        for _ in range(2):  # `ext2 = ext; relu = ext2.relu_out`
            for stmt in self.tree.body:
                if isinstance(stmt, ast.Assign):
                    for t in stmt.targets:
                        if isinstance(t, ast.Name):
                            if (
                                isinstance(stmt.value, ast.Name) and stmt.value.id in self.extensions
                            ) or self.builds_extension_object(stmt.value, outside):
                                self.extensions.add(t.id)
                            elif self.is_kernel_ref(stmt.value, outside):
                                self.kernel_names.add(t.id)
                            elif self.holds_torch_callable(stmt.value):
                                self.torch_names.add(t.id)  # OPS = {"mm": torch.mm}; OPS["mm"](a, b)

    def is_kernel_ref(self, e: ast.expr, local: LocalNames) -> bool:
        """`ext.relu_out`, `self.ext.relu_out`, a name or `self.<attr>` bound to one, `partial(...)` of one,
        `getattr(ext, "relu_out")`: a reference to a compiled extension function (not a call)."""
        if isinstance(e, ast.Call) and callee_name(e.func) == "partial" and e.args:
            return self.is_kernel_ref(e.args[0], local)
        if isinstance(e, ast.Call) and callee_name(e.func) == "getattr" and len(e.args) >= 2:
            recv, key = e.args[0], e.args[1]
            return (
                isinstance(key, ast.Constant) and key.value in self.exposed and self.is_extension(recv, local)
            )
        if isinstance(e, ast.Name):
            return (
                e.id in self.kernel_names
                or e.id in local.kernels
                or (e.id in self.exposed and e.id not in self.module_funcs)
            )
        if (attr := self_attr(e)) is not None:
            return local.self_kinds.get(attr) == "kernel" or (
                attr in self.exposed and attr not in self.methods
            )
        if isinstance(e, ast.Attribute):
            return e.attr in self.exposed or self.is_extension(e.value, local)
        return False

    def holds_torch_callable(self, e: ast.expr) -> bool:
        """A container literal holding torch compute functions or `nn` layers (`[torch.relu, nn.GELU()]`)."""
        if not isinstance(e, (ast.Dict, ast.List, ast.Tuple, ast.Set)):
            return False
        for n in ast.walk(e):
            d = (
                dotted(n.func if isinstance(n, ast.Call) else n, self.aliases)
                if isinstance(n, (ast.Attribute, ast.Name, ast.Call))
                else None
            )
            if d and (
                is_compute_ref(d)
                or (
                    d.startswith("torch.nn.")
                    and d.rsplit(".", 1)[-1][:1].isupper()
                    and d.rsplit(".", 1)[-1] not in NN_NON_COMPUTE
                )
            ):
                return True
        return False

    def is_torch_callable(self, e: ast.expr, local: LocalNames) -> bool:
        """`layer` from `for layer in self.layers`, `OPS["mm"]`, `self.layers[0]`: calling it runs PyTorch."""
        if isinstance(e, ast.Subscript):
            e = e.value
        if isinstance(e, ast.Name):
            return e.id in local.torch or e.id in self.torch_names
        attr = self_attr(e)
        return attr is not None and local.self_kinds.get(attr) == "torch"

    def builds_extension_object(self, e: ast.expr, local: LocalNames) -> bool:
        """`ext.ReluOp(...)` for a class the extension binds (`py::class_<ReluOp>(m, "ReluOp")`): the
        object's methods are the extension's compiled functions, so it counts as the extension."""
        return (
            isinstance(e, ast.Call)
            and isinstance(e.func, ast.Attribute)
            and e.func.attr in self.extension_classes
            and self.is_extension(e.func.value, local)
        )

    def is_extension(self, e: ast.expr, local: LocalNames) -> bool:
        """A name or `self.<attr>` that holds the module `load_inline` returned."""
        if isinstance(e, ast.Name):
            return e.id in self.extensions
        attr = self_attr(e)
        return attr is not None and local.self_kinds.get(attr) == "ext"

    def kinds_for(self, cls: ast.ClassDef | None) -> dict[str, str]:
        """`self.<attr>` kinds as seen by a method of `cls` (ModelNew's for plain functions). They come
        from the class alone (its own `__init__`'s names), so they do not depend on who asks first."""
        if cls is None:
            return self._class_kinds[id(self.cls)]
        if id(cls) not in self._class_kinds:
            self._class_kinds[id(cls)] = self.attr_kinds(cls)
        return self._class_kinds[id(cls)]

    def local_kernels(self, fn: ast.AST, self_kinds: Mapping[str, str]) -> frozenset[str]:
        """`fn`'s own names bound to an extension function (`op = self.ext.relu_out; g = op`)."""
        nodes = [n for n in ast.walk(fn) if isinstance(n, ast.Assign)]
        kernels: frozenset[str] = frozenset()
        for _ in range(2):  # two passes settle `op = ext.f; g = op`
            kernels |= {
                t.id
                for n in nodes
                if self.is_kernel_ref(n.value, LocalNames(self_kinds, kernels))
                for t in n.targets
                if isinstance(t, ast.Name)
            }
        return kernels

    def attr_kinds(self, cls: ast.ClassDef) -> dict[str, str]:
        """What `__init__` and the class attributes of `cls` and its in-file bases store on `self`."""
        kinds: dict[str, str] = {}
        for c in reversed(self.index.chain(cls)):  # bases first: a subclass's store wins
            self._init_attrs(c, kinds)
        return kinds

    def _init_attrs(self, cls: ast.ClassDef, kinds: dict[str, str]) -> None:
        """Into `kinds`: the class attributes of `cls` and what its `__init__` stores on `self`, read
        with `__init__`'s own local names (`op = ext.f; self.op = op`, `f = torch.relu; self.f = f`)."""
        outside = _InitLocals(LocalNames(kinds), {})  # `_kind_of_init_value` reads `kinds` as they grow
        for stmt in cls.body:  # class attributes read as `self.<name>`: `mm = torch.mm`
            if isinstance(stmt, ast.Assign):
                for t in stmt.targets:
                    if isinstance(t, ast.Name) and t.id not in ("forward", "__call__"):
                        kinds[t.id] = self._kind_of_init_value(stmt.value, outside)
        init = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
        if init is None:
            return
        values: dict[str, list[ast.expr]] = {}
        for n in ast.walk(init):
            if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None:
                for t in n.targets if isinstance(n, ast.Assign) else [n.target]:
                    if isinstance(t, ast.Name):
                        values.setdefault(t.id, []).append(n.value)
        self._init_stores(init, kinds, _InitLocals(LocalNames(kinds), values))  # `self.ext` known …
        local = LocalNames(kinds, self.local_kernels(init, kinds))
        self._init_stores(init, kinds, _InitLocals(local, values))  # … before `op = self.ext.f` is

    def _init_stores(self, init: ast.FunctionDef, kinds: dict[str, str], reads: _InitLocals) -> None:
        """Into `kinds`: what `init` stores on `self`."""
        for node in ast.walk(init):
            targets: list[ast.expr] = []
            value: ast.expr | None = None
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            elif isinstance(node, ast.AnnAssign):
                targets, value = [node.target], node.value
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "register_buffer"
            ):
                if (
                    node.args
                    and isinstance(node.args[0], ast.Constant)
                    and isinstance(node.args[0].value, str)
                ):
                    kinds[node.args[0].value] = "tensor"
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("add_module", "register_module", "register_parameter")
                and len(node.args) >= 2
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):  # `self.add_module("act", nn.ReLU())` is `self.act = nn.ReLU()`
                kinds[node.args[0].value] = self._kind_of_init_value(node.args[1], reads)
            elif (
                isinstance(node, ast.Call)
                and callee_name(node.func) == "setattr"
                and len(node.args) >= 3
                and isinstance(node.args[0], ast.Name)
                and node.args[0].id == "self"
            ):  # `setattr(self, f"act{i}", nn.ReLU())`: kept under the name's literal prefix + "*"
                key = node.args[1]
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    kinds[key.value] = self._kind_of_init_value(node.args[2], reads)
                elif isinstance(key, ast.JoinedStr):
                    kinds[literal_prefix(key) + "*"] = self._kind_of_init_value(node.args[2], reads)
            for t in targets:
                name = self_attr(t)
                if name and value is not None:
                    kinds[name] = self._kind_of_init_value(value, reads)

    def _kind_of_init_value(self, value: ast.expr, init: _InitLocals) -> str:
        """The kind `self.<attr> = value` stores (`LocalNames.self_kinds`), "other" when none; a local
        name of `__init__` stores what it was assigned (a reference or torch callable if any
        assignment is one)."""
        local = init.names
        if isinstance(value, ast.Name) and value.id in self.extensions:
            return "ext"
        if isinstance(value, ast.Name) and value.id in init.values:
            rest = _InitLocals(local, {k: v for k, v in init.values.items() if k != value.id})
            found = {self._kind_of_init_value(v, rest) for v in init.values[value.id]}
            for kind in ("reference", "torch"):
                if kind in found:
                    return kind
            return found.pop() if len(found) == 1 else "other"
        if isinstance(value, ast.Call) and callee_name(value.func) == "load_inline":
            return "ext"
        if self.builds_extension_object(value, local):
            return "ext"  # self.op = ext.ReluOp()
        if (attr := self_attr(value)) is not None and local.self_kinds.get(attr) in ("ext", "kernel"):
            return local.self_kinds[attr]  # self.ext2 = self.ext
        if self.is_kernel_ref(value, local):
            return "kernel"
        if (
            isinstance(value, ast.Call)
            and callee_name(value.func) in ("staticmethod", "partial")
            and value.args
        ):
            return self._kind_of_init_value(value.args[0], init)
        if isinstance(value, (ast.Dict, ast.List, ast.Tuple, ast.Set)) and self.holds_torch_callable(value):
            return "torch"  # self.ops = [torch.relu, F.gelu]
        func = value.func if isinstance(value, ast.Call) else value
        if isinstance(func, ast.Name) and func.id in self.reference_names:
            return "reference"
        d = dotted(func, self.aliases)
        if d is None or not d.startswith("torch."):
            return "other"
        if not isinstance(value, ast.Call):
            return "torch"  # self.fn = torch.relu
        last = d.rsplit(".", 1)[-1]
        if last in ("Sequential", "ModuleList", "ModuleDict") and self._holds_own_modules_only(value):
            return "other"  # nn.ModuleList([Block() for _ in range(n)]): its forward is judged as the file's
        if (
            d.startswith("torch.nn.")
            and not d.startswith(("torch.nn.functional.", "torch.nn.init."))
            and last not in NN_NON_COMPUTE
        ):
            return "torch"  # self.conv = nn.Conv2d(...): calling it in forward is PyTorch compute
        return "tensor"  # nn.Parameter(...), torch.randn(...)

    def _holds_own_modules_only(self, call: ast.Call) -> bool:
        """`nn.Sequential(Block(), Block())`, `nn.ModuleList([Block() for _ in ...])`: every module
        the container is built with is an instance of a class of this file deriving from nothing but
        `nn.Module` (its methods are then judged as forward code); an empty container, one built
        from names or anything else is not."""
        elements: list[ast.expr] = []
        for arg in [*call.args, *(k.value for k in call.keywords)]:
            if isinstance(arg, (ast.List, ast.Tuple)):
                elements += arg.elts
            elif isinstance(arg, (ast.ListComp, ast.GeneratorExp)):
                elements.append(arg.elt)
            elif isinstance(arg, ast.Dict):
                elements += arg.values
            else:
                elements.append(arg)
        return bool(elements) and all(self._is_own_module(e) for e in elements)

    def _is_own_module(self, e: ast.expr) -> bool:
        if not (isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id in self.index.classes):
            return False
        for c in self.index.chain(self.index.classes[e.func.id]):
            for b in c.bases:
                d = dotted(b, self.aliases)
                if d is not None and d not in ("torch.nn.Module", "torch.nn.modules.module.Module"):
                    return False
        return True
