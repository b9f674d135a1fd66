"""`verify_texts`: candidates and references reach the backend as text, no file is written, and
the verdicts (hence the rewards) are those of the same texts given as two files per job — on a
scripted backend, and on a real `VerifyPool` (without a GPU a good kernel stops at `compiled`)."""

from __future__ import annotations

import os
import shutil
from concurrent.futures import Future
from pathlib import Path

import pytest
from cudice.model.train.reward import RewardJob, as_read_back, normalised, reward_from_result, verify_texts
from cudice.verifier.backends import VerifyBackend, VerifyJob, verify_all
from cudice.verifier.config import VerifyConfig
from cudice.verifier.source.result import Stage, Verdict, VerifyResult

EXAMPLES = Path(__file__).parents[3] / "examples"
needs_nvcc = pytest.mark.skipif(
    not Path("/usr/local/cuda/bin/nvcc").exists() and shutil.which("nvcc") is None,
    reason="needs nvcc (CUDA toolkit)",
)


class Recording(VerifyBackend):
    """Verdict CORRECT for candidates containing "good"; records the jobs it was given."""

    def __init__(self) -> None:
        self.config = VerifyConfig()
        self.jobs: list[VerifyJob] = []

    def _submit(self, job: VerifyJob, config: VerifyConfig) -> Future[VerifyResult]:
        self.jobs.append(job)
        fut: Future[VerifyResult] = Future()
        good = "good" in (job.source or "")
        fut.set_result(
            VerifyResult(Verdict.CORRECT if good else Verdict.INCORRECT, Stage.CORRECTNESS, str(job.path))
        )
        return fut

    def cancel(self, key: str) -> bool:
        return False

    def shutdown(self, *, cancel_pending: bool = True) -> None:
        pass


def test_candidates_and_references_go_as_text_and_nothing_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    backend = Recording()
    jobs = [
        RewardJob("a-0", "good one\r\n", "class Model: a\r\n"),
        RewardJob("a-1", "bad one", "class Model: a\r\n"),
        RewardJob("b-2", "good two", "class Model: b"),
    ]
    results = verify_texts(backend, jobs)
    assert [reward_from_result(r, None) for r in results] == [1.0, 0.0, 1.0]
    assert [j.source for j in backend.jobs] == ["good one\n", "bad one", "good two"]
    assert [j.reference_source for j in backend.jobs] == ["class Model: a\n"] * 2 + ["class Model: b"]
    assert [j.reference for j in backend.jobs] == ["<reference 0>", "<reference 0>", "<reference 1>"]
    assert [j.key for j in backend.jobs] == ["a-0#0", "a-1#1", "b-2#2"]
    assert os.listdir(tmp_path) == []  # no candidate or reference file, here or in the temp folder


def test_text_is_what_a_written_and_read_back_file_holds(tmp_path: Path) -> None:
    for text in ["a\r\nb\rc\n", "plain\n", "\r\r\n\n", "é ✓\r\n"]:
        f = tmp_path / "f.py"
        f.write_text(text)
        assert as_read_back(text) == f.read_text(encoding="utf-8")


@needs_nvcc
def test_a_real_pool_gives_the_verdicts_of_the_two_file_way(tmp_path: Path) -> None:
    """The relu kernel (good), a kernel-less ModelNew (bad) and a relu kernel that writes 1 for
    negatives (wrong): text jobs get the same verdicts and rewards as file jobs (candidate and
    reference written to two files each); without a GPU both kernels stop at compiled."""
    from cudice.verifier.api import gpu_available
    from cudice.verifier.pool import VerifyPool

    reference = (EXAMPLES / "relu.py").read_text()
    good = (EXAMPLES / "relu_cuda.py").read_text().replace("relu_kernel", "relu_kernel_reward_test")
    bad = "import torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
    wrong = good.replace("v > 0.0f ? v : 0.0f", "v > 0.0f ? v : 1.0f").replace(
        "_reward_test", "_reward_wrong"
    )
    assert wrong != good
    jobs = [
        RewardJob("good", good, reference),
        RewardJob("bad", bad, reference),
        RewardJob("wrong", wrong, reference),
    ]
    old_way = []
    for i, job in enumerate(jobs):
        cand, ref = tmp_path / f"cand_{i}.py", tmp_path / f"ref_{i}.py"
        cand.write_text(job.candidate)
        ref.write_text(job.reference)
        old_way.append(VerifyJob(cand, reference=ref, key=f"old-{i}"))
    config = VerifyConfig(cache_dir=tmp_path / "cache")
    with VerifyPool(config, num_compile_workers=2, gpus=[0] if gpu_available() else []) as pool:
        before = verify_all(pool, old_way)
        after = verify_texts(pool, jobs)
    assert [r.verdict for r in after] == [r.verdict for r in before]
    assert [reward_from_result(r, None) for r in after] == [reward_from_result(r, None) for r in before]
    assert before[1].verdict is Verdict.STATIC_VIOLATION and not before[1].is_correct
    if gpu_available():  # correctness ran: good is rewarded (speedups vary run to run: not compared)
        assert [r.verdict for r in before] == [Verdict.CORRECT, Verdict.STATIC_VIOLATION, Verdict.INCORRECT]
        assert [reward_from_result(r, None) for r in after] == [1.0, 0.0, 0.0]
    else:  # built, not run: the same findings both ways
        assert before[0].verdict is before[2].verdict is Verdict.COMPILED
        assert [[d.code for d in r.diagnostics] for r in after] == [
            [d.code for d in r.diagnostics] for r in before
        ]


def test_each_distinct_pair_is_verified_once_within_a_batch_and_across_batches() -> None:
    backend = Recording()
    cache: dict[tuple[str, str], VerifyResult] = {}
    first = [
        RewardJob("a-0", "good one\n", "class Model: a"),
        RewardJob("a-1", "good one  \r\n\n", "class Model: a"),  # the same text, normalised
        RewardJob("a-2", "good one\n", "class Model: b"),  # another reference: verified again
        RewardJob("a-3", "bad one", "class Model: a"),
    ]
    results = verify_texts(backend, first, cache)
    assert [reward_from_result(r, None) for r in results] == [1.0, 1.0, 1.0, 0.0]
    assert [j.key for j in backend.jobs] == ["a-0#0", "a-2#2", "a-3#3"]
    again = verify_texts(backend, [RewardJob("b-0", "bad one\n", "class Model: a")], cache)
    assert [reward_from_result(r, None) for r in again] == [0.0]
    assert len(backend.jobs) == 3  # the next step's repeat was not verified again
    assert normalised("x = 1  \r\n# cudice: reference=r.py\n\n") == "x = 1\n# cudice: reference=r.py"
