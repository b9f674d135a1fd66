"""Values derived from `torch`, followed through the candidate's own names: calls of them in forward code.

`static/forward.py` judges calls by how they are spelled (`torch.relu(x)`, `self.conv(x)` for a
layer `__init__` stored, `x.relu()`). A value can reach a PyTorch op without any such spelling at
the call: `type(x).relu(x)`, `self.conv.forward(x)`, `next(iter(self.children()))(x)`,
`self._modules["conv"](x)`, `super().forward(x)` in a class deriving from `nn.Conv2d`.
`taint_findings()` marks every value derived from `torch` — the module and its submodules,
torch functions and classes (`dotted()` resolves the spelling), `nn` layer instances and the
containers holding them, `type(v)` / `v.__class__` of a run-time value, `super()` and inherited
attributes of a class deriving from an `nn` layer, and what reflection returns — and follows it
through local names (assignments, `for`/`with` targets, comprehensions, `append`/`[k] =` into a
container), `self.<attr>` stored by any method of the class chain, module-level names, attributes,
subscripts, container literals, iteration helpers (`iter`, `next`, `list`, `zip`, `dict(k=v)` …),
`getattr`, `partial` (its function or a bound argument), any call of a function the file does not
define whose arguments or keywords hold such a value (`types.SimpleNamespace(act=F.relu)`: the
result may hold it; `ns.act(x)` is then a call of it; a container accessor such as `.get('act')`
hands out what the container holds, under that value's own name), and arguments passed to the
file's own functions and methods. Then, in every function
a call of `ModelNew` can run (`static/reach.py`):

- a call whose callee is such a value and whose name is not glue (the allow-lists of
  `static/policy.py`: allocations, views, shape queries, device plumbing; module bookkeeping such as
  `parameters()`) is `static.torch_op_in_forward`;
- reflection is rejected outright (`static.dynamic_code`): `__getattribute__`, `__getattr__`
  called by name, `__dict__`, `__mro__`/`__bases__`, `vars(...)`, `operator.methodcaller` /
  `attrgetter`, `getattr` as a value or inside `partial`, `getattr` with a name the file does not
  fix on anything but the extension or `self`;
- `ModelNew` deriving (directly or through in-file classes) from an `nn` layer other than
  `nn.Module` without an in-file `forward` is `static.torch_op_in_forward` on the class: its
  inherited forward is the layer's. With one, `super().forward(x)` and the layer's own methods
  (`self._conv_forward(...)`) are calls of torch-derived values, as above. A helper class deriving
  from a layer is judged where it is used: an instance of one without an in-file `forward` is a
  layer (calling it is a violation), one held for its weights only is not.

Calls spelled as module paths (`torch.relu(x)`) are left to `static/forward.py`'s policy.
Not covered: values that cross into other files or come back from functions the file does not
define (their results are not followed), and tensors themselves: a tensor's methods are judged
by name in `static/forward.py`.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

from cudice.verifier.source.document import callee_name
from cudice.verifier.static.bindings import Bindings, LocalNames, dotted, self_attr
from cudice.verifier.static.forward import Finding
from cudice.verifier.static.policy import (
    NN_NON_COMPUTE,
    STREAM_APIS,
    TENSOR_GLUE_ALWAYS,
    TENSOR_GLUE_DEFAULT,
    TORCH_CUDA_PLUMBING,
    Strictness,
    torch_function_allowed,
)
from cudice.verifier.static.reach import Function, Reached

# `nn` classes that only hold other modules: calling them runs what they hold.
NN_CONTAINERS = frozenset({"Sequential", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict"})
_MODULE_BASES = frozenset({"torch.nn.Module", "torch.nn.modules.module.Module"})
# `nn.Module` methods that hand out submodules (their results hold what the module holds).
MODULE_ACCESSORS = frozenset(
    {"children", "modules", "named_children", "named_modules", "get_submodule", "_modules", "_get_name"}
)
# Methods of modules and containers that do no compute: bookkeeping, lookups, moves.
MODULE_GLUE = frozenset(
    {
        *MODULE_ACCESSORS,
        "__init__",
        "parameters",
        "named_parameters",
        "buffers",
        "named_buffers",
        "get_parameter",
        "get_buffer",
        "register_buffer",
        "register_parameter",
        "add_module",
        "register_module",
        "state_dict",
        "load_state_dict",
        "train",
        "eval",
        "requires_grad_",
        "zero_grad",
        "to",
        "cuda",
        "float",
        "double",
        "half",
        "bfloat16",
        "type",
        "extra_repr",
        "values",
        "keys",
        "items",
        "get",
        "append",
        "extend",
        "insert",
        "index",
        "count",
        "__len__",
        "__iter__",
        "__getitem__",
        "__contains__",
        "__name__",
    }
)
_ITERATION_HELPERS = frozenset(
    {"iter", "next", "list", "tuple", "reversed", "sorted", "enumerate", "zip", "dict", "set", "filter"}
)
_CONTAINER_MUTATORS = frozenset({"append", "extend", "insert", "add", "update", "setdefault", "appendleft"})
_REFLECTION_ATTRS = frozenset(
    {"__getattribute__", "__getattr__", "__dict__", "__mro__", "__bases__", "__base__"}
)
_REFLECTION_CALLS = frozenset(
    {
        "operator.methodcaller",
        "operator.attrgetter",
        "inspect.getattr_static",
        "inspect.getmembers",
        "builtins.getattr",
        "builtins.vars",
    }
)
_SELF_NAMES = frozenset({"self", "cls"})
# Builtins and library functions that call their first argument.
_HIGHER_ORDER = frozenset(
    {"map", "functools.reduce", "reduce", "itertools.starmap", "itertools.accumulate", "starmap"}
)


@dataclass(frozen=True, slots=True)
class Taint:
    """A torch-derived value: `what` says where it comes from (for the message), `leaf` is the
    name the value answers to (`relu` for `type(x).relu`), matched against the glue lists."""

    what: str
    leaf: str
    layer: bool = False  # an `nn` layer, or a container or accessor of layers


def _short(node: ast.AST) -> str:
    text = ast.unparse(node)
    return text if len(text) <= 48 else text[:45] + "..."


class _Analysis:
    """The taint of one candidate's names: module-level, per class (`self.<attr>`), per function."""

    def __init__(self, names: Bindings, reached: list[Reached], level: Strictness) -> None:
        self.names = names
        self.index = names.index
        self.aliases = names.aliases
        self.level = level
        self.reached = reached
        self.module_env: dict[str, Taint] = {}
        self.self_env: dict[int, dict[str, Taint]] = {}  # class id -> attr -> taint
        self.params: dict[int, dict[str, Taint]] = {}  # function id -> parameter -> taint
        self.envs: dict[int, dict[str, Taint]] = {}
        self._layer_bases: dict[int, str | None] = {}

    # -- classes --------------------------------------------------------------------------------
    def layer_base(self, cls: ast.ClassDef) -> str | None:
        """The `nn` layer (not `nn.Module`) `cls` derives from through in-file classes, or None."""
        if id(cls) not in self._layer_bases:
            self._layer_bases[id(cls)] = None
            found = None
            for c in self.index.chain(cls):
                for b in c.bases:
                    d = dotted(b, self.aliases) or ""
                    if (
                        d.startswith("torch.nn.")
                        and d not in _MODULE_BASES
                        and d.rsplit(".", 1)[-1][:1].isupper()
                    ):
                        found = found or d
            self._layer_bases[id(cls)] = found
        return self._layer_bases[id(cls)]

    def defines(self, cls: ast.ClassDef, name: str) -> bool:
        """Whether `cls` or one of its in-file bases defines `name` (method or class attribute)."""
        for c in self.index.chain(cls):
            for n in c.body:
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name:
                    return True
                if isinstance(n, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == name for t in n.targets
                ):
                    return True
        return False

    def instance_taint(self, cls: ast.ClassDef) -> Taint | None:
        """An instance of the in-file `cls`: a layer when it derives from one and inherits its forward."""
        base = self.layer_base(cls)
        if base is not None and not self.defines(cls, "forward"):
            return Taint(f"`{cls.name}`, which inherits `{base}`'s forward", "forward", layer=True)
        return None

    # -- expressions ----------------------------------------------------------------------------
    def taint(self, e: ast.AST | None, env: dict[str, Taint], owner: ast.ClassDef | None) -> Taint | None:
        """Whether `e` is torch-derived in a function with local taints `env` and `self` of `owner`."""
        if e is None:
            return None
        if isinstance(e, ast.Name):
            if e.id in env:
                return env[e.id]
            if e.id in self.module_env:
                return self.module_env[e.id]
            d = dotted(e, self.aliases)
            if d and (d == "torch" or d.startswith("torch.")):
                return Taint(f"`{d}`", d.rsplit(".", 1)[-1])
            return None
        if isinstance(e, ast.Attribute):
            return self._attribute_taint(e, env, owner)
        if isinstance(e, ast.Subscript):
            return _element(self.taint(e.value, env, owner))
        if isinstance(e, ast.Call):
            return self._call_taint(e, env, owner)
        if isinstance(e, (ast.List, ast.Tuple, ast.Set)):
            return self._first([self.taint(x, env, owner) for x in e.elts])
        if isinstance(e, ast.Dict):
            return self._first([self.taint(x, env, owner) for x in e.values])
        if isinstance(e, (ast.ListComp, ast.SetComp, ast.GeneratorExp)):
            return self.taint(e.elt, self._comprehension_env(e, env, owner), owner)
        if isinstance(e, ast.DictComp):
            return self.taint(e.value, self._comprehension_env(e, env, owner), owner)
        if isinstance(e, ast.Starred):
            return self.taint(e.value, env, owner)
        if isinstance(e, ast.NamedExpr):
            return self.taint(e.value, env, owner)
        if isinstance(e, ast.IfExp):
            return self._first([self.taint(e.body, env, owner), self.taint(e.orelse, env, owner)])
        if isinstance(e, ast.BoolOp):
            return self._first([self.taint(v, env, owner) for v in e.values])
        return None

    @staticmethod
    def _first(taints: list[Taint | None]) -> Taint | None:
        found = [t for t in taints if t is not None]
        return next((t for t in found if t.layer), found[0] if found else None)

    def _comprehension_env(
        self,
        e: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp,
        env: dict[str, Taint],
        owner: ast.ClassDef | None,
    ) -> dict[str, Taint]:
        inner = dict(env)
        for gen in e.generators:
            t = _element(self.taint(gen.iter, inner, owner))
            if t is not None:
                for n in ast.walk(gen.target):
                    if isinstance(n, ast.Name):
                        inner[n.id] = t
        return inner

    def _attribute_taint(
        self, e: ast.Attribute, env: dict[str, Taint], owner: ast.ClassDef | None
    ) -> Taint | None:
        value = e.value
        if e.attr == "__class__" and not (isinstance(value, ast.Name) and value.id in _SELF_NAMES):
            return Taint(f"`{_short(e)}`, the class of a run-time value", "__class__")
        attr = self_attr(e)
        if attr is not None and owner is not None:
            found = self.self_env.get(id(owner), {}).get(attr)
            if found is not None:
                return found
            base = self.layer_base(owner)
            if (
                base is not None
                and not self.defines(owner, attr)
                and attr not in self.index.self_values(owner)
            ):
                return Taint(f"`self.{attr}`, inherited from `{base}`", attr, layer=True)
            if attr in MODULE_ACCESSORS and self.holds_layers(owner):
                return Taint(f"`self.{attr}`, which holds this module's torch layers", attr, layer=True)
            return None
        d = dotted(e, self.aliases)
        if d and (d == "torch" or d.startswith("torch.")):
            return Taint(f"`{d}`", e.attr)
        inner = self.taint(value, env, owner)
        if inner is None:
            return self._member_of_instance(value, e.attr, owner)
        return Taint(f"{inner.what} (`.{e.attr}`)", e.attr, inner.layer)

    def _member_of_instance(self, value: ast.expr, attr: str, owner: ast.ClassDef | None) -> Taint | None:
        """`self.h.layer` where `self.h = Holder()` for an in-file class whose methods store a
        torch-derived `self.layer`."""
        held = self_attr(value)
        if held is None or owner is None:
            return None
        for stored in self.index.self_values(owner).get(held, ()):
            if isinstance(stored, ast.Call) and isinstance(stored.func, ast.Name):
                cls = self.index.classes.get(stored.func.id)
                found = self.self_env.get(id(cls), {}).get(attr) if cls is not None else None
                if found is not None:
                    return Taint(f"`self.{held}.{attr}`, {found.what}", found.leaf, found.layer)
        return None

    def _call_taint(self, e: ast.Call, env: dict[str, Taint], owner: ast.ClassDef | None) -> Taint | None:
        func = e.func
        name = func.id if isinstance(func, ast.Name) else None
        if name == "type" and len(e.args) == 1:
            arg = e.args[0]
            if isinstance(arg, ast.Name) and arg.id in _SELF_NAMES:
                base = self.layer_base(owner) if owner is not None else None
                return (
                    Taint(f"`type(self)`, which derives from `{base}`", "type", layer=True) if base else None
                )
            return Taint(f"`{_short(e)}`, the class of a run-time value", "type")
        if name == "super" and owner is not None:
            base = self.layer_base(owner)
            return Taint(f"`super()`, which reaches `{base}`", "super", layer=True) if base else None
        if name in ("getattr", "vars") and e.args:
            return self.taint(e.args[0], env, owner)
        if name == "partial" or callee_name(func) == "partial":
            # the function, or a torch value bound as an argument (`partial(dict, act=F.relu)`)
            return (self.taint(e.args[0], env, owner) if e.args else None) or self._held(e, env, owner)
        if name in _ITERATION_HELPERS:
            return _element(self._held(e, env, owner))
        if name is not None and name in self.index.classes and name not in env:
            return self.instance_taint(self.index.classes[name])
        d = dotted(func, self.aliases)
        if d is not None:
            if d.startswith("torch.nn.") and not d.startswith("torch.nn.functional."):
                last = d.rsplit(".", 1)[-1]
                if last in NN_CONTAINERS:
                    held = self._held(e, env, owner)
                    return None if held is None else Taint(f"`{last}` holding {held.what}", last, layer=True)
                if last[:1].isupper() and last not in NN_NON_COMPUTE:
                    return Taint(f"the `{d}` layer", "forward", layer=True)
            return None if d.startswith("torch.") else self._built_from(e, env, owner)
        callee = self.taint(func, env, owner)
        if callee is None:
            own = name is not None and (name in self.names.module_funcs or name in self.index.nested)
            return None if own else self._built_from(e, env, owner)
        if isinstance(func, ast.Attribute) and func.attr in (
            *MODULE_ACCESSORS,
            "values",
            "items",
            "get",
            "pop",
            "__getitem__",
            "__getattribute__",
            "__getattr__",
            "copy",
        ):
            # what the container holds answers to its own name (`relu`), not the accessor's (`get`)
            held = self.taint(func.value, env, owner) or callee
            return _element(Taint(f"{callee.what} (`.{func.attr}(...)`)", held.leaf, callee.layer))
        if callee.leaf in ("__getattribute__", "__getattr__", "__dict__"):
            return callee
        if isinstance(func, ast.Call) and callee_name(func.func) == "partial":
            return callee  # `partial(dict, act=F.relu)()` builds what the partial holds
        return None

    def _held(self, e: ast.Call, env: dict[str, Taint], owner: ast.ClassDef | None) -> Taint | None:
        """The first torch-derived value among the arguments and keyword values of `e`."""
        return self._first([self.taint(a, env, owner) for a in [*e.args, *(k.value for k in e.keywords)]])

    def _built_from(self, e: ast.Call, env: dict[str, Taint], owner: ast.ClassDef | None) -> Taint | None:
        """A call of a function the file does not define (`types.SimpleNamespace(act=F.relu)`,
        `dict(act=torch.relu)`, `make(torch.relu)`): its result may hold any torch-derived argument,
        so it is that argument's taint (the file's own functions are followed through their
        parameters instead)."""
        held = self._held(e, env, owner)
        if held is None:
            return None
        return Taint(f"`{_short(e)}`, built from {held.what}", held.leaf, held.layer)

    def holds_layers(self, cls: ast.ClassDef) -> bool:
        return self.layer_base(cls) is not None or any(
            t.layer for t in self.self_env.get(id(cls), {}).values()
        )

    # -- environments ---------------------------------------------------------------------------
    def build(self) -> None:
        """Module names, then (three rounds) every class's `self` stores and every reached
        function's names, with arguments flowing into the file's own functions."""
        for _ in range(2):
            for stmt in self.index.tree.body:
                self._bind_statement(stmt, self.module_env, None)
        for cls in self.index.classes.values():
            env = self.self_env.setdefault(id(cls), {})
            for kind_attr, kind in self.names.kinds_for(cls).items():
                if kind == "torch" and not kind_attr.endswith("*"):
                    env.setdefault(
                        kind_attr,
                        Taint(f"`self.{kind_attr}`, a torch layer or function", "forward", layer=True),
                    )
            for stmt in cls.body:  # class attributes: `act = nn.ReLU()`
                if isinstance(stmt, ast.Assign):
                    t = self.taint(stmt.value, {}, cls)
                    for target in stmt.targets:
                        if t is not None and isinstance(target, ast.Name):
                            env.setdefault(target.id, t)
        for _ in range(3):
            for cls in self.index.classes.values():
                for fn in cls.body:
                    if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        self.envs[id(fn)] = self.function_env(fn, cls)
            for r in self.reached:
                self.envs[id(r.fn)] = self.function_env(r.fn, r.owner)
                self._flow_arguments(r.fn, self.envs[id(r.fn)], r.owner)

    def function_env(self, fn: Function, owner: ast.ClassDef | None) -> dict[str, Taint]:
        env: dict[str, Taint] = dict(self.params.get(id(fn), {}))
        stmts = list(ast.walk(fn))
        for _ in range(3):
            for node in stmts:
                self._bind_statement(node, env, owner, walk=False)
        return env

    def _store(self, target: ast.AST, t: Taint, env: dict[str, Taint], owner: ast.ClassDef | None) -> None:
        """`target` now holds (or, for a container write or a store into an object's attribute,
        contains) `t`: `h.f = nn.ReLU()` / `self.h.f = ...` make `h` / `self.h` hold the layer."""
        while isinstance(target, ast.Subscript) or (
            isinstance(target, ast.Attribute) and self_attr(target) is None
        ):
            target = target.value
        if isinstance(target, ast.Name):
            env.setdefault(target.id, t)
        elif isinstance(target, (ast.Tuple, ast.List)):
            for elt in target.elts:
                self._store(elt, t, env, owner)
        elif isinstance(target, ast.Starred):
            self._store(target.value, t, env, owner)
        elif (attr := self_attr(target)) is not None and owner is not None:
            self.self_env.setdefault(id(owner), {}).setdefault(attr, t)

    def _bind_statement(
        self, node: ast.AST, env: dict[str, Taint], owner: ast.ClassDef | None, walk: bool = True
    ) -> None:
        nodes = ast.walk(node) if walk else [node]
        for n in nodes:
            if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and n.value is not None:
                t = self.taint(n.value, env, owner)
                if t is not None:
                    for target in n.targets if isinstance(n, ast.Assign) else [n.target]:
                        self._store(target, t, env, owner)
            elif isinstance(n, (ast.For, ast.AsyncFor, ast.comprehension)):
                t = _element(self.taint(n.iter, env, owner))
                if t is not None:
                    self._store(n.target, t, env, owner)
            elif isinstance(n, ast.withitem) and n.optional_vars is not None:
                t = self.taint(n.context_expr, env, owner)
                if t is not None:
                    self._store(n.optional_vars, t, env, owner)
            elif isinstance(n, ast.NamedExpr):
                t = self.taint(n.value, env, owner)
                if t is not None:
                    self._store(n.target, t, env, owner)
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
                func = n.func
                args = [*n.args, *(k.value for k in n.keywords)]
                if func.attr in _CONTAINER_MUTATORS:
                    t = self._first([self.taint(a, env, owner) for a in args])
                    if t is not None:
                        self._store(func.value, t, env, owner)
                elif func.attr in ("add_module", "register_module") and len(n.args) >= 2:
                    t = self.taint(n.args[1], env, owner)
                    key = n.args[0]
                    if (
                        t is not None
                        and isinstance(func.value, ast.Name)
                        and func.value.id == "self"
                        and owner is not None
                    ):
                        if isinstance(key, ast.Constant) and isinstance(key.value, str):
                            self.self_env.setdefault(id(owner), {}).setdefault(key.value, t)
                        self.self_env.setdefault(id(owner), {}).setdefault("_modules", t)
            elif isinstance(n, ast.Call) and callee_name(n.func) == "setattr" and len(n.args) >= 3:
                recv = n.args[0]
                t = self.taint(n.args[2], env, owner)
                if t is not None and isinstance(recv, ast.Name) and recv.id == "self" and owner is not None:
                    key = n.args[1]
                    if isinstance(key, ast.Constant) and isinstance(key.value, str):
                        self.self_env.setdefault(id(owner), {}).setdefault(key.value, t)
                    self.self_env.setdefault(id(owner), {}).setdefault("_modules", t)

    def _flow_arguments(self, fn: Function, env: dict[str, Taint], owner: ast.ClassDef | None) -> None:
        """Torch-derived arguments of calls of the file's own functions and methods taint the
        parameters they land in (`helper(self.conv, x)` → `def helper(f, x): f(x)`)."""
        for call in (n for n in ast.walk(fn) if isinstance(n, ast.Call)):
            args = [self.taint(a, env, owner) for a in call.args]
            kwargs = {k.arg: self.taint(k.value, env, owner) for k in call.keywords if k.arg}
            if not any(args) and not any(kwargs.values()):
                continue
            for target, skip in self._callees(call.func, owner):
                params = [a.arg for a in [*target.args.posonlyargs, *target.args.args]][skip:]
                seeded = self.params.setdefault(id(target), {})
                for p, t in zip(params, args, strict=False):
                    if t is not None:
                        seeded.setdefault(p, t)
                for k, t in kwargs.items():
                    if t is not None and k is not None:
                        seeded.setdefault(k, t)
                if target.args.vararg and any(args[len(params) :]):
                    seeded.setdefault(target.args.vararg.arg, self._first(args[len(params) :]) or args[0])  # type: ignore[arg-type]

    def _callees(self, func: ast.expr, owner: ast.ClassDef | None) -> Iterator[tuple[Function, int]]:
        """The file's functions a call of `func` may enter, with how many leading parameters
        (`self`) the call does not pass."""
        if isinstance(func, ast.Name):
            if func.id in self.names.module_funcs:
                yield self.names.module_funcs[func.id], 0
            for nested in self.index.nested.get(func.id, ()):
                yield nested, 0
            return
        attr = self_attr(func)
        if attr is not None and owner is not None:
            method = self.index.methods(owner).get(attr)
            if method is not None:
                yield method, 1


def taint_findings(names: Bindings, reached: list[Reached], level: Strictness) -> list[Finding]:
    """Calls of torch-derived values, reflection, and inherited layer forwards, in every reached function."""
    analysis = _Analysis(names, reached, level)
    analysis.build()
    out: list[Finding] = []
    for r in reached:
        env = analysis.envs.get(id(r.fn)) or analysis.function_env(r.fn, r.owner)
        for node in ast.walk(r.fn):
            out += _node_findings(node, env, r.owner, analysis)
    # a helper class deriving from a layer is judged where its instances are called (`self.h(x)`:
    # `instance_taint`), so one held for its weights only stays allowed; `ModelNew` itself is called
    out += _inherited_forward(names.cls, analysis)
    return out


def _inherited_forward(cls: ast.ClassDef, a: _Analysis) -> list[Finding]:
    base = a.layer_base(cls)
    if base is None or a.defines(cls, "forward"):
        return []
    who = f"`{cls.name}`"
    return [
        Finding(
            "static.torch_op_in_forward",
            cls,
            f"{who} (line {cls.lineno}) derives from the torch layer `{base}` and does not define "
            "`forward`: the inherited forward runs PyTorch, not your CUDA kernel. Derive from "
            "`nn.Module` and define `forward` to call your own kernel (the compiled extension's "
            "function).",
            warning=a.level is Strictness.LENIENT,
        )
    ]


def _element(t: Taint | None) -> Taint | None:
    """What a container, accessor or iterator of `t` hands out: for layers, a layer (called: forward)."""
    if t is None or not t.layer:
        return t
    return Taint(t.what, "forward", layer=True)


def _glue(leaf: str, level: Strictness) -> bool:
    if leaf in MODULE_GLUE or leaf in NN_NON_COMPUTE or leaf in TORCH_CUDA_PLUMBING or leaf in STREAM_APIS:
        return True
    if leaf in TENSOR_GLUE_ALWAYS or torch_function_allowed(leaf, level):
        return True
    return level is not Strictness.STRICT and leaf in TENSOR_GLUE_DEFAULT


def _node_findings(
    node: ast.AST, env: dict[str, Taint], owner: ast.ClassDef | None, a: _Analysis
) -> Iterator[Finding]:
    if isinstance(node, ast.Attribute) and node.attr in _REFLECTION_ATTRS and isinstance(node.ctx, ast.Load):
        yield _reflection(node, f"`{_short(node)}` reaches attributes by name or through the class hierarchy")
        return
    if not isinstance(node, ast.Call):
        return
    func = node.func
    name = func.id if isinstance(func, ast.Name) else None
    d = dotted(func, a.aliases)
    if name == "vars" or d in _REFLECTION_CALLS:
        yield _reflection(node, f"`{_short(node)}` looks attributes up by name")
        return
    if (name == "partial" or callee_name(func) == "partial" or d == "functools.partial") and node.args:
        first = node.args[0]
        if (isinstance(first, ast.Name) and first.id in ("getattr", "vars", "setattr")) or (
            dotted(first, a.aliases) or ""
        ) in _REFLECTION_CALLS:
            yield _reflection(node, f"`{_short(node)}` wraps a lookup by name")
            return
    for arg in [*node.args, *(k.value for k in node.keywords)]:
        if isinstance(arg, ast.Name) and arg.id in ("getattr", "vars"):
            yield _reflection(
                arg, f"`{arg.id}` passed as a value (in `{_short(node)}`) looks attributes up by name"
            )
    if name == "getattr" and len(node.args) >= 2:
        key = node.args[1]
        if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
            recv = node.args[0]
            mine = (isinstance(recv, ast.Name) and recv.id == "self") or a.names.is_extension(
                recv, _local_names(a, owner)
            )
            if not mine:
                yield _reflection(
                    node, f"`{_short(node)}` looks up an attribute whose name the file does not fix"
                )
                return
    if name in _HIGHER_ORDER or d in _HIGHER_ORDER:
        for arg in node.args[:1]:
            t = a.taint(arg, env, owner)
            if t is not None and not _glue(t.leaf, a.level):
                yield _torch_call(node, arg, t, a.level)
                return
    if d is not None:
        return  # spelled as a module path: `static/forward.py` judges it by name
    callee = a.taint(func, env, owner)
    if callee is None or _glue(callee.leaf, a.level):
        return
    if callee.leaf[:1].isupper() and not callee.layer:
        return  # building a torch object (`torch.cuda.Event`): judged where it is called
    yield _torch_call(node, func, callee, a.level)


def _torch_call(node: ast.Call, func: ast.expr, callee: Taint, level: Strictness) -> Finding:
    """`static.torch_op_in_forward` for a call of (or through) the torch-derived `func`."""
    return Finding(
        "static.torch_op_in_forward",
        node,
        f"`{_short(func)}(...)` (line {node.lineno}) calls {callee.what}: a PyTorch op or layer reached "
        "through a value rather than by name still runs PyTorch, not your CUDA kernel. Call your own "
        "kernel (the compiled extension's function) instead; glue such as `torch.empty_like`, `.view`, "
        "`.contiguous` is allowed (docs/anticheat.md).",
        warning=level is Strictness.LENIENT,
    )


def _local_names(a: _Analysis, owner: ast.ClassDef | None) -> LocalNames:
    return LocalNames(a.names.kinds_for(owner))


def _reflection(node: ast.AST, what: str) -> Finding:
    return Finding(
        "static.dynamic_code",
        node,
        f"{what} (line {getattr(node, 'lineno', '?')}) in code `ModelNew` runs: reflection can reach a "
        "PyTorch op without naming it, so the static checks reject it. Name what you call, and call your "
        "own kernel (the compiled extension's function) for the computation.",
    )
