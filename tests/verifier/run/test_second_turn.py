"""The correctness phase's second turn (run/judge_correctness.py `_second_turn`, run/weights.py
`second_turn`), through the real judge and runners on the CPU: a reference's one-element parameter
meets both signs in every run, so a kernel that drops its sign (or assumes it positive) is rejected
whatever the seed, and an honest one, which folds it in its constructor or reads it per call, passes.
Each verdict is asked of several runs: with one sign per run, the cheats passed one run in two."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the OS boundary is Linux's")

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]
from corpus.manifest import Case  # noqa: E402
from test_judge import judge_case  # noqa: E402

RUNS = 2  # per candidate (without the second turn, the cheats passed 1 and 3 runs of 6)

REFERENCE = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    """A ReLU then a learnable one-element scale, and a PReLU (one slope)."""

    def __init__(self, dim: int = 64) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1))
        self.act = nn.PReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(torch.relu(x) * self.scale - 0.25)


def get_inputs():
    return [torch.randn(32, 64)]


def get_init_inputs():
    return []
'''

HEAD = "# cudice: reference=references/scaled_prelu.py\nimport torch\nimport torch.nn as nn\n\n\n"

CANDIDATES = {
    # honest: the scale read per call, the slope folded into a float in the constructor
    "honest": """
class ModelNew(nn.Module):
    def __init__(self, dim: int = 64) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1))
        self.act = nn.PReLU()
        self.slope = float(self.act.weight.detach())

    def forward(self, x):
        z = torch.relu(x) * self.scale - 0.25
        return torch.where(z >= 0, z, self.slope * z)
""",
    # assumes the scale positive: relu(x) * s == relu(x * s) only for s >= 0
    "assumes_positive": """
class ModelNew(nn.Module):
    def __init__(self, dim: int = 64) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1))
        self.act = nn.PReLU()

    def forward(self, x):
        return self.act(torch.relu(x * self.scale) - 0.25)
""",
    # drops the slope's sign
    "drops_sign": """
class ModelNew(nn.Module):
    def __init__(self, dim: int = 64) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1))
        self.act = nn.PReLU()

    def forward(self, x):
        z = torch.relu(x) * self.scale - 0.25
        return torch.where(z >= 0, z, self.act.weight.abs() * z)
""",
}


def _case(tmp_path: Path, name: str, reference: str = REFERENCE) -> Case:
    (tmp_path / "references").mkdir(exist_ok=True)
    (tmp_path / "references" / "scaled_prelu.py").write_text(reference)
    path = tmp_path / f"{name}.py"
    path.write_text(HEAD + CANDIDATES[name].lstrip())
    return Case(path, "runtime", "correct" if name == "honest" else "incorrect", (), "")


@pytest.mark.parametrize("name", sorted(CANDIDATES))
def test_a_one_element_parameter_meets_both_signs_in_every_run(name: str, tmp_path: Path) -> None:
    case = _case(tmp_path, name)
    results: list[Any] = [judge_case(case, tmp_path / "cache")[0] for _ in range(RUNS)]
    for result in results:
        detail = (result.verdict, [(d.code, d.message[:300]) for d in result.diagnostics])
        assert result.verdict.value == case.verdict, detail
        if name != "honest":  # the mismatch is the second turn's where the first draw was the one it fits
            assert any(d.code == "correctness.mismatch" for d in result.diagnostics), detail
    if name == "honest":
        assert all(r.num_trials == 7 for r in results)  # six planned, and the second turn's
    else:
        said = " ".join(d.message for r in results for d in r.diagnostics)
        assert "Trial 1/6" in said or "second turn" in said


def test_the_second_turn_rebuilds_from_the_init_inputs_the_reference_was_built_with(tmp_path: Path) -> None:
    """A `get_init_inputs()` that draws (another value on each call) still gets its second turn: the
    candidate's runner is sent the very values the reference was built with, not a new call's. The
    honest candidate passes with the second turn's trial counted; the sign-dropping one fails."""
    drawing = REFERENCE.replace(
        "def get_init_inputs():\n    return []",
        "def get_init_inputs():\n    return [int(torch.randint(32, 96, (1,)))]",
    )
    assert drawing != REFERENCE
    honest = judge_case(_case(tmp_path, "honest", drawing), tmp_path / "cache")[0]
    assert honest.verdict.value == "correct", [(d.code, d.message[:300]) for d in honest.diagnostics]
    assert honest.num_trials == 7  # six planned, and the second turn's
    cheat = judge_case(_case(tmp_path, "drops_sign", drawing), tmp_path / "cache")[0]
    assert cheat.verdict.value == "incorrect"
