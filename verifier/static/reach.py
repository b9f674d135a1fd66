"""Which of a candidate's own code can run when `ModelNew` is called: the set `static/forward.py` judges.

Python looks a call up through the instance's class, its bases and its metaclass, so reading
`ModelNew.forward` alone misses compute moved elsewhere. `reachable()` starts from every method
the call protocol can enter — `forward`, `__call__`, `_call_impl`, `_wrapped_call_impl`,
`__getattribute__`, `__getattr__`, `__new__` of `ModelNew` and of its in-file bases — from every
method of its in-file metaclass (`type.__call__` builds the instance; a function given as
`metaclass=` builds the class) and from in-file class decorators, then follows what each reached
function names:

- `self.m`, `super().m`, `type(self).m` — every method `m` of the owner's class chain (`__init__`
  excluded: construction code);
- `self.a` — whatever `self.a = ...` stores anywhere in the class chain: an in-file class built
  there (`self.impl = _Impl()`) brings in all its methods but `__init__`, a named function or
  class all of it;
- a class attribute `a = value` of the chain read as `self.a` (or any `.a`): what `value` names,
  so a descriptor `a = _D()` brings in `_D.__get__`;
- a module-level function or lambda by name; an in-file class by name (all its methods, its
  bases' and its metaclass's); a module-level variable by name, also when a stored value names it
  (`self.ext = ext`): what its definitions and the module-level stores into it name (`ext.f = g`
  brings in `g`); lambdas and nested functions a stored value holds (`self.f = lambda x: ...`);
- functions registered on a reached one (`@forward.register`, `@impl.register(int)` of
  `singledispatch`/`singledispatchmethod`): the call dispatches to them.

Each reached function comes with the class whose `self` it sees (None for plain functions).

Replacing what the call protocol finds — `self.forward = ...`, `setattr(obj, "forward", ...)`,
`self.__class__ = ...`, hooks, a second binding of `ModelNew` — is not followed but rejected
(`static/protocol.py`, with `CALL_PROTOCOL_ATTRS` and `HOOK_INSTALLERS`); so is replacing the
extension or one of its functions (`static/forward.py`), whose replacement is followed as above.

Not covered: classes or functions from other files, objects reached through containers filled at
run time or through `getattr` with a computed name (rejected elsewhere as dynamic code).
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass

FORWARD_ROOTS = frozenset(
    {"forward", "__call__", "_call_impl", "_wrapped_call_impl", "__getattribute__", "__getattr__", "__new__"}
)
# Attributes through which `module(x)` finds the code it runs: storing to one replaces forward.
CALL_PROTOCOL_ATTRS = frozenset(
    {
        "forward",
        "__call__",
        "__class__",
        "__bases__",
        "_call_impl",
        "_wrapped_call_impl",
        "_compiled_call_impl",  # `nn.Module.__call__` runs it instead of `_call_impl` when set
        "__getattribute__",
        "__getattr__",
    }
)
# Methods that install code to run around `forward` on every call (and may replace its output).
HOOK_INSTALLERS = frozenset(
    {
        "register_forward_hook",
        "register_forward_pre_hook",
        "register_module_forward_hook",
        "register_module_forward_pre_hook",
        "register_module_call_hook",
    }
)

Function = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass(frozen=True, slots=True)
class Reached:
    fn: Function
    owner: ast.ClassDef | None  # the class whose `self` the function sees


class CodeIndex:
    """The file's classes, module functions and module variables, by name."""

    def __init__(self, tree: ast.Module, module_funcs: dict[str, ast.FunctionDef]) -> None:
        self.tree = tree
        self.funcs = module_funcs
        self.classes: dict[str, ast.ClassDef] = {}
        functions: list[Function] = []
        for n in ast.walk(tree):
            if isinstance(n, ast.ClassDef):
                self.classes.setdefault(n.name, n)
            elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                functions.append(n)
        direct = {id(n) for n in tree.body} | {
            id(n) for c in self.classes.values() for n in c.body
        }  # module functions and methods; every other def is nested in a function
        self.nested: dict[str, list[Function]] = {}
        for fn in functions:
            if id(fn) not in direct:
                self.nested.setdefault(fn.name, []).append(fn)
        self.module_vars: dict[str, list[ast.expr]] = {}
        for stmt in tree.body:
            call = stmt.value if isinstance(stmt, ast.Expr) else None
            if (
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Name)
                and call.func.id == "setattr"
                and len(call.args) >= 3
                and isinstance(call.args[0], ast.Name)
            ):  # `setattr(ModelNew, "act", _D())` stores into `ModelNew`
                self.module_vars.setdefault(call.args[0].id, []).append(call.args[2])
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                for t in targets:
                    # `ext.relu_out = _impl` / `OPS["a"] = f` store into `ext` / `OPS`: its value too
                    for name in (n.id for n in ast.walk(t) if isinstance(n, ast.Name)):
                        self.module_vars.setdefault(name, []).append(stmt.value)
        self._chains: dict[int, list[ast.ClassDef]] = {}
        self._values: dict[int, dict[str, list[ast.expr]]] = {}

    def chain(self, cls: ast.ClassDef) -> list[ast.ClassDef]:
        """`cls` and its in-file bases, nearest first (a simplified MRO)."""
        if id(cls) in self._chains:
            return self._chains[id(cls)]
        out: list[ast.ClassDef] = []
        todo = [cls]
        while todo:
            c = todo.pop(0)
            if any(c is o for o in out):
                continue
            out.append(c)
            todo += [b for b in (self.classes.get(base_name(e)) for e in c.bases) if b is not None]
        self._chains[id(cls)] = out
        return out

    def metaclasses(self, cls: ast.ClassDef) -> list[ast.ClassDef]:
        metas = [
            self.classes.get(base_name(k.value))
            for c in self.chain(cls)
            for k in c.keywords
            if k.arg == "metaclass"
        ]
        return [c for m in metas if m is not None for c in self.chain(m)]

    def methods(self, cls: ast.ClassDef) -> dict[str, Function]:
        """Method name → definition over the class chain (the nearest class wins)."""
        out: dict[str, Function] = {}
        for c in reversed(self.chain(cls)):
            out.update({n.name: n for n in c.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))})
        return out

    def self_values(self, cls: ast.ClassDef) -> dict[str, list[ast.expr]]:
        """`self.<attr>` → every value stored to it in any method of any class of the chain."""
        if id(cls) in self._values:
            return self._values[id(cls)]
        out: dict[str, list[ast.expr]] = {}
        for c in self.chain(cls):
            for fn in (n for n in c.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
                for n in ast.walk(fn):
                    if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None:
                        targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                        for t in targets:
                            if (
                                isinstance(t, ast.Attribute)
                                and isinstance(t.value, ast.Name)
                                and t.value.id == "self"
                            ):
                                out.setdefault(t.attr, []).append(n.value)
        self._values[id(cls)] = out
        return out


def reachable(index: CodeIndex, model_new: ast.ClassDef) -> list[Reached]:
    """Every in-file function that can run when `ModelNew` is called, in source order."""
    seen: dict[int, Reached] = {}
    todo: list[Reached] = []

    def add(fn: Function, owner: ast.ClassDef | None) -> None:
        if id(fn) not in seen:
            seen[id(fn)] = Reached(fn, owner)
            todo.append(seen[id(fn)])

    def add_class(cls: ast.ClassDef, with_init: bool) -> None:
        with_init = with_init and cls is not model_new  # ModelNew's own __init__ is construction
        for name, fn in index.methods(cls).items():
            if with_init or name != "__init__":
                add(fn, cls)
        for meta in index.metaclasses(cls):
            for fn in index.methods(meta).values():
                add(fn, meta)

    visited_vars: set[str] = set()

    def add_var(name: str) -> None:
        """A module variable forward names: what each of its definitions (and stores into it) names."""
        if name in index.module_vars and name not in visited_vars:
            visited_vars.add(name)
            for value in index.module_vars[name]:
                add_named(value)

    def add_named(expr: ast.expr, owner: ast.ClassDef | None = None) -> None:
        """What a stored value or a module variable's definition names, and the lambdas it holds
        (`self.f = lambda x: ...`: its body runs when forward calls `self.f`)."""
        built = {id(n.func) for n in ast.walk(expr) if isinstance(n, ast.Call)}
        for n in ast.walk(expr):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
                if n.id in index.classes:
                    add_class(index.classes[n.id], with_init=id(n) not in built)
                elif n.id in index.funcs:
                    add(index.funcs[n.id], None)
                else:  # `self.ext = ext` where `ext` was rebound or had attributes replaced
                    add_var(n.id)
                for fn in index.nested.get(n.id, ()):  # `def helper(x): ...; self.f = helper`
                    add(fn, owner)
            elif isinstance(n, ast.Lambda):
                add(lambda_function("<lambda>", n), owner)

    for cls in index.chain(model_new):  # a base's root runs through `super().forward(x)` too
        for fn in cls.body:
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.name in FORWARD_ROOTS:
                add(fn, model_new)
    for meta in index.metaclasses(model_new):
        for fn in index.methods(meta).values():
            add(fn, meta)
    for cls in index.chain(model_new):  # class decorators, and a metaclass that is a function
        for e in [*cls.decorator_list, *(k.value for k in cls.keywords)]:
            add_named(e)
    while todo:
        while todo:
            _follow(index, todo.pop(), add, add_class, add_named, add_var)
        for fn, owner in _registered(index, seen):  # `@forward.register def _(self, x: Tensor)`
            add(fn, owner)
    return sorted(seen.values(), key=lambda r: (r.fn.lineno, r.fn.col_offset))


def _follow(
    index: CodeIndex,
    item: Reached,
    add: Callable[[Function, ast.ClassDef | None], None],
    add_class: Callable[[ast.ClassDef, bool], None],
    add_named: Callable[[ast.expr, ast.ClassDef | None], None],
    add_var: Callable[[str], None],
) -> None:
    """Add what one reached function names."""
    chain = index.chain(item.owner) if item.owner is not None else []
    owner_values = index.self_values(item.owner) if item.owner is not None else {}
    for node in ast.walk(item.fn):
        if isinstance(node, ast.Attribute) and node.attr != "__init__":
            # `self.m`, `super().m`, `type(self).m`, `self.__class__.m`: every `m` of the chain; a
            # class attribute `m = _D()` brings in what its value names (a descriptor's `__get__`),
            # and so does whatever the module stores into a class of the chain (`ModelNew.m = _D()`)
            for cls in chain:
                add_var(cls.name)
                for fn in cls.body:
                    if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.name == node.attr:
                        add(fn, item.owner)
                    elif isinstance(fn, (ast.Assign, ast.AnnAssign)) and fn.value is not None:
                        targets = fn.targets if isinstance(fn, ast.Assign) else [fn.target]
                        if any(isinstance(t, ast.Name) and t.id == node.attr for t in targets):
                            add_named(fn.value, item.owner)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
            for value in owner_values.get(node.attr, ()):
                add_named(value, item.owner)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            if node.id in index.funcs:
                add(index.funcs[node.id], None)
            elif node.id in index.classes:
                add_class(index.classes[node.id], True)
            else:
                add_var(node.id)


def _registered(index: CodeIndex, seen: dict[int, Reached]) -> list[tuple[Function, ast.ClassDef | None]]:
    """Functions registered on a reached one (`@forward.register`, `@impl.register(int)` of a
    `singledispatch`/`singledispatchmethod`): a call of the reached one can dispatch to them."""
    reached_names = {r.fn.name: r.owner for r in seen.values()}
    out: list[tuple[Function, ast.ClassDef | None]] = []
    owners = {id(n): c for c in index.classes.values() for n in c.body}
    for n in ast.walk(index.tree):
        if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) or id(n) in seen:
            continue
        for deco in n.decorator_list:
            root = deco.func if isinstance(deco, ast.Call) else deco
            if isinstance(root, ast.Attribute) and isinstance(root.value, ast.Name):
                if root.value.id in reached_names:
                    out.append((n, owners.get(id(n), reached_names[root.value.id])))
                    break
    return out


def lambda_function(name: str, lam: ast.Lambda) -> ast.FunctionDef:
    """A lambda as the function it is (`name = lambda x: body` → `def name(x): return body`)."""
    fn = ast.FunctionDef(
        name=name,
        args=lam.args,
        body=[ast.Return(lam.body)],
        decorator_list=[],
        returns=None,
        type_comment=None,
    )
    fn = ast.copy_location(fn, lam)
    ast.fix_missing_locations(fn)
    return fn


def base_name(b: ast.expr) -> str:
    if isinstance(b, ast.Name):
        return b.id
    if isinstance(b, ast.Attribute):
        return b.attr
    if isinstance(b, ast.Call):  # e.g. a class factory; judged by what it names
        return base_name(b.func)
    return ""
