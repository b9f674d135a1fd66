"""The C++/CUDA text a `load_inline` call will receive, recovered from the AST where it is knowable.

`source/document.py` maps *literal* sources character by character (for compiler messages). A source
built from literals by simple expressions — an f-string whose fields are module-level
constants, `"".join([...])` of literals, `.format(...)`, `+`, `%`, `.replace(...)`,
`textwrap.dedent(...)` — has no such map, but its value is still fixed by the file, so the
static C++ checks can read it. `resolve_call_sources()` evaluates those expressions without
running anything; an element it cannot evaluate (a function's result, a file's contents, a
module variable assigned twice) comes back as `None`, and the static stage reports it
(`static.dynamic_source`), because anything could hide in it.

Constants: a module-level name bound exactly once (top-level `x = ...` or `x: T = ...`, never
augmented) to a str/int/float/bool literal, to int arithmetic over such names, or to a string
expression of the kinds above. Not covered: names bound in functions, loops or branches,
container look-ups (`SRC["relu"]`), methods beyond those listed — all are `None` (dynamic).
"""

from __future__ import annotations

import ast
import textwrap
from dataclasses import dataclass

from cudice.verifier.source.document import LOAD_INLINE_PARAMS, callee_name

_MAX_DEPTH = 64
_MAX_CHARS = 4_000_000  # a "source" built by repetition beyond this is not a kernel file
Value = str | int | float | bool | list["Value"]


@dataclass(frozen=True, slots=True)
class ResolvedSource:
    """One element of `cpp_sources`/`cuda_sources`: its expression and its text (None: dynamic)."""

    kind: str  # "cpp" or "cuda"
    index: int
    node: ast.expr
    text: str | None


@dataclass(frozen=True, slots=True)
class ResolvedCall:
    """What one `load_inline(...)` call compiles, as far as the file fixes it."""

    node: ast.Call
    sources: tuple[ResolvedSource, ...]
    dynamic_args: tuple[ast.AST, ...]  # `**kwargs` or a sources argument that is not a str/list

    @property
    def is_complete(self) -> bool:
        return not self.dynamic_args and all(s.text is not None for s in self.sources)


def load_inline_nodes(tree: ast.Module) -> list[ast.Call]:
    """The `load_inline(...)` calls in the order `document.parse_document` records them."""
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and callee_name(n.func) == "load_inline"]


def resolve_call_sources(tree: ast.Module, call: ast.Call) -> ResolvedCall:
    """Evaluate the `cpp_sources`/`cuda_sources` arguments of `call` (see the module docstring)."""
    env = ModuleConstants(tree, _enclosing_function(tree, call), reader=call)
    args: dict[str, ast.expr] = dict(zip(LOAD_INLINE_PARAMS, call.args, strict=False))
    dynamic: list[ast.AST] = [k for k in call.keywords if k.arg is None]
    dynamic += [a for a in call.args if isinstance(a, ast.Starred)]
    args.update({k.arg: k.value for k in call.keywords if k.arg})
    sources: list[ResolvedSource] = []
    for kind in ("cpp", "cuda"):
        expr = args.get(f"{kind}_sources")
        if expr is None or (isinstance(expr, ast.Constant) and expr.value is None):
            continue
        elements = env.elements(expr)
        if elements is None:
            value = env.value(expr)
            where = env.definition(expr)
            if isinstance(value, list) and all(isinstance(v, str) for v in value):
                sources += [ResolvedSource(kind, i, where, str(v)) for i, v in enumerate(value)]
            elif isinstance(value, str):
                sources.append(ResolvedSource(kind, 0, where, value))
            else:
                dynamic.append(env.definition(expr))
            continue
        for i, e in enumerate(elements):
            v = env.value(e)
            sources.append(ResolvedSource(kind, i, env.definition(e), v if isinstance(v, str) else None))
    return ResolvedCall(call, tuple(sources), tuple(dynamic))


def call_functions(tree: ast.Module, call: ast.Call) -> tuple[str, ...] | None:
    """The `functions=` names of a `load_inline` call, where the file fixes them (a literal, a constant)."""
    args: dict[str, ast.expr] = dict(zip(LOAD_INLINE_PARAMS, call.args, strict=False))
    args.update({k.arg: k.value for k in call.keywords if k.arg})
    expr = args.get("functions")
    if expr is None:
        return None
    value = ModuleConstants(tree, _enclosing_function(tree, call), reader=call).value(expr)
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(str(v) for v in value)
    return None


class ModuleConstants:
    """Evaluates expressions over the file's module-level constants (nothing is executed)."""

    def __init__(
        self,
        tree: ast.Module,
        scope: ast.FunctionDef | ast.AsyncFunctionDef | None = None,
        reader: ast.Call | None = None,
    ) -> None:
        """`scope`: the function whose local bindings shadow the module's; `reader`: the call being
        resolved (under whatever name it calls `load_inline`), whose arguments only read a list."""
        bound: dict[str, list[ast.expr | None]] = {}
        for stmt in tree.body:
            if isinstance(stmt, ast.Assign):
                for t in stmt.targets:
                    for name in _target_names(t):
                        bound.setdefault(name, []).append(stmt.value if isinstance(t, ast.Name) else None)
            elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                bound.setdefault(stmt.target.id, []).append(stmt.value)
            elif (
                isinstance(stmt, ast.AugAssign)
                and isinstance(stmt.op, ast.Add)
                and isinstance(stmt.target, ast.Name)
                and len(prev := bound.get(stmt.target.id, [])) == 1
                and prev[0] is not None
            ):
                # `SRC = "..."` then `SRC += "..."` at module level: statements run in order, so the value
                # is the sum (a later `+=` than the call only adds text the checks also read)
                prev[0] = ast.copy_location(ast.BinOp(left=prev[0], op=ast.Add(), right=stmt.value), prev[0])
            elif isinstance(stmt, (ast.AugAssign, ast.For, ast.With, ast.If, ast.Try, ast.While)):
                for n in ast.walk(stmt):  # anything bound inside these is not a constant
                    if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                        bound.setdefault(n.id, []).extend([None, None])
            elif isinstance(stmt, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef)):
                names = (
                    [a.asname or a.name for a in stmt.names]
                    if isinstance(stmt, (ast.Import, ast.ImportFrom))
                    else [stmt.name]
                )
                for name in names:
                    bound.setdefault(name.split(".")[0], []).extend([None, None])
        for n in ast.walk(tree):  # `global X` in a function makes X assignable at run time
            if isinstance(n, ast.Global):
                for name in n.names:
                    bound.setdefault(name, []).extend([None, None])
        self._single = {k: v[0] for k, v in bound.items() if len(v) == 1 and v[0] is not None}
        if scope is not None:
            self._bind_locals(scope)
        for name in _mutable_uses(
            tree, {k for k, v in self._single.items() if isinstance(v, (ast.List, ast.Tuple))}, reader
        ):
            del self._single[name]  # `SRC.append(open(p).read())` changes what the call receives

    def _bind_locals(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        """Names a function binds shadow the module's: one plain assignment is a constant, a parameter
        or any other store is not
        (`def __init__(self): src = \"\"\"...\"\"\"; load_inline(..., cuda_sources=src)`)."""
        declared_global = {
            name for n in ast.walk(fn) if isinstance(n, (ast.Global, ast.Nonlocal)) for name in n.names
        }
        local: dict[str, list[ast.expr | None]] = {}
        args = fn.args
        for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
            if a is not None:
                local.setdefault(a.arg, []).extend([None, None])
        plain: set[int] = set()  # targets of `name = value`, counted as bindings with a value
        for n in ast.walk(fn):
            if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None:
                targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                names = [t for t in targets if isinstance(t, ast.Name)]
                if len(names) == len(targets):
                    for t in names:
                        plain.add(id(t))
                        local.setdefault(t.id, []).append(n.value)
        for n in ast.walk(fn):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and id(n) not in plain:
                local.setdefault(n.id, []).extend([None, None])
        for name, values in local.items():
            if name in declared_global:
                continue
            self._single.pop(name, None)
            if len(values) == 1 and values[0] is not None:
                self._single[name] = values[0]

    def definition(self, expr: ast.expr) -> ast.expr:
        """The expression a name stands for (followed through single bindings), for locating findings."""
        for _ in range(_MAX_DEPTH):
            if not (isinstance(expr, ast.Name) and expr.id in self._single):
                break
            expr = self._single[expr.id]
        return expr

    def elements(self, expr: ast.expr, depth: int = 0) -> list[ast.expr] | None:
        """The element expressions of a literal list/tuple (through single-bound names), else None."""
        if isinstance(expr, (ast.List, ast.Tuple)):
            return list(expr.elts) if not any(isinstance(e, ast.Starred) for e in expr.elts) else None
        if isinstance(expr, ast.Name) and depth < _MAX_DEPTH and expr.id in self._single:
            return self.elements(self._single[expr.id], depth + 1)
        return None

    def value(self, expr: ast.expr, depth: int = 0) -> Value | None:
        if depth > _MAX_DEPTH:
            return None
        d = depth + 1
        if isinstance(expr, ast.Constant) and isinstance(expr.value, (str, int, float, bool)):
            return expr.value
        if isinstance(expr, ast.Name):
            bound = self._single.get(expr.id)
            return self.value(bound, d) if bound is not None else None
        if isinstance(expr, (ast.List, ast.Tuple)):
            items = [self.value(e, d) for e in expr.elts]
            return None if any(i is None for i in items) else [i for i in items if i is not None]
        if isinstance(expr, ast.JoinedStr):
            return self._fstring(expr, d)
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub):
            v = self.value(expr.operand, d)
            return -v if isinstance(v, (int, float)) and not isinstance(v, bool) else None
        if isinstance(expr, ast.BinOp):
            return _binop(expr.op, self.value(expr.left, d), self.value(expr.right, d))
        if isinstance(expr, ast.Call):
            return self._call(expr, d)
        return None

    def _fstring(self, expr: ast.JoinedStr, depth: int) -> str | None:
        parts: list[str] = []
        for v in expr.values:
            if isinstance(v, ast.Constant):
                parts.append(str(v.value))
                continue
            if not isinstance(v, ast.FormattedValue):
                return None
            field = self.value(v.value, depth)
            spec = self._fstring(v.format_spec, depth) if isinstance(v.format_spec, ast.JoinedStr) else ""
            if field is None or isinstance(field, list) or spec is None:
                return None
            if v.conversion == ord("r"):
                field = repr(field)
            try:
                parts.append(format(field, spec))
            except (ValueError, TypeError):
                return None
        return "".join(parts)

    def _call(self, call: ast.Call, depth: int) -> Value | None:
        func = call.func
        if call.keywords and not (isinstance(func, ast.Attribute) and func.attr == "format"):
            return None
        args = [self.value(a, depth) for a in call.args]
        if any(a is None for a in args) or any(isinstance(a, ast.Starred) for a in call.args):
            return None
        if (
            isinstance(func, ast.Name)
            and func.id == "str"
            and len(args) == 1
            and not isinstance(args[0], list)
        ):
            return str(args[0])
        if callee_name(func) == "dedent" and len(args) == 1 and isinstance(args[0], str):
            return textwrap.dedent(args[0])
        if not isinstance(func, ast.Attribute):
            return None
        recv = self.value(func.value, depth)
        if not isinstance(recv, str):
            return None
        if (
            func.attr == "join"
            and len(args) == 1
            and isinstance(args[0], list)
            and all(isinstance(a, str) for a in args[0])
        ):
            return recv.join(str(a) for a in args[0])
        if func.attr == "format":
            kwargs = {k.arg: self.value(k.value, depth) for k in call.keywords if k.arg}
            if any(v is None for v in kwargs.values()) or any(k.arg is None for k in call.keywords):
                return None
            try:
                return recv.format(*args, **kwargs)
            except (IndexError, KeyError, ValueError, AttributeError):
                return None
        if func.attr == "replace" and len(args) == 2 and all(isinstance(a, str) for a in args):
            return recv.replace(str(args[0]), str(args[1]))
        if func.attr in ("strip", "lstrip", "rstrip") and not args:
            return str(getattr(recv, func.attr)())
        return None


def enclosing_function(tree: ast.Module, node: ast.AST) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The innermost function whose body contains `node`, or None at module level."""
    return _enclosing_function(tree, node)


def _enclosing_function(tree: ast.Module, node: ast.AST) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The innermost function whose body contains `node`, or None at module level."""
    found: ast.FunctionDef | ast.AsyncFunctionDef | None = None
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(n is node for n in ast.walk(fn)):
            if found is None or any(n is fn for n in ast.walk(found)):
                found = fn
    return found


def _mutable_uses(tree: ast.Module, list_names: set[str], reader: ast.Call | None = None) -> set[str]:
    """Names bound to a list that appear anywhere but inside an expression that only reads them
    (a `load_inline` argument, a list, `+`, a `.join(...)` argument): a method call, a subscript or
    a call argument elsewhere could change the list before the call reads it."""
    if not list_names:
        return set()
    parents = {id(c): p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
    found: set[str] = set()
    for n in ast.walk(tree):
        if not (isinstance(n, ast.Name) and n.id in list_names) or isinstance(n.ctx, ast.Store):
            continue
        parent = parents.get(id(n))
        if isinstance(parent, ast.keyword):
            parent = parents.get(id(parent))
        reads_only = isinstance(parent, (ast.List, ast.Tuple, ast.BinOp)) or (
            isinstance(parent, ast.Call)
            and n in [*parent.args, *(k.value for k in parent.keywords)]
            and (parent is reader or callee_name(parent.func) in ("load_inline", "join"))
        )
        if not reads_only:
            found.add(n.id)
    return found


def _target_names(t: ast.expr) -> list[str]:
    if isinstance(t, ast.Name):
        return [t.id]
    if isinstance(t, (ast.Tuple, ast.List)):
        return [n for e in t.elts for n in _target_names(e)]
    return []


def _binop(op: ast.operator, left: Value | None, right: Value | None) -> Value | None:
    if left is None or right is None:
        return None
    if isinstance(op, ast.Add) and isinstance(left, str) and isinstance(right, str):
        return left + right
    if (
        isinstance(op, ast.Mult)
        and isinstance(left, str)
        and isinstance(right, int)
        and len(left) * max(right, 0) <= _MAX_CHARS
    ):
        return left * right
    if isinstance(op, ast.Mod) and isinstance(left, str):
        try:
            return left % (tuple(right) if isinstance(right, list) else right)
        except (TypeError, ValueError, KeyError):
            return None
    nums = (int, float)
    if (
        not (isinstance(left, nums) and isinstance(right, nums))
        or isinstance(left, bool)
        or isinstance(right, bool)
    ):
        return None
    try:
        if isinstance(op, ast.Add):
            return left + right
        if isinstance(op, ast.Sub):
            return left - right
        if isinstance(op, ast.Mult):
            return left * right
        if isinstance(op, ast.FloorDiv):
            return left // right
        if isinstance(op, ast.Mod):
            return left % right
        if (
            isinstance(op, ast.LShift)
            and isinstance(left, int)
            and isinstance(right, int)
            and 0 <= right < 64
        ):
            return left << right
    except ZeroDivisionError:
        return None
    return None
