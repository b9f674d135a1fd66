"""`cudice.model`'s import structure, read from the source (AST only, nothing is imported).

Every module under `model/` is one node; an edge is an import of another module of the package,
wherever it stands (top level, inside a function, under `if TYPE_CHECKING:`: a type-only import is
still a dependency, and a cycle through one is what makes two modules impossible to split).
`from cudice.model.pkg import name` is an edge to `pkg.name` when that is a module, else to `pkg`.
Asserted: the graph is acyclic, and no module imports a private (`_name`) name from another.
Not covered: imports built at run time (`importlib.import_module`), other packages (server,
verifier), and what a package's `__init__` re-exports.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = "cudice.model"
ROOT = Path(__file__).parents[2] / "model"


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join([PACKAGE, *parts])] = path
    return out


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _absolute(module: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute module name an `ImportFrom` names (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not _is_package(path):
        base = base[:-1]  # a module's relative imports start from its package
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _imports(module: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, str | None, int]]:
    """(imported module of the package, name taken from it or None, line) for every import."""
    found: list[tuple[str, str | None, int]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules:
                    found.append((alias.name, None, node.lineno))
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(module, path, node)
            for alias in node.names:
                if f"{source}.{alias.name}" in modules:  # a submodule
                    found.append((f"{source}.{alias.name}", None, node.lineno))
                elif source in modules:
                    found.append((source, alias.name, node.lineno))
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {
        m: {target for target, _, _ in _imports(m, p, modules) if target != m} for m, p in modules.items()
    }


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as [a, b, ..., a], or None (iterative DFS with white/grey/black marks)."""
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    for start in sorted(graph):
        if state.get(start):
            continue
        stack: list[tuple[str, list[str]]] = [(start, sorted(graph[start]))]
        path = [start]
        state[start] = 1
        while stack:
            node, todo = stack[-1]
            if not todo:
                state[node] = 2
                stack.pop()
                path.pop()
                continue
            nxt = todo.pop(0)
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if not state.get(nxt):
                state[nxt] = 1
                path.append(nxt)
                stack.append((nxt, sorted(graph.get(nxt, ()))))
    return None


def test_the_walk_sees_the_package() -> None:
    graph = _graph()
    assert "cudice.model.train.rl" in graph and "cudice.model.train.types" in graph
    assert "cudice.model.train.ppo" in graph["cudice.model.train.rl"]  # the graph has edges
    assert "cudice.model.train.types" in graph["cudice.model.train.ppo"]


def test_the_cycle_finder_reports_a_cycle() -> None:
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": set()}) is None


def test_model_has_no_import_cycle() -> None:
    cycle = _find_cycle(_graph())
    assert cycle is None, "import cycle in cudice.model: " + " -> ".join(cycle or [])


def test_no_module_imports_another_modules_private_names() -> None:
    modules = _modules()
    offenders = [
        f"{path.relative_to(ROOT.parent)}:{line}: from {target} import {name}"
        for module, path in modules.items()
        for target, name, line in _imports(module, path, modules)
        if name is not None and name.startswith("_") and not name.startswith("__") and target != module
    ]
    assert not offenders, "private names imported across modules:\n" + "\n".join(offenders)
