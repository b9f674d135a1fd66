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


@needs_nvcc
@pytest.mark.slow
@pytest.mark.e2e
def test_a_stopped_eval_keeps_the_verdicts_it_reached(tmp_path: Path, examples_dir: Path) -> None:
    """SIGTERM in the middle of a run: exit 130, the verdicts that came are reported and on disk
    (each written as it arrived), the problems not reached say `interrupted`, no compiler lives on."""
    import os
    import signal
    import subprocess
    import sys
    import time

    probs, cands, out = tmp_path / "problems", tmp_path / "candidates", tmp_path / "report"
    probs.mkdir()
    cands.mkdir()
    (probs / "a_broken.py").write_text((examples_dir / "relu.py").read_text())
    (cands / "a_broken.py").write_text("def broken(:\n")  # rejected before any compiler runs
    for i in range(3):  # fresh builds (unique kernel names, an empty cache), one at a time: minutes
        (probs / f"b{i}.py").write_text((examples_dir / "relu.py").read_text())
        src = (
            (examples_dir / "relu_cuda.py")
            .read_text()
            .replace("relu_kernel", f"relu_kernel_stop{i}_{os.getpid()}")
        )
        (cands / f"b{i}.py").write_text(src)
    proc = subprocess.Popen(
        [sys.executable, "-m", "cudice.server.cli", "eval", str(probs), str(cands), "--json",
         "--workers", "1", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "CUDICE_CACHE_DIR": str(tmp_path / "cache")},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while not (out / "problems" / "a_broken.json").exists() and proc.poll() is None:
            assert time.monotonic() < deadline, "the first verdict never reached the report folder"
            time.sleep(0.05)
        assert not (out / "problems" / "b0.json").exists(), "a fresh build finished before the stop"
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 130, stderr
    payload = json.loads(stdout)
    verdicts = {r["problem"]: r["verdict"] for r in payload["per_problem"]}
    assert payload["interrupted"] is True and verdicts["a_broken.py"] == "invalid_input"
    assert payload["num_problems"] == payload["num_candidates"] == 4
    assert {verdicts[f"b{i}.py"] for i in range(3)} == {"interrupted"} and payload["correct"] == 0.0
    assert "interrupted after 1 of 4 verdicts" in stderr
    assert sorted(p.name for p in (out / "problems").iterdir()) == ["a_broken.json"]
    assert json.loads((out / "problems" / "a_broken.json").read_text())["verdict"] == "invalid_input"
    assert "| b0.py | interrupted |" in (out / "summary.md").read_text()

    def survivors() -> list[str]:
        found = []
        for d in Path("/proc").iterdir():
            try:
                if d.name.isdigit() and str(tmp_path) in (d / "cmdline").read_bytes().decode(
                    errors="replace"
                ):
                    found.append(d.name)
            except OSError:
                pass
        return found

    deadline = time.monotonic() + 60  # a killed compiler may take a moment to be reaped
    while survivors() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert survivors() == [], f"processes still working in {tmp_path}"


def test_resume_reuses_the_verdicts_of_unchanged_inputs_and_verifies_the_rest(
    tmp_path: Path, examples_dir: Path
) -> None:
    probs, cands, out = tmp_path / "problems", tmp_path / "candidates", tmp_path / "report"
    probs.mkdir()
    cands.mkdir()
    for name in ("a.py", "b.py"):
        (probs / name).write_text((examples_dir / "relu.py").read_text())
        (cands / name).write_text("def broken(:\n")  # verdicts without a compiler: quick
    refused = cudice("eval", str(probs), str(cands), "--resume", cache=tmp_path)
    assert refused.returncode == 2 and "--resume needs --out DIR" in refused.stderr

    def run(*extra: str) -> dict:
        proc = cudice("eval", str(probs), str(cands), "--json", "--out", str(out), *extra, cache=tmp_path)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    first = run()
    assert first["resumed"] == 0 and json.loads((out / "problems" / "a.json").read_text())["key"]
    again = run("--resume")
    assert again["resumed"] == 2 and again["per_problem"] == first["per_problem"]
    key_b = json.loads((out / "problems" / "b.json").read_text())["key"]
    (cands / "b.py").write_text("def broken(:\n# edited\n")  # b changed: verified again
    changed = run("--resume")
    assert changed["resumed"] == 1 and json.loads((out / "problems" / "b.json").read_text())["key"] != key_b
    assert run("--resume", "--trials", "2")["resumed"] == 0  # other settings: nothing reused


@pytest.mark.parametrize("scenario", ["stale", "harvest", "shutdown"])
def test_signals_never_lose_a_verdict_keep_a_stale_one_or_cut_the_shutdown(
    scenario: str, tmp_path: Path
) -> None:
    """tests/verifier/eval/eval_signal_stand_in.py runs `eval_command` in a child process with a
    stand-in backend and signals itself at the moment each scenario names."""
    import subprocess
    import sys

    script = Path(__file__).with_name("eval_signal_stand_in.py")
    proc = subprocess.run(
        [sys.executable, str(script), scenario, str(tmp_path)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["shutdown_finished"]
    if scenario == "stale":  # b's record of the first run must not stand for the second run's b
        assert seen["first_rc"] == 0 and seen["rc"] == 130 and seen["interrupted"]
        assert seen["verdicts"] == {"a.py": "correct", "b.py": "interrupted"} and seen["records"] == [
            "a.json"
        ]
    elif scenario == "harvest":  # b was done when the signal came: reported, not `interrupted`
        assert seen["rc"] == 130 and seen["verdicts"] == {"a.py": "correct", "b.py": "correct"}
        assert seen["records"] == ["a.json", "b.json"]
    else:  # every verdict was in: signals during the shutdown only wait for it
        assert seen["rc"] == 0 and not seen["interrupted"] and seen["records"] == ["a.json", "b.json"]


def test_resume_never_reuses_a_cancelled_or_infrastructure_verdict(tmp_path: Path) -> None:
    from cudice.verifier.eval.cli import _reusable
    from cudice.verifier.eval.report import write_problem
    from cudice.verifier.source.result import Diagnostic, Severity

    lost = Diagnostic(
        Severity.ERROR, "the Ray node running it was lost", "dist.task_failed", Stage.CORRECTNESS
    )
    write_problem(tmp_path, "ok.py", VerifyResult(Verdict.CORRECT, Stage.TIMING, "c.py"), "k1")
    write_problem(
        tmp_path, "lost.py", VerifyResult(Verdict.CRASH, Stage.CORRECTNESS, "c.py", diagnostics=(lost,)), "k2"
    )
    write_problem(
        tmp_path, "cut.py", VerifyResult(Verdict.TIMEOUT, Stage.CORRECTNESS, "c.py", error="cancelled"), "k3"
    )
    write_problem(tmp_path, "other.py", VerifyResult(Verdict.CORRECT, Stage.TIMING, "c.py"), "old")
    # out of GPU memory beside other verifications, from a run before the repetition alone: again;
    # one that ran out again alone: its verdict stands
    oom = Diagnostic(
        Severity.ERROR, "judge: OutOfMemoryError: CUDA out of memory.", "runtime.worker_error", Stage.LOAD
    )
    retried = Diagnostic(Severity.INFORMATION, "ran again alone", "runtime.retried_alone", Stage.LOAD)
    write_problem(
        tmp_path, "oom.py", VerifyResult(Verdict.CRASH, Stage.LOAD, "c.py", diagnostics=(oom,)), "k4"
    )
    write_problem(
        tmp_path,
        "oom_alone.py",
        VerifyResult(Verdict.CRASH, Stage.LOAD, "c.py", diagnostics=(retried, oom)),
        "k5",
    )
    keys = {"ok.py": "k1", "lost.py": "k2", "cut.py": "k3", "other.py": "new", "unread.py": None}
    keys |= {"oom.py": "k4", "oom_alone.py": "k5"}
    assert list(_reusable(tmp_path, keys)) == ["ok.py", "oom_alone.py"]
