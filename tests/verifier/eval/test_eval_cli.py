"""`cudice eval` and its scores as a user runs it (real process, real nvcc via the session cache).
`cudice eval --ray` and the report files are tested in tests/verifier/dist/test_ray_eval.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cudice.verifier.eval.cli import score
from cudice.verifier.source.result import Stage, Verdict, VerifyResult
from cudice_cli import cudice
from verifier_marks import needs_nvcc


def test_eval_explains_the_folder_layout(tmp_path: Path, examples_dir: Path) -> None:
    probs, cands = tmp_path / "problems", tmp_path / "candidates"
    probs.mkdir()
    cands.mkdir()
    empty = cudice("eval", str(probs), str(cands), cache=tmp_path)
    assert (
        empty.returncode == 2
        and "Expected layout" in empty.stderr
        and "CANDIDATES/19_ReLU.py" in empty.stderr
    )
    (probs / "19_ReLU.py").write_text((examples_dir / "relu.py").read_text())
    (cands / "relu_cuda.py").write_text((examples_dir / "relu_cuda.py").read_text())
    mismatch = cudice("eval", str(probs), str(cands), cache=tmp_path)
    assert (
        mismatch.returncode == 2 and "same file name" in mismatch.stderr and "relu_cuda.py" in mismatch.stderr
    )


def test_fast_p_is_over_all_problems() -> None:
    def res(verdict: Verdict, speedup: float | None) -> VerifyResult:
        return VerifyResult(verdict, Stage.TIMING, "c.py", speedup=speedup, speedup_min=speedup)

    results = {
        "a.py": res(Verdict.CORRECT, 2.5),
        "b.py": res(Verdict.CORRECT, 1.5),
        "c.py": res(Verdict.INCORRECT, 9.0),
    }
    s = score(["a.py", "b.py", "c.py", "d.py"], results)  # d.py has no candidate
    assert (s.correct, s.fast_1, s.fast_2) == (0.5, 0.5, 0.25)
    assert s.num_problems == 4 and s.num_candidates == 3
    assert [r["verdict"] for r in s.per_problem] == ["correct", "correct", "incorrect", "missing"]


@needs_nvcc
@pytest.mark.slow
@pytest.mark.e2e
def test_eval_folder_json(tmp_path: Path, examples_dir: Path, cache_root: Path) -> None:
    probs, cands = tmp_path / "problems", tmp_path / "candidates"
    probs.mkdir()
    cands.mkdir()
    for name in ("relu.py", "softmax.py"):
        (probs / name).write_text((examples_dir / name).read_text())
    (cands / "relu.py").write_text(
        (examples_dir / "relu_cuda.py").read_text()
    )  # same build as relu_cuda: cached
    proc = cudice("eval", "--json", str(probs), str(cands), cache=cache_root)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["num_problems"] == 2 and out["num_candidates"] == 1
    verdicts = {r["problem"]: r["verdict"] for r in out["per_problem"]}
    assert verdicts["softmax.py"] == "missing"
    if not out["gpu"]:
        assert verdicts["relu.py"] == "compiled" and out["correct"] == 0.0
