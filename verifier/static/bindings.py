"""What the names of a candidate hold, found from the AST before forward is judged.

`Bindings` answers, for `static/forward.py`: which names and `self.<attr>`s hold the compiled
extension (`ext = load_inline(...)`, `self.ext = ext`), one of its functions (`self.fn = ext.f`,
`relu = ext.relu`, `partial(ext.f)`, `getattr(ext, "f")`, a local `launch = relu`), a torch
callable (`self.conv = nn.Conv2d(...)`, `mm = torch.mm` as a class attribute, `nn.ModuleList`,
`OPS = {"mm": torch.mm}`, a loop variable over such a container), a tensor (`nn.Parameter`,
`register_buffer`) or the reference `Model`. `self.<attr>` kinds are per class (`kinds_for`): a
helper class's methods see what its own `__init__` (and its in-file bases') stored. `dotted()`
(`static/names.py`) resolves import and module-level aliases to canonical paths.

Not covered: names bound through `setattr`, containers filled after construction, attributes of
other objects than `self`; those read as "other", i.e. neither kernel nor torch.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

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


class Bindings:
    """What the names of one candidate hold, decided before forward is judged (phases 0 and 1)."""

    def __init__(self, module: CandidateModule) -> None:
        self.tree, self.cls = module.tree, module.cls
        self.aliases, self.exposed = module.aliases, module.exposed
        self.reference_names = module.reference_names
        self.module_funcs = {n.name: n for n in self.tree.body if isinstance(n, ast.FunctionDef)}
        self.module_funcs.update(module_lambdas(self.tree))
        self.index = CodeIndex(self.tree, self.module_funcs)
        self.methods = self.index.methods(self.cls)  # over ModelNew's in-file bases too
        self.extensions = set(module.extension_names)  # names/self-attrs holding a load_inline module
        self.kernel_names: set[str] = set()  # module-level names bound to an extension function
        self.torch_names: set[str] = set()  # module-level containers of torch compute functions
        self._local_torch: set[str] = set()  # names in the current function bound to torch callables
        # self attr -> "ext" | "kernel" | "torch" | "tensor" | "reference"
        self.self_kinds: dict[str, str] = {}
        self._local_kernels: set[str] = set()  # names in the current function bound to kernel functions
        self.constants = ModuleConstants(self.tree)
        self._module_bindings()
        self.self_kinds = self.attr_kinds(self.cls)
        self._class_kinds: dict[int, dict[str, str]] = {id(self.cls): self.self_kinds}

    # -- phase 0: module-level names bound to the extension or one of its functions -------------
    def _module_bindings(self) -> None:
        for _ in range(2):  # `ext2 = ext; relu = ext2.relu_out`
            for stmt in self.tree.body:
                if isinstance(stmt, ast.Assign):
                    for t in stmt.targets:
                        if isinstance(t, ast.Name):
                            if isinstance(stmt.value, ast.Name) and stmt.value.id in self.extensions:
                                self.extensions.add(t.id)
                            elif self._is_kernel_ref(stmt.value):
                                self.kernel_names.add(t.id)
                            elif self._holds_torch_callable(stmt.value):
                                self.torch_names.add(t.id)  # OPS = {"mm": torch.mm}; OPS["mm"](a, b)

    def _is_kernel_ref(self, e: ast.expr) -> bool:
        """`ext.relu_out`, `self.ext.relu_out`, a name or `self.<attr>` bound to one, `partial(...)` of one,
        `getattr(ext, "relu_out")`: a reference to a compiled extension function (not a call)."""
        if isinstance(e, ast.Call) and callee_name(e.func) == "partial" and e.args:
            return self._is_kernel_ref(e.args[0])
        if isinstance(e, ast.Call) and callee_name(e.func) == "getattr" and len(e.args) >= 2:
            recv, key = e.args[0], e.args[1]
            return isinstance(key, ast.Constant) and key.value in self.exposed and self._is_extension(recv)
        if isinstance(e, ast.Name):
            return (
                e.id in self.kernel_names
                or e.id in self._local_kernels
                or (e.id in self.exposed and e.id not in self.module_funcs)
            )
        if (attr := self_attr(e)) is not None:
            return self.self_kinds.get(attr) == "kernel" or (
                attr in self.exposed and attr not in self.methods
            )
        if isinstance(e, ast.Attribute):
            return e.attr in self.exposed or self._is_extension(e.value)
        return False

    def _holds_torch_callable(self, e: ast.expr) -> bool:
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

    def _is_torch_callable(self, e: ast.expr) -> bool:
        """`layer` from `for layer in self.layers`, `OPS["mm"]`, `self.layers[0]`: calling it runs PyTorch."""
        if isinstance(e, ast.Subscript):
            e = e.value
        if isinstance(e, ast.Name):
            return e.id in self._local_torch or e.id in self.torch_names
        attr = self_attr(e)
        return attr is not None and self.self_kinds.get(attr) == "torch"

    def _is_extension(self, e: ast.expr) -> bool:
        if isinstance(e, ast.Name):
            return e.id in self.extensions
        attr = self_attr(e)
        return attr is not None and self.self_kinds.get(attr) == "ext"

    # -- phase 1: what __init__ stores on self ------------------------------------------------
    def kinds_for(self, cls: ast.ClassDef | None) -> dict[str, str]:
        """`self.<attr>` kinds as seen by a method of `cls` (ModelNew's for plain functions)."""
        if cls is None:
            return self._class_kinds[id(self.cls)]
        if id(cls) not in self._class_kinds:
            self._class_kinds[id(cls)] = self.attr_kinds(cls)
        return self._class_kinds[id(cls)]

    def attr_kinds(self, cls: ast.ClassDef) -> dict[str, str]:
        saved, self.self_kinds = self.self_kinds, {}  # `_kind_of_init_value` reads the class's own
        try:
            for c in reversed(self.index.chain(cls)):  # bases first: a subclass's store wins
                self._init_attrs(c)
            return self.self_kinds
        finally:
            self.self_kinds = saved

    def _init_attrs(self, cls: ast.ClassDef) -> None:
        for stmt in cls.body:  # class attributes read as `self.<name>`: `mm = torch.mm`
            if isinstance(stmt, ast.Assign):
                for t in stmt.targets:
                    if isinstance(t, ast.Name) and t.id not in ("forward", "__call__"):
                        self.self_kinds[t.id] = self._kind_of_init_value(stmt.value)
        init = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
        for node in ast.walk(init) if init else ():
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
                    self.self_kinds[node.args[0].value] = "tensor"
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("add_module", "register_module", "register_parameter")
                and len(node.args) >= 2
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):  # `self.add_module("act", nn.ReLU())` is `self.act = nn.ReLU()`
                self.self_kinds[node.args[0].value] = self._kind_of_init_value(node.args[1])
            elif (
                isinstance(node, ast.Call)
                and callee_name(node.func) == "setattr"
                and len(node.args) >= 3
                and isinstance(node.args[0], ast.Name)
                and node.args[0].id == "self"
            ):  # `setattr(self, f"act{i}", nn.ReLU())`: kept under the name's literal prefix + "*"
                key = node.args[1]
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    self.self_kinds[key.value] = self._kind_of_init_value(node.args[2])
                elif isinstance(key, ast.JoinedStr):
                    self.self_kinds[literal_prefix(key) + "*"] = self._kind_of_init_value(node.args[2])
            for t in targets:
                name = self_attr(t)
                if name and value is not None:
                    self.self_kinds[name] = self._kind_of_init_value(value)

    def _kind_of_init_value(self, value: ast.expr) -> str:
        if isinstance(value, ast.Name) and value.id in self.extensions:
            return "ext"
        if isinstance(value, ast.Call) and callee_name(value.func) == "load_inline":
            return "ext"
        if (attr := self_attr(value)) is not None and self.self_kinds.get(attr) in ("ext", "kernel"):
            return self.self_kinds[attr]  # self.ext2 = self.ext
        if self._is_kernel_ref(value):
            return "kernel"
        if (
            isinstance(value, ast.Call)
            and callee_name(value.func) in ("staticmethod", "partial")
            and value.args
        ):
            return self._kind_of_init_value(value.args[0])
        if isinstance(value, (ast.Dict, ast.List, ast.Tuple, ast.Set)) and self._holds_torch_callable(value):
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
        if (
            d.startswith("torch.nn.")
            and not d.startswith(("torch.nn.functional.", "torch.nn.init."))
            and last not in NN_NON_COMPUTE
        ):
            return "torch"  # self.conv = nn.Conv2d(...): calling it in forward is PyTorch compute
        return "tensor"  # nn.Parameter(...), torch.randn(...)
