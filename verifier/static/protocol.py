"""Stores that replace what `ModelNew(...)(x)` runs, which the forward checks would never read.

`nn.Module.__call__` finds the code it runs through the instance: its class (`__class__`, the
class's bases), the attributes `forward`, `__call__`, `_call_impl`, `__getattribute__`, hooks
installed around forward, and — for the verifier, which loads the name — the module-level
binding `ModelNew`. `call_protocol_findings()` reports every store that changes one of them,
on any object, in any form: `self.forward = f`, `type(self).forward = f`, `setattr(obj,
"forward", f)`, `object.__setattr__(self, "__class__", C)`, `obj.__dict__["forward"] = f`,
`self.__setstate__({"forward": f})` (it updates `__dict__`), `locals()["forward"] = f` in a class
body, `self.__dict__ |= d`, a namespace passed to a call (`dict.update(vars(self), d)`),
`functools.update_wrapper(self, obj)`,
`self.register_forward_hook(h)` or its hook tables (`self._forward_hooks`), a second
`ModelNew` (`static.monkey_patch`), and a `setattr` whose attribute name the file does not fix
(`static.dynamic_code`).

Not covered: stores through `globals()`, `sys.modules` or `__code__`, which `static/checks.py`
rejects as dynamic code before any of this matters.
"""

from __future__ import annotations

import ast
import re

from cudice.verifier.source.document import callee_name
from cudice.verifier.static.forward import Finding
from cudice.verifier.static.reach import CALL_PROTOCOL_ATTRS, HOOK_INSTALLERS
from cudice.verifier.static.sources import ModuleConstants

# `nn.Module`'s own hook tables (`self._forward_hooks`, `module._global_forward_hooks` …): writing one
# installs a hook without calling `register_*`.
_HOOK_TABLES = re.compile(
    r"_(?:global_)?(?:forward|backward|full_backward|module|buffer|parameter)\w*_hooks\w*"
)


def call_protocol_findings(tree: ast.Module) -> list[Finding]:
    """Stores that replace the code a call finds (`self.forward = f`, `setattr(obj, "forward", f)`,
    `object.__setattr__(self, "__class__", C)`, `obj.__dict__[k] = v`, `locals()[k] = v`,
    `obj.__setstate__(state)`), forward hooks, and every
    binding of `ModelNew` after the first."""
    out: list[Finding] = []
    consts: list[ModuleConstants] = []  # built on the first `setattr`-like call only
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for t in targets:
                for a in (n for n in ast.walk(t) if isinstance(n, (ast.Attribute, ast.Subscript))):
                    if isinstance(a, ast.Attribute) and a.attr in CALL_PROTOCOL_ATTRS:
                        out.append(_replaces_call(a, a.attr))
                    elif (isinstance(a, ast.Subscript) and _names_dict(a.value)) or (
                        a is t and _names_dict(a)  # `self.__dict__ |= {...}`, `obj.__dict__ = d`
                    ):
                        out.append(_replaces_call(a, None))
        elif isinstance(node, ast.Call):
            out += _call_finding(node, tree, consts)
        elif isinstance(node, ast.Attribute) and _HOOK_TABLES.fullmatch(node.attr):
            out.append(
                Finding(
                    "static.monkey_patch",
                    node,
                    f"`{ast.unparse(node)}` is one of `nn.Module`'s hook tables: an entry put there runs "
                    "around `forward` on every call and can replace its output. A kernel file needs no "
                    "hooks: do the work in `forward`.",
                )
            )
    for node in _model_new_bindings(tree)[1:]:
        out.append(
            Finding(
                "static.monkey_patch",
                node,
                "`ModelNew` is bound more than once: the verifier loads the name, so the last binding — "
                "not the class the checks read — would run. Define `class ModelNew` once and never "
                "rebind it.",
            )
        )
    return out


def _call_finding(node: ast.Call, tree: ast.Module, consts: list[ModuleConstants]) -> list[Finding]:
    name = callee_name(node.func)
    if name in ("setattr", "delattr", "__setattr__", "__delattr__"):
        bound = isinstance(node.func, ast.Attribute) and not _is_type_receiver(node.func.value)
        pos = 0 if bound else 1
        if len(node.args) <= pos:
            return []
        key = node.args[pos]
        if not consts:
            consts.append(ModuleConstants(tree))
        value = consts[0].value(key)
        if isinstance(value, str) and value in CALL_PROTOCOL_ATTRS:
            return [_replaces_call(node, value)]
        if not isinstance(value, str) and not _has_literal_prefix(key):
            return [
                Finding(
                    "static.dynamic_code",
                    node,
                    f"`{ast.unparse(node.func)}` with an attribute name the file does not fix: it could "
                    "replace `forward` (or `__class__`) with code the checks never read. Use plain "
                    "`self.name = value` assignments.",
                )
            ]
    elif (
        isinstance(node.func, ast.Attribute)
        and name in ("update", "setdefault", "__setitem__", "__ior__")
        and _names_dict(node.func.value)
    ):
        return [_replaces_call(node, None)]
    elif name == "__setstate__":
        # `nn.Module.__setstate__(state)` is `self.__dict__.update(state)`: any key, `forward` included
        return [_replaces_call(node, None)]
    elif any(_names_dict(a) for a in [*node.args, *(k.value for k in node.keywords)]):
        # `dict.update(self.__dict__, d)`: a namespace handed to a call can be written through
        return [_replaces_call(node, None)]
    elif name == "update_wrapper" and not (
        node.args and isinstance(node.args[0], ast.Name) and node.args[0].id in _function_names(tree)
    ):  # copies the wrapped object's `__dict__` into the wrapper: fine for a wrapper function only
        return [_replaces_call(node, None)]
    elif name in HOOK_INSTALLERS:
        return [
            Finding(
                "static.monkey_patch",
                node,
                f"`{name}(...)` installs code that runs around `forward` on every call and can replace "
                "its inputs or output, unseen by the checks that read `forward`. A kernel file needs no "
                "hooks: do the work in `forward`.",
            )
        ]
    return []


def _function_names(tree: ast.Module) -> set[str]:
    return {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def _replaces_call(node: ast.AST, attr: str | None) -> Finding:
    what = (
        f"assigns `{attr}`"
        if attr
        else "writes through an attribute namespace (`__dict__`, `vars()`, `locals()`, `__setstate__`), "
        "which can set any attribute"
    )
    return Finding(
        "static.monkey_patch",
        node,
        f"{what}: replacing what `model(x)` looks up (`forward`, `__call__`, `__class__`) "
        "makes the module run code other than the `forward` the checks read. Define `forward` in "
        "`ModelNew` and leave it in place.",
    )


def _names_dict(e: ast.expr) -> bool:
    """`obj.__dict__`, `vars(obj)` or `locals()` (in a class body: the class namespace): a write
    through it can replace any attribute, `forward` included."""
    return (isinstance(e, ast.Attribute) and e.attr == "__dict__") or (
        isinstance(e, ast.Call) and callee_name(e.func) in ("vars", "locals")
    )


def _is_type_receiver(e: ast.expr) -> bool:
    """`object.__setattr__(obj, name, v)` / `nn.Module.__setattr__(obj, ...)` take the object first;
    `self.__setattr__(name, v)` / `super().__setattr__(name, v)` do not."""
    if isinstance(e, ast.Call):
        return False
    return not (isinstance(e, ast.Name) and e.id in ("self", "cls", "obj"))


def _has_literal_prefix(e: ast.expr) -> bool:
    """`f"conv{i}"`: a computed name that cannot be `forward` or a dunder."""
    if not isinstance(e, ast.JoinedStr) or not e.values:
        return False
    first = e.values[0]
    return (
        isinstance(first, ast.Constant)
        and isinstance(first.value, str)
        and bool(first.value)
        and not first.value.startswith("_")
        and not any(a.startswith(first.value) for a in CALL_PROTOCOL_ATTRS)
    )


def _model_new_bindings(tree: ast.Module) -> list[ast.AST]:
    """Every statement that binds the name `ModelNew`, in source order."""
    out: list[ast.AST] = []
    for n in ast.walk(tree):
        if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == "ModelNew":
            out.append(n)
        elif isinstance(n, ast.Name) and n.id == "ModelNew" and isinstance(n.ctx, (ast.Store, ast.Del)):
            out.append(n)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            out += [n for a in n.names if (a.asname or a.name) == "ModelNew"]
        elif isinstance(n, (ast.Global, ast.Nonlocal)) and "ModelNew" in n.names:
            out.append(n)
    return sorted(out, key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0)))
