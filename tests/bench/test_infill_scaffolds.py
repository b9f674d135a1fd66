"""The hand-written infill scaffolds in bench/infill_scaffolds/ are well formed (no compiling).

Every scaffold has a problem and a solution of the same name; each scaffold splits
(`cudice.model.scaffold.split_scaffold`) with an empty middle; each solution splits to the same
prefix and suffix with a middle that holds a `__global__` kernel; each problem file defines
`Model`, `get_inputs` and `get_init_inputs` (read with `ast`, nothing imported or run).
Whether the solutions compile is `cudice verify`'s job (see the folder's README).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from cudice.model.scaffold import split_scaffold

ROOT = Path(__file__).resolve().parents[2] / "bench" / "infill_scaffolds"
SCAFFOLDS = ROOT / "scaffolds"
SOLUTIONS = ROOT / "solutions"
PROBLEMS = ROOT / "problems"
NAMES = sorted(p.stem for p in SCAFFOLDS.glob("*.py"))


def stems(folder: Path) -> set[str]:
    return {p.stem for p in folder.glob("*.py")}


def test_every_scaffold_has_a_problem_and_a_solution() -> None:
    assert len(NAMES) >= 10
    assert stems(PROBLEMS) == set(NAMES)
    assert stems(SOLUTIONS) == set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_scaffold_splits_empty_and_solution_fills_it(name: str) -> None:
    scaffold_text = (SCAFFOLDS / f"{name}.py").read_text()
    solution_text = (SOLUTIONS / f"{name}.py").read_text()
    scaffold = split_scaffold(scaffold_text, f"scaffolds/{name}.py")
    assert scaffold.middle.strip() == ""
    solution = split_scaffold(solution_text, f"solutions/{name}.py")
    assert solution.prefix == scaffold.prefix
    assert solution.suffix == scaffold.suffix
    assert "__global__" in solution.middle
    # the scaffold is the candidate wrapper only: the reference lives in problems/
    defined = top_level_names(scaffold_text)
    assert "ModelNew" in defined
    assert not defined & {"Model", "get_inputs", "get_init_inputs"}


@pytest.mark.parametrize("name", NAMES)
def test_problem_defines_the_kernelbench_names(name: str) -> None:
    defined = top_level_names((PROBLEMS / f"{name}.py").read_text())
    assert {"Model", "get_inputs", "get_init_inputs"} <= defined


def top_level_names(source: str) -> set[str]:
    tree = ast.parse(source)
    return {node.name for node in tree.body if isinstance(node, ast.ClassDef | ast.FunctionDef)}
