"""`cudice verify` / `cudice eval` as a user runs them (real process, real nvcc via the session cache)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cudice.verifier.eval_cli import score
from cudice.verifier.result import Stage, Verdict, VerifyResult
from verifier_marks import needs_nvcc


def cudice(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CUDICE_CACHE_DIR": str(cache)}
    return subprocess.run([sys.executable, "-m", "cudice.server.cli", *args], capture_output=True, text=True,
                          env=env, timeout=900)


@needs_nvcc
@pytest.mark.slow
@pytest.mark.e2e
def test_verify_json_relu_broken_line_14(examples_dir: Path, build_cache: Path) -> None:
    proc = cudice("verify", "--json", str(examples_dir / "relu_broken.py"), cache=build_cache)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)  # exactly one JSON object, nothing else on stdout
    assert out["verdict"] == "compile_error"
    errors = [d for d in out["diagnostics"] if d["severity"] == "error"]
    assert [(d["line"], d["column"], d["code"]) for d in errors] == [(14, 18, "compile.error")]
    assert {"speedup", "runtime_ms", "reference_runtime_ms"} <= set(out)


@needs_nvcc
@pytest.mark.slow
@pytest.mark.e2e
def test_verify_relu_cuda_readable_report_says_what_was_skipped(examples_dir: Path, build_cache: Path) -> None:
    proc = cudice("verify", str(examples_dir / "relu_cuda.py"), cache=build_cache)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    if "no CUDA GPU" not in text and "No CUDA GPU" not in text:
        pytest.skip("this machine has a GPU: the report covers correctness and timing instead")
    assert "verdict: compiled" in text and "skipped: correctness, timing (no CUDA GPU)" in text


def test_usage_error_exits_non_zero(tmp_path: Path) -> None:
    proc = cudice("verify", str(tmp_path / "missing.py"), cache=tmp_path)
    assert proc.returncode == 2 and "does not exist" in proc.stderr


def test_fast_p_is_over_all_problems() -> None:
    def res(verdict: Verdict, speedup: float | None) -> VerifyResult:
        return VerifyResult(verdict, Stage.TIMING, "c.py", speedup=speedup, speedup_min=speedup)

    results = {"a.py": res(Verdict.CORRECT, 2.5), "b.py": res(Verdict.CORRECT, 1.5), "c.py": res(Verdict.INCORRECT, 9.0)}
    s = score(["a.py", "b.py", "c.py", "d.py"], results)  # d.py has no candidate
    assert (s.correct, s.fast_1, s.fast_2) == (0.5, 0.5, 0.25)
    assert s.num_problems == 4 and s.num_candidates == 3
    assert [r["verdict"] for r in s.per_problem] == ["correct", "correct", "incorrect", "missing"]


@needs_nvcc
@pytest.mark.slow
@pytest.mark.e2e
def test_eval_folder_json(tmp_path: Path, examples_dir: Path, build_cache: Path) -> None:
    probs, cands = tmp_path / "problems", tmp_path / "candidates"
    probs.mkdir()
    cands.mkdir()
    for name in ("relu.py", "softmax.py"):
        (probs / name).write_text((examples_dir / name).read_text())
    (cands / "relu.py").write_text((examples_dir / "relu_cuda.py").read_text())  # same build as relu_cuda: cached
    proc = cudice("eval", "--json", str(probs), str(cands), cache=build_cache)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["num_problems"] == 2 and out["num_candidates"] == 1
    verdicts = {r["problem"]: r["verdict"] for r in out["per_problem"]}
    assert verdicts["softmax.py"] == "missing"
    if not out["gpu"]:
        assert verdicts["relu.py"] == "compiled" and out["correct"] == 0.0
