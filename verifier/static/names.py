"""What a name in a candidate's Python file refers to, resolved the way Python would — not by spelling.

- `canonical()` — a dotted path reduced to the object it names: a library module that imports
  another one re-exports it (`torch.cuda.torch` is `torch`, `torch.utils.cpp_extension.os` is
  `os`), so a path that passes through such a module restarts there. Exemptions keyed on a
  prefix (`torch.cuda.*` is device plumbing) would otherwise be reachable from any module.
- `import_aliases()` — local name → canonical dotted path for every import and every
  module-level alias of one (`F = torch.nn.functional`, `li = load_inline`, `mm = partial(torch.mm)`).
- `LoadInlineUses` — every call that resolves to `torch.utils.cpp_extension.load_inline`, under
  any name (`from ... import load_inline as li`, `import torch.utils.cpp_extension as ce`,
  `cpp_extension = torch.utils.cpp_extension`, `make = ce.load_inline` inside a function), and
  every use of it as a value the checks cannot follow to a call (`partial(load_inline, ...)`, a
  container, an argument): those are rejected, since their sources cannot be read; and every
  mention of a builder of code the file does not hold (`cpp_extension.load`, under any name).
- `is_defined()` — whether a name is bound anywhere in the file (or is a builtin), so an
  undefined name can be reported as such instead of as code built at run time.

Not covered: names bound through `globals()`/`setattr` on modules (rejected elsewhere as dynamic
code), star imports (their names are unknown: a name that may come from one counts as defined),
and re-exports other than whole modules (`torch.nn.modules.linear.F`); those still start with
`torch.` and are judged as torch.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from cudice.verifier.source.document import callee_name
from cudice.verifier.static.policy import OPAQUE_BUILDERS

LOAD_INLINE = "torch.utils.cpp_extension.load_inline"
# Modules that library modules commonly import at their top level, so `<library>.<module>` is
# that module. A path segment after the first naming one of them restarts the path there.
REEXPORTED_MODULES = frozenset(
    {
        "torch",
        "os",
        "sys",
        "time",
        "ctypes",
        "subprocess",
        "threading",
        "multiprocessing",
        "importlib",
        "builtins",
        "inspect",
        "shutil",
        "tempfile",
        "pickle",
        "gc",
        "atexit",
        "numpy",
    }
)


# What `from <module> import *` binds that the checks must follow.
STAR_EXPORTS = {"torch.utils.cpp_extension": ("load_inline", "load")}


def canonical(path: str) -> str:
    """`torch.cuda.torch.relu` → `torch.relu`; `torch.utils.cpp_extension.os.system` → `os.system`."""
    parts = path.split(".")
    for i in range(len(parts) - 1, 0, -1):
        if parts[i] in REEXPORTED_MODULES:
            return ".".join(parts[i:])
    return path


def dotted(node: ast.AST, aliases: dict[str, str]) -> str | None:
    """`F.relu` → "torch.nn.functional.relu" through import aliases, canonical; None for non-module roots."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name) and node.id in aliases:
        return canonical(".".join([aliases[node.id], *reversed(parts)]))
    return None


def import_aliases(tree: ast.Module) -> dict[str, str]:
    """Local name → canonical dotted path, for every import in the file (`F` → torch.nn.functional)
    and every module-level alias of one (`_aten = torch.ops.aten`, `li = load_inline`,
    `mm = partial(torch.mm)`)."""
    aliases = _plain_imports(tree)
    for _ in range(3):  # chains settle in a few passes: `T = torch; F = T.nn.functional`
        for stmt in tree.body:
            if isinstance(stmt, ast.Assign):
                _bind_aliases(stmt, aliases)
    return aliases


def local_aliases(
    fn: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda, aliases: dict[str, str]
) -> dict[str, str]:
    """`aliases` plus the function's own `name = <module path>` assignments (`make = ce.load_inline`)."""
    out = dict(aliases)
    assigns = [n for n in ast.walk(fn) if isinstance(n, ast.Assign)]
    for _ in range(2):
        for stmt in assigns:
            _bind_aliases(stmt, out)
    return out


def _bind_aliases(stmt: ast.Assign, aliases: dict[str, str]) -> None:
    value = stmt.value
    if isinstance(value, ast.Call) and callee_name(value.func) == "partial" and value.args:
        value = value.args[0]
    d = dotted(value, aliases) if isinstance(value, (ast.Name, ast.Attribute)) else None
    for t in stmt.targets:
        if d and isinstance(t, ast.Name):
            aliases[t.id] = d
        elif isinstance(t, ast.Tuple) and isinstance(stmt.value, ast.Tuple):
            for name, v in zip(t.elts, stmt.value.elts, strict=False):
                vd = dotted(v, aliases) if isinstance(v, (ast.Name, ast.Attribute)) else None
                if vd and isinstance(name, ast.Name):
                    aliases[name.id] = vd


def _plain_imports(tree: ast.Module) -> dict[str, str]:
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    aliases[a.asname] = canonical(a.name)
                else:
                    root = a.name.split(".")[0]
                    aliases[root] = root
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                if a.name == "*":  # the names it binds are unknown; the builders it may bind are not
                    for name in STAR_EXPORTS.get(canonical(node.module), ()):
                        aliases[name] = f"{canonical(node.module)}.{name}"
                    continue
                aliases[a.asname or a.name] = canonical(f"{node.module}.{a.name}")
    return aliases


def parent_map(tree: ast.AST) -> dict[int, ast.AST]:
    return {id(c): p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}


def enclosing_function(
    node: ast.AST, parents: dict[int, ast.AST]
) -> ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | None:
    p = parents.get(id(node))
    while p is not None and not isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        p = parents.get(id(p))
    return p


@dataclass(slots=True)
class LoadInlineUses:
    """Every `load_inline` call of a file, and the uses of `load_inline` that are not calls."""

    calls: list[ast.Call] = field(default_factory=list)  # in `ast.walk` order
    spelled: list[ast.Call] = field(default_factory=list)  # the subset the document records
    values: list[ast.expr] = field(default_factory=list)  # passed around: cannot be followed
    opaque: list[ast.expr] = field(default_factory=list)  # `cpp_extension.load` & co. under any name

    @classmethod
    def of(cls, tree: ast.Module, aliases: dict[str, str]) -> LoadInlineUses:
        parents = parent_map(tree)
        scopes: dict[int, dict[str, str]] = {}

        def resolve(e: ast.expr) -> str | None:
            fn = enclosing_function(e, parents)
            if fn is None:
                return dotted(e, aliases)
            if id(fn) not in scopes:
                scopes[id(fn)] = local_aliases(fn, aliases)
            return dotted(e, scopes[id(fn)])

        uses = cls()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Load):
                parent = parents.get(id(node))
                if not isinstance(parent, ast.Attribute) and OPAQUE_BUILDERS.match(resolve(node) or ""):
                    uses.opaque.append(node)
            if isinstance(node, ast.Call):
                if callee_name(node.func) == "load_inline":
                    uses.calls.append(node)
                    uses.spelled.append(node)
                elif isinstance(node.func, (ast.Name, ast.Attribute)) and resolve(node.func) == LOAD_INLINE:
                    uses.calls.append(node)
            elif isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Load):
                resolved = resolve(node)
                if resolved != LOAD_INLINE and not (
                    isinstance(node, ast.Attribute) and node.attr == "load_inline"
                ):
                    continue  # `<anything>.load_inline` counts even when its receiver is unknown
                parent = parents.get(id(node))
                if isinstance(parent, ast.Call) and parent.func is node:
                    continue
                if isinstance(parent, ast.Attribute):
                    continue  # part of a longer path, judged on the whole path
                if resolved == LOAD_INLINE and _followed_alias(parent, node, parents):
                    continue  # `li = load_inline`: its calls are found through the alias
                uses.values.append(node)
        return uses


def _followed_alias(stmt: ast.AST | None, node: ast.expr, parents: dict[int, ast.AST]) -> bool:
    """`name = load_inline` at module level or in a function body: the bindings `import_aliases` and
    `local_aliases` follow (not class attributes, tuples or attributes, which they do not)."""
    if not (
        isinstance(stmt, ast.Assign)
        and stmt.value is node
        and all(isinstance(t, ast.Name) for t in stmt.targets)
    ):
        return False
    p = parents.get(id(stmt))
    if isinstance(p, ast.Module):
        return True
    while p is not None and not isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
        if isinstance(p, (ast.ClassDef, ast.Lambda)):
            return False
        p = parents.get(id(p))
    return isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef))
