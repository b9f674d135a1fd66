"""Which names a Python file binds, for the parse and static stages alike.

`bound_names` collects every name the file binds in any scope (assignments, definitions, imports,
parameters, `global`/`nonlocal`, handlers, match captures), or None when a star import makes that
unknowable; `undefined_names` lists the names an expression reads that nothing binds and that are
not builtins (a misspelt `cuda_sources=cuda_srcx`). Not covered: scoping (a name bound in any
function counts as bound everywhere), names made by `exec`, `globals()` or `setattr` on the module.
"""

from __future__ import annotations

import ast
import builtins

# how a load_inline source reason says its name is unbound (the static checks make it an error)
NOT_DEFINED = "is not defined in this file"


def bound_names(tree: ast.Module) -> set[str] | None:
    """Every name the file binds anywhere (any scope), or None when a star import makes that unknowable."""
    names: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            names.add(n.id)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(n.name)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            for a in n.names:
                if a.name == "*":
                    return None
                names.add((a.asname or a.name).split(".")[0])
        elif isinstance(n, ast.arg):
            names.add(n.arg)
        elif isinstance(n, (ast.Global, ast.Nonlocal)):
            names.update(n.names)
        elif isinstance(n, ast.ExceptHandler) and n.name:
            names.add(n.name)
        elif isinstance(n, (ast.MatchAs, ast.MatchStar)) and n.name:
            names.add(n.name)
    return names


def undefined_names(expr: ast.AST, tree: ast.Module) -> list[str]:
    """Names read in `expr` that nothing in the file binds and that are not builtins (`cuda_srcx`)."""
    bound = bound_names(tree)
    if bound is None:
        return []
    return [
        n.id
        for n in ast.walk(expr)
        if isinstance(n, ast.Name)
        and isinstance(n.ctx, ast.Load)
        and n.id not in bound
        and not hasattr(builtins, n.id)
        and n.id != "__file__"
    ]
