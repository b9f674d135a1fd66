"""VerifyPool: results come back, a changed document cancels its earlier job, a job given as
texts gets the result of the same job given as files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cudice.verifier.backends import VerifyJob, verify_all
from cudice.verifier.config import VerifyConfig
from cudice.verifier.pool import VerifyPool
from cudice.verifier.source.result import Verdict, VerifyResult
from verifier_marks import needs_nvcc

CORPUS = Path(__file__).parent / "corpus"


def test_pool_serves_many_jobs_and_survives_bad_ones(tmp_path: Path) -> None:
    files = []
    for i in range(4):
        f = tmp_path / f"c{i}.py"
        f.write_text("def broken(:\n" if i % 2 else "import torch\n")
        files.append(f)
    with VerifyPool(VerifyConfig(cache_dir=tmp_path), num_compile_workers=2, gpus=[]) as pool:
        results = [pool.submit(f).result(timeout=60) for f in files]
    assert [r.verdict for r in results] == [Verdict.INVALID_INPUT] * 4
    assert [r.diagnostics[0].code for r in results][:2] == ["parse.no_model_new", "parse.syntax_error"]


def comparable(result: VerifyResult) -> dict[str, Any]:
    """Everything but the wall times and the time stamp."""
    d = result.to_dict()
    d.pop("stage_wall_s")
    d.pop("measured_at")
    return d


def text_and_file_cases() -> dict[str, tuple[str, str]]:
    """(candidate text, reference text): a static violation, a reference without `Model` (a
    finding located in the reference), a reference that does not parse, a candidate without
    `ModelNew`, and Windows line endings (a text job carries them as a file read gives them)."""
    cand = (CORPUS / "adv_st2_class_swap.py").read_text()
    ref = (CORPUS / "references" / "relu.py").read_text()
    return {
        "static": (cand, ref),
        "ref_without_model": (cand, "import torch\ndef get_inputs():\n    return []\n"),
        "ref_syntax": (cand, "def broken(:\n"),
        "no_model_new": ("import torch\n", ref),
        "crlf": (cand.replace("\n", "\r\n"), ref.replace("\n", "\r\n")),
    }


def test_a_job_given_as_texts_gets_the_result_of_the_same_job_given_as_files(tmp_path: Path) -> None:
    """The files are verified, then deleted; the texts under the same names give the same results
    (verdicts, diagnostics, locations, messages): nothing of a text job is read from disk."""
    cases = text_and_file_cases()
    files = []
    for name, (cand, ref) in cases.items():
        c, r = tmp_path / f"{name}.py", tmp_path / f"{name}_ref.py"
        c.write_bytes(cand.encode())
        r.write_bytes(ref.encode())
        files.append(VerifyJob(c, reference=r, key=f"file-{name}"))
    read_back = {n: (a.replace("\r\n", "\n"), b.replace("\r\n", "\n")) for n, (a, b) in cases.items()}
    texts = [
        VerifyJob(
            job.path,
            source=read_back[name][0],
            reference=job.reference,
            key=f"text-{name}",
            reference_source=read_back[name][1],
        )
        for name, job in zip(cases, files, strict=True)
    ]
    config = VerifyConfig(cache_dir=tmp_path / "cache", compile_only=True)
    with VerifyPool(config, num_compile_workers=2, gpus=[]) as pool:
        from_files = verify_all(pool, files, timeout_s=120)
        for job in files:
            Path(job.path).unlink()
            Path(str(job.reference)).unlink()
        from_texts = verify_all(pool, texts, timeout_s=120)
    violation, invalid = Verdict.STATIC_VIOLATION, Verdict.INVALID_INPUT
    assert [r.verdict for r in from_files] == [violation, violation, violation, invalid, violation]
    ref_path = str(files[1].reference)  # the reference's own finding carries its name
    assert any(d.location and d.location.path == ref_path for d in from_texts[1].diagnostics)
    assert [comparable(r) for r in from_texts] == [comparable(r) for r in from_files]


@needs_nvcc
def test_resubmitting_a_key_cancels_the_running_build(tmp_path: Path, examples_dir: Path) -> None:
    src = (examples_dir / "relu_cuda.py").read_text().replace("relu_kernel", "relu_kernel_pool_test")
    with VerifyPool(
        VerifyConfig(cache_dir=tmp_path, compile_only=True), num_compile_workers=2, gpus=[]
    ) as pool:
        first = pool.submit(examples_dir / "relu_cuda.py", source=src, key="doc")
        import time

        time.sleep(1.5)  # let the first build start
        second = pool.submit(examples_dir / "relu_cuda.py", source="def broken(:\n", key="doc")
        r2 = second.result(timeout=60)
        r1 = first.result(timeout=60)
    assert r2.verdict is Verdict.INVALID_INPUT
    assert r1.verdict is Verdict.TIMEOUT and r1.error == "cancelled"


def test_verify_all_cancels_the_unfinished_jobs_when_waiting_raises() -> None:
    """A job that fails (or a wait that times out) ends `verify_all` at once; the jobs still
    running or queued are cancelled, so nothing of the batch keeps running behind the caller."""
    from concurrent.futures import Future

    from cudice.verifier.backends import VerifyBackend
    from cudice.verifier.config import VerifyConfig

    class Half(VerifyBackend):
        def __init__(self) -> None:
            self.config, self.cancelled, self.pending = VerifyConfig(), [], {}

        def _submit(self, job: VerifyJob, config: VerifyConfig) -> Future:
            fut: Future = Future()
            if job.key == "bad":
                fut.set_exception(RuntimeError("the pool broke"))
            elif job.key == "done":
                fut.set_result("a verdict")
            else:
                self.pending[job.key] = fut
            return fut

        def cancel(self, key: str) -> bool:
            self.cancelled.append(key)
            return self.pending.pop(key).cancel()

        def shutdown(self, *, cancel_pending: bool = True) -> None:
            pass

    backend = Half()
    jobs = [VerifyJob(Path(f"{k}.py"), "x = 1", None, k) for k in ("done", "bad", "slow-1", "slow-2")]
    with pytest.raises(RuntimeError, match="the pool broke"):
        verify_all(backend, jobs)
    assert sorted(backend.cancelled) == ["slow-1", "slow-2"] and backend.pending == {}


def test_a_pool_cancels_a_batch_s_job_but_not_a_newer_one_under_the_same_key(tmp_path: Path) -> None:
    """`verify_all` cancels what it submitted, never a job another caller resubmitted under the
    same key since (the local pool tells them apart by their futures)."""
    from concurrent.futures import Future

    with VerifyPool(VerifyConfig(cache_dir=tmp_path), num_compile_workers=1, gpus=[]) as pool:
        from cudice.verifier.pool import _Job

        ours, newer = _Job("k"), _Job("k")
        ours.future, newer.future = Future(), Future()
        pool._jobs.put("k", newer)  # the key now holds another caller's job
        assert not pool.cancel_submitted("k", ours.future)
        assert not newer.cancel.is_set() and [k for k, _ in pool._jobs.items()] == ["k"]
        assert pool.cancel_submitted("k", newer.future) and newer.cancel.is_set()
