"""PersistentRunner: one process serves many jobs and is replaced after any failure."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cudice.verifier.runner import PersistentRunner

FAKE_SERVE = '''
import json, os, sys, time
assert sys.argv[1] == "--serve"
for line in sys.stdin:
    job_path, result_path = line.rstrip("\\n").split("\\t")
    mode = json.loads(open(job_path).read())["mode"]
    if mode == "abort":
        os.abort()
    if mode == "hang":
        time.sleep(600)
    print("noise from the candidate", flush=True)
    verdict = "correct" if mode == "ok" else "incorrect"
    out = {"verdict": verdict, "stage": "timing", "pid": os.getpid(), "diagnostics": []}
    open(result_path + ".tmp", "w").write(json.dumps(out))
    os.replace(result_path + ".tmp", result_path)
'''


@pytest.fixture
def runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> PersistentRunner:
    (tmp_path / "cudice_fake_serve.py").write_text(FAKE_SERVE)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = PersistentRunner(module="cudice_fake_serve", max_jobs=3)
    yield r
    r.close()


def run(r: PersistentRunner, mode: str, timeout_s: float = 30) -> dict[str, object] | None:
    return r({"mode": mode}, timeout_s=timeout_s, memory_limit_mib=4096).result


def test_reuses_the_process_while_jobs_pass(runner: PersistentRunner) -> None:
    a, b = run(runner, "ok"), run(runner, "ok")
    assert a is not None and b is not None and a["pid"] == b["pid"] and runner.num_started == 1
    run(runner, "ok")  # third job reaches max_jobs=3: replaced afterwards
    c = run(runner, "ok")
    assert c is not None and c["pid"] != a["pid"] and runner.num_started == 2


def test_replaced_after_a_failed_verdict(runner: PersistentRunner) -> None:
    first = run(runner, "wrong")
    after = run(runner, "ok")
    assert first is not None and after is not None and first["pid"] != after["pid"]


def test_crash_and_hang_end_only_that_job(runner: PersistentRunner) -> None:
    crashed = runner({"mode": "abort"}, timeout_s=30, memory_limit_mib=4096)
    assert crashed.result is None and crashed.signal_name == "SIGABRT"
    hung = runner({"mode": "hang"}, timeout_s=1.0, memory_limit_mib=4096)
    assert hung.timed_out and hung.result is None
    ok = runner({"mode": "ok"}, timeout_s=30, memory_limit_mib=4096)
    assert ok.result is not None and ok.result["verdict"] == "correct"
    assert "noise from the candidate" in ok.stdout_tail and runner.num_started == 3


def test_real_worker_serves_two_jobs_in_one_process(tmp_path: Path) -> None:
    """The real `cudice.verifier.worker --serve` loop (without a GPU each job ends at `verify.no_gpu`)."""
    pytest.importorskip("torch")
    job = {"candidate_path": "c.py", "candidate_source": "class ModelNew: pass\n", "reference_path": "r.py",
           "reference_source": "", "config": {"cache_dir": str(tmp_path), "arch_list": ["9.0"]}}
    runner = PersistentRunner()
    try:
        first = runner(job, timeout_s=120, memory_limit_mib=32768)
        second = runner(job, timeout_s=120, memory_limit_mib=32768)
    finally:
        runner.close()
    for out in (first, second):
        assert out.result is not None, out.stderr_tail
        if out.result["verdict"] != "compiled":
            pytest.skip("this machine has a GPU: the job ran further")
        assert out.result["diagnostics"][0]["code"] == "verify.no_gpu"
    assert runner.num_started == 1 and second.wall_s < first.wall_s
