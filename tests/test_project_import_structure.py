"""The import structure of `cudice.verifier`, `cudice.server` and `cudice.model`, read from the source.

AST only: nothing is imported. Every module under `verifier/`, `server/` and `model/` is one node
of one project-wide graph; an edge is an import of another module of the project, found wherever it
stands (top level, in a class body, under `if TYPE_CHECKING:` or `try:`, inside a function).
`from cudice.verifier import name` (or `from . import name`) is an edge to the submodule
`cudice.verifier.name` when there is one, else to the package `cudice.verifier` itself.

Asserted, per package (parametrized, so a failure names the package):

(a) No import cycle through a module of the package among **module-level** imports: every import
    that is not inside a function (or lambda) body, so class bodies and `if TYPE_CHECKING:` blocks
    count. A type-only import runs nothing, but a cycle through one still ties the two modules
    together (neither can be read, typed or moved without the other), so it counts like the rest.
    A cycle is reported as its path, one per strongly connected component, so every tangle shows
    at once. Cycles that cross packages are reported under each package they pass through.
(b) No module takes a private name from another module of the project: neither
    `from A import _name` nor `A._name` where `A` is bound to a project module by `import A`,
    `import A as a` or `from P import A`. Private is a leading single underscore (`_x`, also `__x`
    without a trailing `__`); dunder names (`__version__`, `__all__`) are public. Function-level
    imports count here too: deferring an import does not make reaching into a private helper fine.
(c) No import cycle as in (a), with **function-level** imports counted too (every import,
    wherever it stands). A deferred import cannot make a module fail to load, but a function that
    imports the module importing it still ties the two together. `cudice.verifier` and
    `cudice.model` are strict: no cycle at all, and so is `cudice.server` while
    `SERVER_CYCLE_EDGES` is empty (it is today). An edge listed there, with why, is left out of
    the server's graph and every other cycle fails; an entry that no longer exists as a
    function-level import, or no longer closes a cycle, fails too: the list only shrinks.

Not covered: imports built at run time (`importlib.import_module`, `__import__`), `getattr(A, "_x")`
and `monkeypatch.setattr(A, "_x", ...)` (tests are not scanned), what a package's `__init__`
re-exports, the implicit load of a parent package when a submodule is imported (`import a.b` also
runs `a/__init__`; that edge is left out, or every `__init__` that imports its submodules would be
a cycle), and imports of anything outside the three packages (tests, bench, third-party).
`tests/model/test_import_structure.py` is the older check for `cudice.model` alone (function-level
imports counted as in (c)); this file generalises it to the three packages.
It is not named `test_import_structure.py`: the test folders have no `__init__.py`, so pytest
imports test files by their base name, and two files of one name break collection of the suite.
"""

from __future__ import annotations

import ast
import itertools
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = {"cudice.verifier": "verifier", "cudice.server": "server", "cudice.model": "model"}

# Private-name imports that check (b) lets pass, as (importing file, imported module, name): none.
# An entry is for an import whose owner is removing it; (b) still fails on every other one.
KNOWN_EXCEPTIONS: frozenset[tuple[str, str, str]] = frozenset()


# Function-level imports of `cudice.server` that close import cycles, left out of check (c), as
# (importer, imported module) -> why: none. The four the server had were broken by moving the
# shared piece below both ends (server/log_levels.py, server/init_snapshot.py,
# server/publishing.py); an entry here is for a cycle whose owner is removing it.
SERVER_CYCLE_EDGES: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Import:
    importer: str  # module name
    target: str  # the project module the name comes from (or the imported module itself)
    name: str | None  # the name taken from `target` (None: `target` itself is what is imported)
    line: int
    deferred: bool  # inside a function body: not run when the importer loads
    type_only: bool  # under `if TYPE_CHECKING:`: read by type checkers only


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def project_modules() -> dict[str, Path]:
    """Every module of the three packages, by its installed name (`cudice.verifier.run.judge`)."""
    out: dict[str, Path] = {}
    for package, folder in PACKAGES.items():
        root = REPO / folder
        for path in sorted(root.rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([package, *parts])] = path
    return out


def package_of(module: str) -> str:
    return next(p for p in PACKAGES if module == p or module.startswith(p + "."))


def absolute_source(module: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute module name an `ImportFrom` names (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if path.name != "__init__.py":
        base = base[:-1]  # a module's relative imports start from its package
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _dotted(node: ast.expr) -> str | None:
    """`a.b.c` for a chain of attribute accesses on a name, else None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


class _Walker(ast.NodeVisitor):
    """Collects a module's project imports, and `alias._name` accesses on imported modules."""

    def __init__(self, module: str, path: Path, modules: dict[str, Path]) -> None:
        self.module, self.path, self.modules = module, path, modules
        self.imports: list[Import] = []
        self.module_aliases: dict[str, str] = {}  # local name -> project module it is bound to
        self.attributes: list[tuple[str, str, int]] = []  # (module, private attribute, line)
        self._depth = 0  # function nesting
        self._type_checking = 0  # `if TYPE_CHECKING:` nesting

    def _add(self, target: str, name: str | None, line: int) -> None:
        self.imports.append(Import(self.module, target, name, line, self._depth > 0, self._type_checking > 0))

    def _function(self, node: ast.AST) -> None:
        self._depth += 1
        self.generic_visit(node)
        self._depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def visit_If(self, node: ast.If) -> None:
        if _dotted(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            self._type_checking += 1
            for child in node.body:
                self.visit(child)
            self._type_checking -= 1
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name in self.modules:
                self._add(alias.name, None, node.lineno)
                if alias.asname:
                    self.module_aliases[alias.asname] = alias.name

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        source = absolute_source(self.module, self.path, node)
        for alias in node.names:
            submodule = f"{source}.{alias.name}"
            if submodule in self.modules:
                self._add(submodule, None, node.lineno)
                self.module_aliases[alias.asname or alias.name] = submodule
            elif source in self.modules:
                self._add(source, alias.name, node.lineno)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if is_private(node.attr):
            dotted = _dotted(node.value)
            if dotted is not None:
                head, _, rest = dotted.partition(".")
                target = self.module_aliases.get(head, head) + (f".{rest}" if rest else "")
                if target in self.modules:
                    self.attributes.append((target, node.attr, node.lineno))
        self.generic_visit(node)


def walk(module: str, path: Path, modules: dict[str, Path]) -> _Walker:
    walker = _Walker(module, path, modules)
    walker.visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
    return walker


def module_level_graph(modules: dict[str, Path]) -> tuple[dict[str, set[str]], set[tuple[str, str]]]:
    """module -> the project modules it imports at module level (function-level imports left out),
    and the edges that are type-only (every module-level import behind them is under TYPE_CHECKING)."""
    graph: dict[str, set[str]] = {m: set() for m in modules}
    runtime: set[tuple[str, str]] = set()
    for module, path in modules.items():
        for imp in walk(module, path, modules).imports:
            if not imp.deferred and imp.target != module:
                graph[module].add(imp.target)
                if not imp.type_only:
                    runtime.add((module, imp.target))
    type_only = {(a, b) for a, targets in graph.items() for b in targets} - runtime
    return graph, type_only


def import_graph(modules: dict[str, Path]) -> tuple[dict[str, set[str]], set[tuple[str, str]]]:
    """module -> every project module it imports (function-level imports included), and the edges
    that exist only inside functions."""
    graph: dict[str, set[str]] = {m: set() for m in modules}
    module_level: set[tuple[str, str]] = set()
    for module, path in modules.items():
        for imp in walk(module, path, modules).imports:
            if imp.target != module:
                graph[module].add(imp.target)
                if not imp.deferred:
                    module_level.add((module, imp.target))
    deferred_only = {(a, b) for a, targets in graph.items() for b in targets} - module_level
    return graph, deferred_only


def without(graph: dict[str, set[str]], edges: Iterable[tuple[str, str]]) -> dict[str, set[str]]:
    """`graph` less `edges`."""
    dropped = set(edges)
    return {a: {b for b in targets if (a, b) not in dropped} for a, targets in graph.items()}


def reaches(graph: dict[str, set[str]], start: str, goal: str) -> bool:
    """Whether a path leads from `start` to `goal` in `graph`."""
    seen, todo = {start}, [start]
    while todo:
        node = todo.pop()
        if node == goal:
            return True
        for nxt in graph.get(node, ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return False


def describe(cycle: list[str], marked: set[tuple[str, str]], mark: str = "type only") -> str:
    """`a -> b -(type only)-> a`: the edges in `marked` carry `mark`."""
    out = cycle[0]
    for a, b in itertools.pairwise(cycle):
        out += (f" -({mark})-> " if (a, b) in marked else " -> ") + b
    return out


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components (iterative), each sorted; only those of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(graph[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, todo = work[-1]
            if todo:
                nxt = todo.pop(0)
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph.get(nxt, ()))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def shortest_cycle(graph: dict[str, set[str]], start: str, within: set[str]) -> list[str]:
    """The shortest path start -> ... -> start inside `within` (BFS; `start` must be on a cycle)."""
    parent: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for nxt in sorted(graph[node] & within):
            if nxt == start:
                path = [node]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                return [*reversed(path), start]
            if nxt not in parent:
                parent[nxt] = node
                queue.append(nxt)
    raise AssertionError(f"{start} is on no cycle")


def cycles_through(package: str, graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per tangle (strongly connected component) that holds a module of `package`."""
    found = []
    for component in strongly_connected(graph):
        mine = [m for m in component if package_of(m) == package]
        if mine:
            found.append(shortest_cycle(graph, mine[0], set(component)))
    return found


def private_imports(package: str, modules: dict[str, Path]) -> list[str]:
    """`file:line: ...` for every private name a module of `package` takes from another module."""
    offenders = []
    for module, path in modules.items():
        if package_of(module) != package:
            continue
        walker = walk(module, path, modules)
        rel = path.relative_to(REPO).as_posix()
        taken = [(i.target, i.name, i.line, "from {t} import {n}") for i in walker.imports if i.name]
        taken += [(t, n, line, "{t}.{n}") for t, n, line in walker.attributes]
        for target, name, line, shape in taken:
            if target == module or name is None or not is_private(name):
                continue
            if (rel, target, name) in KNOWN_EXCEPTIONS:
                continue
            offenders.append(f"{rel}:{line}: " + shape.format(t=target, n=name))
    return offenders


# --- the checks themselves ---------------------------------------------------------------------


def test_the_walk_sees_the_three_packages() -> None:
    modules = project_modules()
    graph, _ = module_level_graph(modules)
    for package in PACKAGES:
        assert sum(package_of(m) == package for m in modules) > 5, package
    assert "cudice.model.train.types" in graph["cudice.model.train.ppo"]  # intra-package edges
    assert "cudice.verifier.source.result" in graph["cudice.verifier.run.judge"]
    assert any(t.startswith("cudice.verifier") for t in graph["cudice.server.verification"])  # across


def test_the_walk_reads_every_import_form(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from . import a\n")
    (pkg / "a.py").write_text("X = 1\n_y = 2\n")
    (pkg / "b.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "import pkg.a as alias\n"
        "from pkg import a\n"
        "from .a import _y, X\n"
        "if TYPE_CHECKING:\n"
        "    from pkg.a import _t\n"
        "def f():\n"
        "    from . import c\n"
        "    return alias._y, a._z, a.__doc__, pkg.a._w\n"
    )
    (pkg / "c.py").write_text("import pkg.b\n")
    modules = {"pkg": pkg / "__init__.py", **{f"pkg.{n}": pkg / f"{n}.py" for n in "abc"}}
    walker = walk("pkg.b", modules["pkg.b"], modules)
    got = {(i.target, i.name, i.deferred, i.type_only) for i in walker.imports}
    assert got == {
        ("pkg.a", None, False, False),
        ("pkg.a", "_y", False, False),
        ("pkg.a", "X", False, False),
        ("pkg.a", "_t", False, True),  # under TYPE_CHECKING: still module level
        ("pkg.c", None, True, False),  # inside a function: deferred
    }
    assert {(t, n) for t, n, _ in walker.attributes} == {("pkg.a", "_y"), ("pkg.a", "_z"), ("pkg.a", "_w")}
    assert walk("pkg", modules["pkg"], modules).imports[0].target == "pkg.a"  # `from . import a`


def test_the_cycle_finder_reports_each_tangle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"e"}, "e": {"d", "a"}, "f": set()}
    assert strongly_connected(graph) == [["a", "b", "c"], ["d", "e"]]
    assert shortest_cycle(graph, "b", {"a", "b", "c"}) == ["b", "c", "a", "b"]
    assert describe(["b", "c", "a", "b"], {("c", "a")}) == "b -> c -(type only)-> a -> b"
    assert strongly_connected({"a": {"b"}, "b": set()}) == []


def test_private_names_are_single_underscore() -> None:
    assert is_private("_key") and is_private("_Stop") and is_private("__mangled")
    assert not is_private("__all__") and not is_private("public") and not is_private("__version__")


@pytest.mark.parametrize("package", ["cudice.verifier", "cudice.server", "cudice.model"])
def test_no_module_level_import_cycle(package: str) -> None:
    graph, type_only = module_level_graph(project_modules())
    cycles = cycles_through(package, graph)
    assert not cycles, f"module-level import cycles through {package}:\n" + "\n".join(
        describe(c, type_only) for c in cycles
    )


@pytest.mark.parametrize("package", ["cudice.verifier", "cudice.server", "cudice.model"])
def test_no_import_cycle_counting_function_level_imports(package: str) -> None:
    graph, deferred_only = import_graph(project_modules())
    if package == "cudice.server":
        graph = without(graph, SERVER_CYCLE_EDGES)
    cycles = cycles_through(package, graph)
    assert not cycles, (
        f"import cycles through {package}, function-level imports counted "
        "(-(in a function)-> marks an edge that exists only inside a function):\n"
        + "\n".join(describe(c, deferred_only, "in a function") for c in cycles)
    )


def test_the_allowed_server_edges_are_function_level_and_still_close_a_cycle() -> None:
    graph, deferred_only = import_graph(project_modules())
    stale = [
        f"{a} -> {b}: "
        + ("no longer imported inside a function only" if (a, b) not in deferred_only else "closes no cycle")
        for a, b in SERVER_CYCLE_EDGES
        if (a, b) not in deferred_only or not reaches(graph, b, a)
    ]
    assert not stale, "remove these entries from SERVER_CYCLE_EDGES:\n" + "\n".join(stale)


def test_the_cycle_check_counts_function_level_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "low.py").write_text("def f():\n    from pkg import high\n")
    (pkg / "high.py").write_text("from pkg import low\n")
    modules = {"pkg": pkg / "__init__.py", "pkg.low": pkg / "low.py", "pkg.high": pkg / "high.py"}
    graph, deferred_only = import_graph(modules)
    assert strongly_connected(graph) == [["pkg.high", "pkg.low"]]
    assert deferred_only == {("pkg.low", "pkg.high")}
    assert strongly_connected(module_level_graph(modules)[0]) == []
    assert reaches(graph, "pkg.high", "pkg.low") and not reaches(
        without(graph, deferred_only), "pkg.low", "pkg.high"
    )


@pytest.mark.parametrize(
    "package",
    ["cudice.verifier", "cudice.server", "cudice.model"],
)
def test_no_private_name_taken_from_another_module(package: str) -> None:
    offenders = private_imports(package, project_modules())
    assert not offenders, f"{package} takes private names from other modules:\n" + "\n".join(offenders)
