"""RayBackend on a local Ray instance (2 CPUs, 1 GPU declared): spread, a killed worker's task, GPU
placement, equality with VerifyPool.

Compile-only and cheap: the candidates are static violations and parse failures from the
corpus (milliseconds each), so the tests measure Ray's scheduling and retries, not nvcc. The
one real build (a compile error, `slow`) is shared by the pool and Ray through one cache.
Skipped when Ray is not installed (`pip install "cudice[dist]"`).
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray")

from cudice.verifier.backends import VerifyBackend, VerifyJob, verify_all  # noqa: E402
from cudice.verifier.config import VerifyConfig  # noqa: E402
from cudice.verifier.dist.ray_backend import RayBackend  # noqa: E402
from cudice.verifier.pool import VerifyPool  # noqa: E402
from cudice.verifier.source.result import Verdict, VerifyResult  # noqa: E402
from proc_state import alive  # noqa: E402
from ray_stand_in import Gate, GpuProbe, raising_verify, started  # noqa: E402
from verifier_marks import needs_nvcc  # noqa: E402

HERE = Path(__file__).resolve().parents[1]  # tests/verifier: the stand-ins and the corpus
CORPUS = HERE / "corpus"
WAIT_S = 120.0


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    """One local Ray instance for the module: 2 CPUs and one *declared* GPU (Ray schedules by the
    resource and sets `CUDA_VISIBLE_DEVICES` whether or not the device exists). The tests run
    compile-only, so the GPU only matters where a stand-in run stage asks for it."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])))
        mp.setenv("RAY_AUTH_MODE", "disabled")  # a local test instance needs no token file in $HOME
        ray.init(address="local", num_cpus=2, num_gpus=1, include_dashboard=False, log_to_driver=False)
        try:
            yield
        finally:
            ray.shutdown()


@pytest.fixture
def config(tmp_path: Path) -> VerifyConfig:
    return VerifyConfig(cache_dir=tmp_path / "cache", compile_only=True, compile_violations=False)


def cheap_jobs(tmp_path: Path) -> list[VerifyJob]:
    """Static violations (reference by comment and explicit), parse failures, a missing reference,
    and jobs given as texts (candidate and reference) under names no file has."""
    static = [p for p in sorted(CORPUS.glob("*.py")) if "kind=static" in p.read_text()][:5]
    jobs = [VerifyJob(p) for p in static]
    jobs.append(VerifyJob(static[0], reference=CORPUS / "references" / "relu.py"))
    (tmp_path / "syntax.py").write_text("def broken(:\n")
    (tmp_path / "no_model_new.py").write_text("import torch\n")
    (tmp_path / "lost_ref.py").write_text("# cudice: reference=nowhere/ref.py\nclass ModelNew:\n    pass\n")
    jobs += [VerifyJob(tmp_path / n) for n in ("syntax.py", "no_model_new.py", "lost_ref.py")]
    jobs.append(
        VerifyJob(
            tmp_path / "unsaved.py",
            source="import torch\nclass ModelNew(torch.nn.Module):\n    pass\n",
            reference=CORPUS / "references" / "add.py",
        )
    )
    # texts only, under names no file has: the candidate and its reference travel as text
    text = static[0].read_text()
    relu = (CORPUS / "references" / "relu.py").read_text()
    for name, ref_text in (("text_job", relu), ("text_ref_without_model", "import torch\n")):
        jobs.append(
            VerifyJob(
                tmp_path / "nowhere" / f"{name}.py",
                source=text,
                reference=tmp_path / "nowhere" / f"{name}_ref.py",
                reference_source=ref_text,
            )
        )
    return jobs


def comparable(result: VerifyResult) -> dict[str, Any]:
    """Everything but the wall times and the time stamp."""
    d = result.to_dict()
    d.pop("stage_wall_s")
    d.pop("measured_at")
    return d


def wait_for(predicate: Any, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {WAIT_S:.0f} s waiting for {what}")
        time.sleep(0.05)


def test_both_backends_satisfy_the_protocol(ray_cluster: None, config: VerifyConfig) -> None:
    with RayBackend(config) as backend, VerifyPool(config, gpus=[]) as pool:
        assert isinstance(backend, VerifyBackend) and isinstance(pool, VerifyBackend)
        assert backend.num_gpus == 1


def test_results_equal_the_single_process_pool(
    ray_cluster: None, config: VerifyConfig, tmp_path: Path
) -> None:
    jobs = cheap_jobs(tmp_path)
    with VerifyPool(config, num_compile_workers=1, gpus=[]) as pool:
        local = verify_all(pool, jobs, timeout_s=WAIT_S)
    with RayBackend(config) as backend:
        remote = verify_all(backend, jobs, timeout_s=WAIT_S)
    verdicts = {r.verdict for r in local}
    assert {Verdict.STATIC_VIOLATION, Verdict.INVALID_INPUT} <= verdicts  # the set covers both kinds
    assert [comparable(r) for r in remote] == [comparable(r) for r in local]


def test_tasks_spread_over_two_workers(ray_cluster: None, config: VerifyConfig, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    gate.mkdir()
    jobs = cheap_jobs(tmp_path)[:4]
    # each task waits until two have started: only two workers running at once can pass the gate
    with RayBackend(config, verify_fn=Gate(gate, quorum=2)) as backend:
        results = verify_all(backend, jobs, timeout_s=WAIT_S)
        pids = {pid for _, pid in backend.placements.values()}
    assert len(pids) >= 2, f"all tasks ran in one worker: {backend.placements}"
    assert all(r.verdict is Verdict.STATIC_VIOLATION for r in results)


def test_a_killed_workers_task_finishes_on_another_worker(
    ray_cluster: None, config: VerifyConfig, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    gate.mkdir()
    jobs = cheap_jobs(tmp_path)[:4]
    with VerifyPool(config, gpus=[]) as pool:
        expected = [comparable(r) for r in verify_all(pool, jobs, timeout_s=WAIT_S)]
    with RayBackend(config, verify_fn=Gate(gate, quorum=0, hold=True), max_retries=2) as backend:
        futures = [backend.submit(j.path, reference=j.reference, key=f"k{i}") for i, j in enumerate(jobs)]
        wait_for(lambda: len(started(gate)) >= 2, "two tasks at the gate")
        victim_pid, victim_stem = started(gate)[0]
        os.kill(victim_pid, signal.SIGKILL)  # the worker dies mid-task
        wait_for(lambda: not alive(victim_pid), f"worker {victim_pid} to die")
        (gate / "go").touch()
        results = [f.result(timeout=WAIT_S) for f in futures]
        placements = dict(backend.placements)
    assert [comparable(r) for r in results] == expected  # every task still has its own verdict
    victim_keys = [f"k{i}" for i, j in enumerate(jobs) if Path(j.path).stem == victim_stem]
    assert victim_keys and all(placements[k][1] != victim_pid for k in victim_keys)
    retried = [pid for pid, stem in started(gate) if stem == victim_stem]
    assert len(retried) >= 2 and retried[-1] != victim_pid  # it reached the gate again, elsewhere


def test_resubmitting_a_key_cancels_the_running_task(
    ray_cluster: None, config: VerifyConfig, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    gate.mkdir()
    job = cheap_jobs(tmp_path)[0]
    with RayBackend(config, verify_fn=Gate(gate, quorum=0, hold=True)) as backend:
        first = backend.submit(job.path, key="doc")
        wait_for(lambda: len(started(gate)) >= 1, "the first task at the gate")
        second = backend.submit(tmp_path / "syntax.py", key="doc")
        r1 = first.result(timeout=WAIT_S)
        # the running task itself was interrupted: verify()'s cancel token was set in the worker
        wait_for(lambda: (gate / f"cancelled-{Path(job.path).stem}").exists(), "the task to see its cancel")
        (gate / "go").touch()
        r2 = second.result(timeout=WAIT_S)
    assert (r1.verdict, r1.error) == (Verdict.TIMEOUT, "cancelled")  # what VerifyPool gives a cancelled job
    assert r2.verdict is Verdict.INVALID_INPUT


def test_an_exception_inside_verify_is_raised_like_the_pool_raises_it(
    ray_cluster: None, config: VerifyConfig, tmp_path: Path
) -> None:
    with RayBackend(config, verify_fn=raising_verify) as backend:
        fut = backend.submit(tmp_path / "any.py", source="x = 1\n")
        with pytest.raises(ValueError, match="verify exploded"):
            fut.result(timeout=WAIT_S)


def test_run_stages_go_to_the_gpu_task_one_at_a_time(
    ray_cluster: None, config: VerifyConfig, tmp_path: Path
) -> None:
    """Each job's run stage is a stand-in child (ray_gpu_stand_in) that notes its GPU and overlaps."""
    probe = tmp_path / "probe"
    probe.mkdir()
    jobs = cheap_jobs(tmp_path)[:4]
    with RayBackend(config, verify_fn=GpuProbe(probe)) as backend:
        results = verify_all(backend, jobs, timeout_s=WAIT_S)
    assert all(r.verdict is Verdict.STATIC_VIOLATION for r in results)
    runs = {p.stem: json.loads(p.read_text()) for p in probe.glob("ran-*.json")}
    assert sorted(runs) == sorted(f"ran-{Path(j.path).stem}" for j in jobs)  # every run went to a GPU task
    assert {r["gpu"] for r in runs.values()} == {"0"}  # the child saw the task's GPU
    assert all(r["overlap"] == [] for r in runs.values()), runs  # never two on the one GPU at once


@needs_nvcc
@pytest.mark.slow
def test_a_compile_error_equals_the_pool_verdict(
    ray_cluster: None, examples_dir: Path, build_cache: Path
) -> None:
    config = VerifyConfig(cache_dir=build_cache, compile_only=True)
    job = [VerifyJob(examples_dir / "relu_broken.py")]
    with VerifyPool(config, gpus=[]) as pool:
        local = verify_all(pool, job, timeout_s=900)
    with RayBackend(config) as backend:
        remote = verify_all(backend, job, timeout_s=900)
    assert local[0].verdict is Verdict.COMPILE_ERROR
    assert [comparable(r) for r in remote] == [comparable(r) for r in local]
