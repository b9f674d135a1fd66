"""The Ray backend's task bodies and the backend registry, without Ray (also on the GPU box).

`compile_task` / `run_on_gpu` are what Ray workers run; here they run in this process, so the
GPU path of the Ray backend is tested where Ray is not installed (`gpu` test).
"""

from __future__ import annotations

import _thread
import subprocess
import sys
import tempfile
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
from cudice.verifier.api import verify
from cudice.verifier.backends import VerifyBackend, VerifyJob, make_backend, verify_all
from cudice.verifier.config import VerifyConfig
from cudice.verifier.dist import tasks as distributed_tasks
from cudice.verifier.dist.ray_backend import RayOptions, RayUnavailable, require_ray
from cudice.verifier.dist.tasks import (
    compile_task,
    interruptible,
    place_reference,
    run_on_gpu,
    ship_job,
)
from cudice.verifier.pool import VerifyPool
from cudice.verifier.run.sandbox import ChildOutcome
from cudice.verifier.source.result import Verdict, VerifyResult

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
WAIT_S = 120.0


def comparable(result: VerifyResult) -> dict[str, Any]:
    d = result.to_dict()
    d.pop("stage_wall_s")
    d.pop("measured_at")
    return d


@pytest.fixture
def config(tmp_path: Path) -> VerifyConfig:
    return VerifyConfig(cache_dir=tmp_path / "cache", compile_only=True, compile_violations=False)


def test_a_reference_the_worker_cannot_see_is_shipped_and_its_paths_mapped_back(
    tmp_path: Path, config: VerifyConfig
) -> None:
    ref = tmp_path / "caller" / "problem.py"
    ref.parent.mkdir()
    ref.write_text("import torch\ndef get_inputs():\n    return []\n")  # no class Model: a located error
    cand = CORPUS / "try_except_fallback.py"
    local = verify(cand, reference=ref, config=config)
    assert any(d.location and d.location.path == str(ref.resolve()) for d in local.diagnostics)

    job = ship_job(cand, None, ref)
    assert job is not None and job.reference_text == ref.read_text()
    ref.unlink()  # as on another node: the caller's file is not there
    report = compile_task(job, config, False, None)
    assert comparable(report.result) == comparable(local)  # same locations and messages, caller's paths


def test_a_reference_given_as_text_travels_as_text_and_is_verified_as_the_file_would_be(
    tmp_path: Path, config: VerifyConfig
) -> None:
    text = "import torch\ndef get_inputs():\n    return []\n"  # no class Model: a located error
    ref = tmp_path / "problem.py"
    ref.write_text(text)
    cand = CORPUS / "try_except_fallback.py"
    from_file = verify(cand, reference=ref, config=config)
    job = ship_job(cand, None, "problem.py", text)
    assert job is not None and job.reference_is_text and job.reference_text == text
    scratch_before = set(Path(tempfile.gettempdir()).glob("cudice-ray-*"))
    report = compile_task(job, config, False, None)
    assert set(Path(tempfile.gettempdir()).glob("cudice-ray-*")) == scratch_before
    assert report.result.verdict is from_file.verdict
    codes = sorted(d.code for d in report.result.diagnostics)
    assert codes == sorted(d.code for d in from_file.diagnostics)
    assert any(d.location and d.location.path == "problem.py" for d in report.result.diagnostics)


def test_a_reference_visible_with_the_same_text_is_used_in_place(tmp_path: Path) -> None:
    job = ship_job(CORPUS / "python_thread.py", None, None)  # reference from its `# cudice:` comment
    assert job is not None and job.reference_path == str((CORPUS / "references" / "relu.py").resolve())
    assert place_reference(job, tmp_path) == (None, {})


def test_an_unreadable_candidate_is_not_shipped(tmp_path: Path) -> None:
    assert ship_job(tmp_path / "missing.py", None, None) is None


def test_compile_task_runs_the_stage_through_the_gpu_submitter_it_is_given(tmp_path: Path) -> None:
    calls: list[dict[str, Any]] = []

    def fake_verify(path: str, **kwargs: Any) -> VerifyResult:  # calls run_child as verify's run stage would
        outcome = kwargs["run_child"]({"job": 1}, timeout_s=5.0, memory_limit_mib=1024, max_output_bytes=100)
        assert kwargs["gpu"] is True and outcome.returncode == 0
        return verify(path, config=kwargs["config"])

    def gpu_submit(job: dict[str, Any], kw: dict[str, Any], cancel: Any) -> ChildOutcome:
        calls.append({"job": job, **kw})
        return ChildOutcome({"verdict": "correct"}, 0, "", "", 0.1)

    job = ship_job(CORPUS / "python_thread.py", None, None)
    assert job is not None
    config = VerifyConfig(cache_dir=tmp_path, compile_only=True)
    report = compile_task(job, config, True, gpu_submit, fake_verify)
    assert calls == [{"job": {"job": 1}, "timeout_s": 5.0, "memory_limit_mib": 1024, "max_output_bytes": 100}]
    assert report.result.verdict is Verdict.STATIC_VIOLATION


def test_registry_and_errors(config: VerifyConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    with make_backend("local", config, num_compile_workers=1, gpus=[]) as local:
        assert isinstance(local, VerifyPool) and isinstance(local, VerifyBackend)
        results = verify_all(
            local, [VerifyJob(CORPUS / "python_thread.py"), VerifyJob(CORPUS / "matmul_operator.py")]
        )
    assert [Path(r.path).name for r in results] == ["python_thread.py", "matmul_operator.py"]
    with pytest.raises(ValueError, match=r"Unknown verify backend 'nope'.*'local', 'ray'"):
        make_backend("nope", config)
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    with pytest.raises(RayUnavailable, match=r'pip install "cudice\[dist\]"'):
        require_ray()
    with pytest.raises(RayUnavailable):
        make_backend("ray", config)


def test_ray_options_say_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="only size a local instance"):
        RayOptions(address="auto", num_cpus=4)
    with pytest.raises(ValueError, match="max_retries=-1 must be ≥ 0"):
        RayOptions(max_retries=-1)


@pytest.mark.gpu
def test_gpu_path_of_the_ray_backend_equals_the_pool(examples_dir: Path, tmp_path: Path) -> None:
    """The bodies Ray runs (compile task + GPU task), chained in-process: the pool's verdict."""
    config = VerifyConfig(cache_dir=tmp_path / "cache")
    cand = examples_dir / "relu_cuda.py"
    with VerifyPool(config, num_compile_workers=1, persistent=False) as pool:
        local = pool.submit(cand).result(timeout=900)

    def gpu_submit(job: dict[str, Any], kw: dict[str, Any], cancel: Any) -> ChildOutcome:
        return run_on_gpu(job, {**kw, "cancel": cancel})

    job = ship_job(cand, None, None)
    assert job is not None
    remote = compile_task(job, config, True, gpu_submit).result
    assert local.verdict is Verdict.CORRECT, local.diagnostics
    assert remote.verdict is local.verdict and remote.stage is local.stage
    # the same findings; the timing ones may differ between two timings of a ~10 us kernel (a
    # speedup in one, a time within the clock's noise in the other)
    untimed = [
        sorted(d.code for d in r.diagnostics if not d.code.startswith("timing.")) for r in (remote, local)
    ]
    assert untimed[0] == untimed[1]
    assert remote.num_correct_trials == local.num_correct_trials
    assert any(d.code.startswith("timing.") for d in remote.diagnostics)  # it was timed


def test_a_cancel_in_the_task_thread_stops_the_work_before_the_task_ends() -> None:
    cancel, started = threading.Event(), threading.Event()

    def work() -> str:
        started.set()
        return "stopped" if cancel.wait(WAIT_S) else "ran out"

    def interrupt() -> None:  # what ray.cancel does to a running task: KeyboardInterrupt in its thread
        started.wait(WAIT_S)
        _thread.interrupt_main()

    threading.Thread(target=interrupt, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        interruptible(work, cancel)
    assert cancel.is_set()


def test_a_cancel_reaches_a_task_in_a_process_that_ignored_sigint() -> None:
    """A driver started in the background by a shell (`cudice eval ... &`) ignores SIGINT, and so
    do the Ray workers it starts; Ray's cancel arrives like Ctrl-C and must still stop the work."""
    code = textwrap.dedent(
        """
        import _thread, signal, threading
        from cudice.verifier.dist.tasks import interruptible
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        cancel, started = threading.Event(), threading.Event()
        def work():
            started.set()
            return "stopped" if cancel.wait(60) else "ran out"
        def interrupt():
            started.wait(60)
            _thread.interrupt_main()
        threading.Thread(target=interrupt, daemon=True).start()
        try:
            print(interruptible(work, cancel))
        except KeyboardInterrupt:
            print("interrupted", cancel.is_set())
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.stdout.strip() == "interrupted True", done.stdout + done.stderr


def test_run_on_gpu_gives_the_child_this_tasks_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def fake_run_in_child(job: dict[str, Any], **kwargs: Any) -> ChildOutcome:
        seen.update(kwargs)
        return ChildOutcome({"verdict": "correct"}, 0, "", "", 0.0)

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")  # as Ray sets it for a num_gpus=1 task
    monkeypatch.setattr(distributed_tasks, "run_in_child", fake_run_in_child)
    outcome = run_on_gpu({"job": 1}, {"timeout_s": 9.0, "memory_limit_mib": 1024, "cancel": None})
    assert outcome.result == {"verdict": "correct"}
    assert seen["env"] == {"CUDA_VISIBLE_DEVICES": "3"} and seen["timeout_s"] == 9.0
    assert not seen["cancel"].is_set()
