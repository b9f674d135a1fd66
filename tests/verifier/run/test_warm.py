"""PersistentRunner: every job gets a fresh judge process, started ahead of time; failures end one job."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cudice.verifier.run.warm import PersistentRunner

FAKE_JUDGE = """
import json, os, sys, time
fd = int(sys.argv[sys.argv.index("--result-fd") + 1])
started = time.time()
job = json.loads(sys.stdin.read())  # a spare waits here until a job arrives
mode = job["mode"]
if mode == "abort":
    os.abort()
if mode == "hang":
    time.sleep(600)
if mode == "leak":  # a candidate's leftover: only a reused process would carry it into the next job
    os.environ["CUDICE_LEFTOVER"] = "1"
print("noise from the judge", flush=True)
verdict = "correct" if mode in ("ok", "leak") else "incorrect"
out = {"verdict": verdict, "stage": "timing", "pid": os.getpid(), "diagnostics": [], "started": started,
       "got_job": time.time(), "leftover": os.environ.get("CUDICE_LEFTOVER"), "argv": sys.argv}
os.write(fd, json.dumps(out).encode())
"""


@pytest.fixture
def fake_judge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The module name of FAKE_JUDGE, importable by the judges a PersistentRunner starts."""
    (tmp_path / "cudice_fake_judge.py").write_text(FAKE_JUDGE)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return "cudice_fake_judge"


@pytest.fixture
def runner(fake_judge: str) -> Iterator[PersistentRunner]:
    r = PersistentRunner(module=fake_judge)
    yield r
    r.close()


def run(r: PersistentRunner, mode: str, timeout_s: float = 60) -> dict[str, object] | None:
    return r(
        {"mode": mode, "config": {"cache_dir": "/nonexistent/cache"}},
        timeout_s=timeout_s,
        memory_limit_mib=4096,
    ).result


def test_every_job_gets_a_fresh_process_that_was_started_ahead(runner: PersistentRunner) -> None:
    a = run(runner, "leak")
    assert runner.num_started == 2  # the first job's judge, then the spare for the next job
    b = run(runner, "ok")
    assert a is not None and b is not None and a["pid"] != b["pid"]
    assert b["leftover"] is None  # nothing of the previous job's process reaches the next job
    assert float(b["got_job"]) >= float(b["started"])  # the spare was up before its job was sent
    assert "--cache-dir" in b["argv"]  # the spare knows the cache, so its runners start before the job
    assert runner.num_started == 3


def test_crash_and_hang_end_only_that_job(runner: PersistentRunner) -> None:
    crashed = runner({"mode": "abort"}, timeout_s=60, memory_limit_mib=4096)
    assert crashed.result is None and crashed.signal_name == "SIGABRT"
    hung = runner({"mode": "hang"}, timeout_s=1.0, memory_limit_mib=4096)
    assert hung.timed_out and hung.result is None
    ok = runner({"mode": "ok"}, timeout_s=60, memory_limit_mib=4096)
    assert ok.result is not None and ok.result["verdict"] == "correct"
    assert "noise from the judge" in ok.stdout_tail


def test_a_changed_memory_limit_replaces_the_spare(runner: PersistentRunner) -> None:
    runner.warm_up(4096)
    first = runner({"mode": "ok"}, timeout_s=60, memory_limit_mib=8192)
    assert (
        first.result is not None and runner.num_started == 3
    )  # warm spare discarded, one for the job, one spare


def test_two_spares_serve_queued_jobs_each_started_before_its_job(fake_judge: str) -> None:
    r = PersistentRunner(module=fake_judge, spares=2)
    try:
        r.warm_up(4096, {"cache_dir": "/nonexistent/cache"})
        assert r.num_started == 2
        results = [run(r, "ok") for _ in range(3)]
        assert all(x is not None and float(x["got_job"]) >= float(x["started"]) for x in results)
        assert len({x["pid"] for x in results if x is not None}) == 3  # never one process twice
        assert r.num_started == 5  # two ahead, then one after each job: two wait again
    finally:
        r.close()


def test_without_respawn_no_spare_follows_the_job(fake_judge: str) -> None:
    r = PersistentRunner(module=fake_judge, respawn=False)
    r.warm_up(4096, {"cache_dir": "/nonexistent/cache"})
    assert run(r, "ok") is not None
    assert r.num_started == 1 and r._spares == []


def test_the_real_judge_from_a_warm_spare(tmp_path: Path) -> None:
    """The real judge and runner processes (device `cpu`, a PyTorch stand-in): the second job runs in
    the spare that warmed up after the first, and a candidate's dispatcher override does not reach
    it. The second job is a repetition alone on the GPU (`run_alone`; no lease on the CPU): the
    phases after the runners' load run inside that hold and give the same verdict."""
    pytest.importorskip("torch")
    ref = (Path(__file__).resolve().parents[1] / "corpus" / "references" / "relu.py").read_text()
    cheat = (Path(__file__).resolve().parents[1] / "corpus" / "adv_rt_library_override_kept.py").read_text()
    honest = (
        "import torch\nclass ModelNew(torch.nn.Module):\n"
        "    def forward(self, x):\n        return torch.relu(x)\n"
    )
    config = {"cache_dir": str(tmp_path), "arch_list": ["9.0"], "num_trials": 2}

    def job(source: str, **settings: object) -> dict[str, object]:
        return {
            "candidate_path": "c.py",
            "candidate_source": source,
            "reference_path": "r.py",
            "reference_source": ref,
            "skip_timing": True,
            "device": "cpu",
            "config": {**config, **settings},
        }

    runner = PersistentRunner()
    try:
        runner.warm_up(32768, config)
        first = runner(job(cheat), timeout_s=600, memory_limit_mib=32768)
        second = runner(job(honest, run_alone=True), timeout_s=600, memory_limit_mib=32768)
    finally:
        runner.close()
    assert first.result is not None and second.result is not None, (first.stderr_tail, second.stderr_tail)
    assert first.result["verdict"] == "incorrect"
    assert "dynamic.dispatcher_override" in {d["code"] for d in first.result["diagnostics"]}
    assert second.result["verdict"] == "correct", second.result
    assert runner.num_started == 3  # warm spare, its successor, and the spare after the second job


def test_a_spare_started_before_its_cache_exists_sees_the_cache(tmp_path: Path) -> None:
    """A spare judge is started ahead (the editor's first save, the pool's start), possibly before
    the build cache folder exists; its runners must still read what the build puts there (a folder
    under /tmp is only visible inside the boundary if it existed when the runner started)."""
    pytest.importorskip("torch")
    cache = tmp_path / "not-yet" / "cache"
    ref = (Path(__file__).resolve().parents[1] / "corpus" / "references" / "relu.py").read_text()
    reads_cache = (
        "import torch\nclass ModelNew(torch.nn.Module):\n"
        "    def __init__(self):\n"
        f"        super().__init__()\n        assert open({str(cache / 'built.txt')!r}).read() == 'ok'\n"
        "    def forward(self, x):\n        return torch.relu(x)\n"
    )
    config = {"cache_dir": str(cache), "arch_list": ["9.0"], "num_trials": 2}
    runner = PersistentRunner(respawn=False)
    try:
        runner.warm_up(32768, config)
        assert cache.is_dir()  # the judge makes the folder before its runners start
        (cache / "built.txt").write_text("ok")  # what a build does while the spare waits
        job = {
            "candidate_path": "c.py",
            "candidate_source": reads_cache,
            "reference_path": "r.py",
            "reference_source": ref,
            "skip_timing": True,
            "device": "cpu",
            "config": config,
        }
        done = runner(job, timeout_s=600, memory_limit_mib=32768)
    finally:
        runner.close()
    assert done.result is not None and done.result["verdict"] == "correct", (done.result, done.stderr_tail)


def test_a_judge_dies_with_the_process_that_started_it(tmp_path: Path) -> None:
    """A judge has no clock of its own (its starter enforces the time-out): when the starter is
    killed (SIGKILL: no clean-up runs), the judge must not live on, even one that never reads stdin."""
    import signal
    import subprocess
    import sys
    import time

    pid_file = tmp_path / "judge.pid"
    (tmp_path / "cudice_sleepy_judge.py").write_text(
        f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(600)\n"
    )
    starter = (
        "from cudice.verifier.run.warm import PersistentRunner\n"
        "import sys, time\n"
        "r = PersistentRunner(module='cudice_sleepy_judge')\n"
        f"r.warm_up(4096, {{'cache_dir': {str(tmp_path / 'cache')!r}}})\n"
        "print('started', flush=True)\n"
        "time.sleep(600)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen([sys.executable, "-c", starter], env=env, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"started"
        deadline = time.monotonic() + 120
        while not pid_file.exists() or not pid_file.read_text():
            assert time.monotonic() < deadline, "the judge never started"
            time.sleep(0.05)
        judge = int(pid_file.read_text())
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        while True:  # bounded wait for the kernel to deliver PDEATHSIG
            try:
                with open(f"/proc/{judge}/stat") as f:
                    if f.read().split(") ", 1)[1][0] == "Z":
                        break
            except OSError:
                break
            assert time.monotonic() < deadline, f"judge {judge} outlived its starter"
            time.sleep(0.05)
    finally:
        proc.kill()


def test_a_pool_gives_its_spares_back_when_idle_and_warms_them_again(fake_judge: str) -> None:
    """Between RL reward batches the policy needs the GPU: `idle()` ends every spare judge (their
    idle CUDA contexts held 8.6 GiB of an H100 through a 1.7B update) and starts none, even after
    a job that runs meanwhile (in a judge of its own); `warm()` starts them again."""
    from cudice.verifier.pool import VerifyPool
    from cudice.verifier.process import process_state

    pool = VerifyPool(gpus=[], num_compile_workers=1)
    spares = PersistentRunner(module=fake_judge, spares=2)
    pool._runners = {0: spares}
    try:
        pool.warm()
        first = [s.proc.pid for s in spares._spares]
        assert len(first) == 2 and all(process_state(pid) not in "ZX" for pid in first)
        pool.idle()
        assert spares._spares == []
        assert all(process_state(pid) in "ZX" for pid in first)  # ended and reaped, or a zombie
        assert run(spares, "ok") is not None  # a job after idle() starts its own judge
        assert spares._spares == []  # and leaves no spare behind it
        pool.warm()
        assert len(spares._spares) == 2 and not {s.proc.pid for s in spares._spares} & set(first)
    finally:
        pool.shutdown()


def test_park_during_a_job_starts_no_spare_after_it(fake_judge: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """`park()` called while a job runs waits for it, and the job's end starts no spare that
    `park()` would then kill at once (the flag is set before the lock is taken)."""
    import threading

    monkeypatch.setattr("cudice.verifier.run.warm.STARTUP_ALLOWANCE_S", 0.0)  # the hang ends at 3 s
    r = PersistentRunner(module=fake_judge, spares=2)
    try:
        r.warm_up(4096, {"cache_dir": "/nonexistent/cache"})
        assert r.num_started == 2
        job = threading.Thread(target=run, args=(r, "hang", 3.0))  # holds the lock ~3 s
        job.start()
        deadline = time.monotonic() + 60
        while not r._lock.locked() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert r._lock.locked()
        r.park()  # waits for the job
        job.join(timeout=120)
        assert r._spares == [] and r.num_started == 2  # the job took a spare; none started after it
    finally:
        r.close()
