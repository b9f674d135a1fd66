"""The RL reward's batched checks change no reward and no verdict (model/train/reward.py: each
batch's distinct candidates go to `VerifyPool.prefill`, `batch.MAX_BATCH` at a time, before they
are submitted; verifier/build/batch.py checks them in one nvcc pass).

A scripted backend shows the order (each chunk prefilled just before it is submitted, after the
verdict cache's dedupe). On a real pool without a GPU (verdicts `compiled` / `compile_error`) the
same rollouts are scored twice in one cache, its compile outcomes cleared in between: each
candidate checked alone, then with the prefill; rewards, verdicts and diagnostics agree, and the
batch decided the compile errors. A linking build of those candidates then takes the batch's
failed check as its verdict without running a compiler (build/objects.py), with the diagnostics
and output of a linking build in a cache that never saw the batch.
"""

from __future__ import annotations

import re
import shutil
import sys
from collections.abc import Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from cudice.model.train import reward as reward_mod
from cudice.model.train.config import RLConfig
from cudice.model.train.data import RLTask
from cudice.model.train.reward import verifier_reward_fn
from cudice.model.train.types import Rollout
from cudice.verifier.backends import VerifyBackend, VerifyJob
from cudice.verifier.config import VerifyConfig
from cudice.verifier.source.result import Stage, Verdict, VerifyResult

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
import kb_candidates  # bench/kb_candidates.py: files holding both Model and ModelNew

needs_nvcc = pytest.mark.skipif(
    not Path("/usr/local/cuda/bin/nvcc").exists() and shutil.which("nvcc") is None,
    reason="needs nvcc (CUDA toolkit)",
)


def _rollouts(texts: Sequence[str], reference: str) -> list[Rollout]:
    task = RLTask("e2e", 1, reference, task_id="t")
    return [Rollout(task, [1], [2], [0], t) for t in texts]


class Chunked(VerifyBackend):
    """Records `prefill` calls and submissions in order; every candidate is `incorrect`."""

    def __init__(self) -> None:
        self.config = VerifyConfig()
        self.events: list[tuple[str, Any]] = []

    def prefill(self, jobs: Sequence[VerifyJob], config: VerifyConfig | None = None) -> None:
        self.events.append(("prefill", [j.source for j in jobs]))

    def _submit(self, job: VerifyJob, config: VerifyConfig) -> Future[VerifyResult]:
        self.events.append(("job", job.source))
        fut: Future[VerifyResult] = Future()
        fut.set_result(VerifyResult(Verdict.INCORRECT, Stage.CORRECTNESS, str(job.path)))
        return fut

    def cancel(self, key: str) -> bool:
        return False

    def shutdown(self, *, cancel_pending: bool = True) -> None:
        pass


def test_each_chunk_of_distinct_candidates_is_prefilled_just_before_it_is_submitted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from cudice.verifier.build import batch

    monkeypatch.setattr(batch, "MAX_BATCH", 2)
    backend = Chunked()
    reward = verifier_reward_fn(backend, idle_between=False)
    texts = ["a", "b", "a  \n", "c", "d", "e"]  # "a  \n" is "a" normalised: verified once
    assert reward(_rollouts(texts, "class Model: ..."), RLConfig()) == [0.0] * 6
    assert backend.events == [
        ("prefill", ["a", "b"]),
        ("job", "a"),
        ("job", "b"),
        ("prefill", ["c", "d"]),
        ("job", "c"),
        ("job", "d"),
        ("prefill", ["e"]),
        ("job", "e"),
    ]
    backend.events.clear()
    assert reward(_rollouts(["b", "f"], "class Model: ..."), RLConfig()) == [0.0, 0.0]
    assert backend.events == [("prefill", ["f"]), ("job", "f")]  # "b" came from the verdict cache


KERNEL = "float v = x[i];"
GOOD = kb_candidates.edited(0)
MISSING_SEMICOLON = kb_candidates.edited(3, (KERNEL, "float v = x[i]"))
UNDECLARED = kb_candidates.edited(4, (KERNEL, "float v = x[i] + undeclared_on_device;"))


def _comparable(result: VerifyResult, cache: Path) -> tuple[object, ...]:
    def clean(text: str) -> str:
        return re.sub(r"objects/[0-9a-f]{32}/", "objects/<key>/", text.replace(str(cache), "<cache>"))

    diags = [(d.code, d.severity, d.location, clean(d.message)) for d in result.diagnostics]
    return result.verdict, result.stage, diags


@needs_nvcc
@pytest.mark.slow
def test_batched_checks_give_the_rewards_verdicts_and_linking_builds_of_a_build_per_candidate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cudice.verifier.api import candidate_modules, gpu_available
    from cudice.verifier.build import batch, nvcc_split, objects
    from cudice.verifier.build.compile import build_module
    from cudice.verifier.pool import VerifyPool

    cache = tmp_path / "cache"
    config = VerifyConfig(cache_dir=cache)
    texts = [GOOD, MISSING_SEMICOLON, UNDECLARED, MISSING_SEMICOLON]  # the last: a repeat, not verified
    rollouts = _rollouts(texts, GOOD)  # the candidate files hold their reference `Model` too

    def clear_outcomes() -> None:
        for folder in ("objects", "libs", "batch"):
            shutil.rmtree(cache / folder, ignore_errors=True)

    reports: list[batch.BatchReport] = []
    real_prefill = batch.prefill

    def spy(*args: Any, **kwargs: Any) -> batch.BatchReport:
        reports.append(real_prefill(*args, **kwargs))
        return reports[-1]

    verdicts: list[list[VerifyResult]] = []
    real_batch = reward_mod._verify_batch

    def keep(*args: Any) -> Any:
        out = real_batch(*args)
        verdicts.append(out[0])
        return out

    monkeypatch.setattr(reward_mod, "_verify_batch", keep)
    monkeypatch.setattr(batch, "prefill", spy)
    gpu = gpu_available()
    with VerifyPool(config, num_compile_workers=2, gpus=[0] if gpu else []) as pool:
        with monkeypatch.context() as off:  # the baseline: every candidate checked alone
            off.setattr(VerifyPool, "prefill", VerifyBackend.prefill)
            alone = verifier_reward_fn(pool)(rollouts, RLConfig())
        assert reports == []
        clear_outcomes()
        batched = verifier_reward_fn(pool)(rollouts, RLConfig())
    # without a GPU the good kernel stops at `compiled`: not scored; with one its timing varies
    first = 0 if not gpu else 1
    assert batched[first:] == alone[first:] == [None, 0.0, 0.0, 0.0][first:]
    assert [_comparable(r, cache) for r in verdicts[1][first:]] == [
        _comparable(r, cache) for r in verdicts[0][first:]
    ]
    assert [r.verdict for r in verdicts[1][1:]] == [Verdict.COMPILE_ERROR] * 3
    (report,) = reports  # one chunk: the three distinct candidates
    assert report.how.get(1) == report.how.get(2) == "batch", report

    # a linking build of a candidate the batch found failing: its verdict without a compiler
    modules = [candidate_modules(f"cand_{i}.py", source=texts[i], reference_source=GOOD)[0] for i in (1, 2)]
    ran: list[object] = []
    with monkeypatch.context() as spies:
        for mod in (nvcc_split, objects):
            spies.setattr(mod, "run_process", lambda *a, **k: ran.append(a) or (1, "", False, False))
        spies.setattr(nvcc_split, "run", lambda *a, **k: ran.append(a) or (1, "", False, False))
        linked = [
            build_module(m, f"cand_{i}.py", config, link=True) for i, m in zip((1, 2), modules, strict=True)
        ]
    assert not ran and [r.ok for r in linked] == [False, False]
    clear_outcomes()  # the unbatched linking builds, compiled
    single = [
        build_module(m, f"cand_{i}.py", config, link=True) for i, m in zip((1, 2), modules, strict=True)
    ]

    def seen(r: Any) -> tuple[object, ...]:
        output = re.sub(r"objects/[0-9a-f]{32}/", "objects/<key>/", r.output)
        return r.ok, r.build_path, r.diagnostics, output, r.undecided

    assert [seen(r) for r in linked] == [seen(r) for r in single]
    assert all(r.diagnostics and r.step_wall_s.get("slim.cuda.cu", 0) > 0.5 for r in single)
