"""Rewards cannot be poisoned silently: a known-good canary in every batch, infrastructure
failures not scored (and left out of the PPO groups), suspicious timing keeps the correctness
reward. Scripted backends: the verdicts are set per candidate text."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path

import pytest
import torch
from cudice.model.train.config import RLConfig
from cudice.model.train.data import RLTask
from cudice.model.train.objective import group_advantages, replay_rows
from cudice.model.train.reward import (
    Canary,
    RewardCanaryError,
    default_canary,
    infrastructure_failure,
    reward_from_result,
    verifier_reward_fn,
)
from cudice.model.train.rl import run_stage
from cudice.model.train.types import Rollout
from cudice.verifier.backends import VerifyBackend, VerifyJob
from cudice.verifier.config import VerifyConfig
from cudice.verifier.source.result import Diagnostic, Severity, Stage, Verdict, VerifyResult
from train_helpers import MASK_ID, PAD_ID, tiny_model

EXAMPLES = Path(__file__).parents[3] / "examples"


def _diag(code: str, message: str = "m", severity: Severity = Severity.ERROR) -> Diagnostic:
    return Diagnostic(severity, message, code, Stage.LOAD)


def _correct(**kw: object) -> VerifyResult:
    base: dict[str, object] = {"speedup": 2.0, "speedup_min": 1.8}
    base.update(kw)
    return VerifyResult(Verdict.CORRECT, Stage.TIMING, "c.py", **base)  # type: ignore[arg-type]


class Scripted(VerifyBackend):
    """`verdict_of(source)` gives each job's result; records every job's source."""

    def __init__(self, verdict_of: Callable[[str], VerifyResult]) -> None:
        self.config = VerifyConfig()
        self.verdict_of = verdict_of
        self.sources: list[str] = []

    def _submit(self, job: VerifyJob, config: VerifyConfig) -> Future[VerifyResult]:
        self.sources.append(job.source or "")
        fut: Future[VerifyResult] = Future()
        fut.set_result(self.verdict_of(job.source or ""))
        return fut

    def cancel(self, key: str) -> bool:
        return False

    def shutdown(self, *, cancel_pending: bool = True) -> None:
        pass


def _by_text(source: str) -> VerifyResult:
    if "canary" in source or "good" in source:
        return _correct()
    if "infra" in source:
        return VerifyResult(
            Verdict.CRASH,
            Stage.LOAD,
            "c.py",
            (_diag("runtime.crash", "The worker process crashed (killed by SIGKILL) before reporting"),),
        )
    return VerifyResult(Verdict.INCORRECT, Stage.CORRECTNESS, "c.py")


def _rollouts(texts: Sequence[str]) -> list[Rollout]:
    task = RLTask("e2e", 1, "class Model: ...", task_id="t")
    return [Rollout(task, [1], [2], [0], t) for t in texts]


CANARY = Canary("canary kernel", "class Model: canary", name="test canary")


def test_the_canary_runs_every_batch_bypassing_the_cache() -> None:
    backend = Scripted(_by_text)
    reward = verifier_reward_fn(backend, canary=CANARY)
    cfg = RLConfig(stage="e2e")
    assert list(reward(_rollouts(["good", "bad"]), cfg)) == [1.0, 0.0]
    assert list(reward(_rollouts(["good", "bad"]), cfg)) == [1.0, 0.0]  # both pairs cached now
    assert backend.sources == ["good", "bad", "canary kernel", "canary kernel"]


def test_a_canary_that_fails_stops_the_step_and_says_why() -> None:
    broken = Scripted(
        lambda s: VerifyResult(
            Verdict.INCORRECT,
            Stage.CORRECTNESS,
            "c.py",
            (_diag("correctness.mismatch", "trial 0: max error 3.0"),),
        )
    )
    reward = verifier_reward_fn(broken, canary=CANARY)
    with pytest.raises(RewardCanaryError) as err:
        reward(_rollouts(["good", "bad"]), RLConfig(stage="e2e"))
    text = str(err.value)
    assert "test canary" in text and "'incorrect'" in text and "expected 'correct'" in text
    assert "correctness.mismatch: trial 0: max error 3.0" in text
    assert "zeroes every reward" in text


def test_a_canary_that_is_correct_without_anti_cheat_also_stops_the_step() -> None:
    no_profiler = _correct(
        diagnostics=(_diag("dynamic.profiler_unavailable", "CUPTI failed", Severity.WARNING),)
    )
    reward = verifier_reward_fn(Scripted(lambda s: no_profiler), canary=CANARY)
    with pytest.raises(RewardCanaryError, match=r"dynamic\.profiler_unavailable"):
        reward(_rollouts(["good", "bad"]), RLConfig(stage="e2e"))


def test_a_learned_expectation_takes_the_first_verdict_then_holds_it() -> None:
    """`expect=None`: a backend without a GPU stops a good kernel at `compiled`; that becomes the
    expectation, its rollouts are not scored, and a later `incorrect` canary stops the step."""
    state = {"verdict": Verdict.COMPILED}

    def verdict(source: str) -> VerifyResult:
        return VerifyResult(
            state["verdict"],
            Stage.COMPILE,
            "c.py",
            (_diag("verify.no_gpu", "No CUDA GPU here", Severity.INFORMATION),),
        )

    reward = verifier_reward_fn(Scripted(verdict), canary=Canary("canary", "ref", expect=None))
    assert list(reward(_rollouts(["good", "bad"]), RLConfig(stage="e2e"))) == [None, None]
    state["verdict"] = Verdict.INCORRECT
    with pytest.raises(RewardCanaryError, match="expected 'compiled'"):
        reward(_rollouts(["other", "more"]), RLConfig(stage="e2e"))
    # a first run that is not a good kernel's verdict is never learned
    bad_first = verifier_reward_fn(Scripted(_by_text), canary=Canary("x", "ref", expect=None))
    with pytest.raises(RewardCanaryError, match="expected 'correct'"):
        bad_first(_rollouts(["good", "bad"]), RLConfig(stage="e2e"))


def test_the_default_canary_is_the_bundled_relu_pair() -> None:
    canary = default_canary()
    assert canary.candidate == (EXAMPLES / "relu_cuda.py").read_text()
    assert canary.reference == (EXAMPLES / "relu.py").read_text()
    assert canary.expect == "correct" and "relu_cuda.py" in canary.name


def test_infrastructure_failures_are_named_and_kernel_failures_are_not() -> None:
    def res(verdict: Verdict, *diags: Diagnostic, error: str | None = None) -> VerifyResult:
        return VerifyResult(verdict, Stage.LOAD, "c.py", diags, error=error)

    infra = [
        res(Verdict.TIMEOUT, error="cancelled"),
        res(Verdict.COMPILE_ERROR, _diag("compile.toolchain", "nvcc not found")),
        res(Verdict.COMPILE_ERROR, _diag("compile.cancelled", "The build cancelled.")),
        res(Verdict.COMPILED, _diag("verify.no_gpu", "No CUDA GPU", Severity.INFORMATION)),
        res(Verdict.CHECKED),
        res(Verdict.CRASH, _diag("runtime.worker_error", "internal")),
        res(Verdict.CRASH, _diag("dist.task_failed", "lost")),
        res(Verdict.CRASH, _diag("runtime.crash", "The worker process crashed (exit status 1) before")),
        res(Verdict.CRASH, _diag("runtime.crash", "The reference process ended or broke the protocol")),
        res(Verdict.TIMEOUT, _diag("runtime.timeout", "The reference did not answer within 10.0 s")),
        res(Verdict.TIMEOUT, _diag("runtime.timeout", "The kernel run was cancelled.")),
        res(Verdict.RUNTIME_ERROR, _diag("sandbox.gpu_group_root", "no GPU", Severity.WARNING)),
        res(Verdict.CRASH, _diag("sandbox.unreadable", "x", Severity.WARNING)),
        _correct(diagnostics=(_diag("dynamic.profiler_unavailable", "CUPTI", Severity.WARNING),)),
    ]
    kernel = [
        res(Verdict.CRASH, _diag("runtime.crash", "The candidate process ended or broke the protocol")),
        res(Verdict.TIMEOUT, _diag("runtime.timeout", "The candidate did not answer within 10.0 s")),
        res(Verdict.TIMEOUT, _diag("runtime.timeout", "The kernel run ran past the 60 s limit")),
        res(Verdict.TIMEOUT, _diag("compile.timeout", "The build timed out after 300 s.")),
        res(Verdict.COMPILE_ERROR, _diag("compile.error", "expected ';'")),
        res(Verdict.RUNTIME_ERROR, _diag("runtime.exception", "The candidate process reported: boom")),
        res(Verdict.INCORRECT, _diag("correctness.mismatch", "trial 0")),
        res(Verdict.STATIC_VIOLATION, _diag("static.torch_op_in_forward", "torch.relu")),
        _correct(diagnostics=(_diag("sandbox.unreadable", "x", Severity.WARNING),)),
        _correct(),
    ]
    assert all(infrastructure_failure(r) is not None for r in infra), [
        r.verdict for r in infra if infrastructure_failure(r) is None
    ]
    assert [infrastructure_failure(r) for r in kernel] == [None] * len(kernel)
    assert "runtime.crash: The worker process crashed" in str(infrastructure_failure(infra[7]))


def test_unscored_rollouts_give_none_are_logged_and_not_cached(caplog: pytest.LogCaptureFixture) -> None:
    backend = Scripted(_by_text)
    reward = verifier_reward_fn(backend)
    cfg = RLConfig(stage="e2e")
    with caplog.at_level(logging.WARNING, logger="cudice.model.train.reward"):
        assert list(reward(_rollouts(["good", "infra", "bad", "infra"]), cfg)) == [1.0, None, 0.0, None]
    assert "2 of 4 rollouts not scored" in caplog.text and "runtime.crash x2" in caplog.text
    reward(_rollouts(["good", "infra"]), cfg)
    assert backend.sources == ["good", "infra", "bad", "infra"]  # the failure is verified again


def test_suspicious_timing_keeps_the_correctness_reward_and_a_cheat_scores_zero() -> None:
    fast = _correct()
    slow = _correct(speedup=0.9, speedup_min=0.8)
    above_10x = _correct(speedup=40.0, speedup_min=35.0, is_suspicious=True)
    unresolved = _correct(
        speedup=1.5,
        speedup_min=1.2,
        is_suspicious=True,
        diagnostics=(_diag("timing.suspicious", "unresolved: below half a launch", Severity.WARNING),),
    )
    cheat = _correct(diagnostics=(_diag("dynamic.output_aliases_input", "aliases"),))
    timed_wrong = VerifyResult(
        Verdict.INCORRECT, Stage.TIMING, "c.py", (_diag("correctness.timed_call_digest", "late"),)
    )
    results = [fast, slow, above_10x, unresolved, cheat, timed_wrong]
    assert [reward_from_result(r, 1.0) for r in results] == [1.0, 0.5, 0.5, 0.5, 0.0, 0.0]
    assert [reward_from_result(r, 1.0, 0.25) for r in results] == [1.0, 0.25, 0.25, 0.25, 0.0, 0.0]
    assert [reward_from_result(r, None) for r in results] == [1.0, 1.0, 1.0, 1.0, 0.0, 0.0]
    reward = verifier_reward_fn(Scripted(lambda s: unresolved))
    assert list(reward(_rollouts(["a"]), RLConfig(stage="e2e", correct_reward=0.3))) == [0.3]
    with pytest.raises(ValueError, match=r"correct_reward=1\.5"):
        RLConfig(correct_reward=1.5)


def test_group_advantages_leave_unscored_samples_out() -> None:
    adv, keep = group_advantages([1.0, None, 0.0, 1.0, None, None, None, None, 1.0, None, 1.0, 0.0], 4)
    scored = torch.tensor([1.0, 0.0, 1.0], dtype=torch.float64)
    z = ((scored - scored.mean()) / scored.std(unbiased=False)).tolist()
    assert keep[:4] == [True, False, True, True]
    assert adv[:4] == pytest.approx([z[0], 0.0, z[1], z[2]])
    assert keep[4:8] == [False] * 4 and adv[4:8] == [0.0] * 4  # all dropped: nothing
    assert keep[8:] == [True, False, True, True]  # mean and spread over the three scored
    one_scored, keep1 = group_advantages([1.0, None], 2)
    assert keep1 == [False, False] and one_scored == [0.0, 0.0]


def test_an_rl_step_with_unscored_rollouts_trains_on_the_scored_ones_only() -> None:
    """Group 0: GOOD scored 1, BAD unscored — under a reward that scores the unscored ones 0 the
    update would push BAD down; leaving them out, group 0 has one scored sample and is dropped,
    while group 1 (GOOD 1, BAD 0) trains. BAD in group 0 is not in any kept row."""
    good, bad, steps = [20, 21, 22, 23], [60, 61, 62, 63], [0, 1, 0, 1]
    tasks = [RLTask("e2e", 1, f"# task {i}", task_id=str(i)) for i in range(2)]

    def rollout_fn(batch: Sequence[RLTask], n: int, cfg: RLConfig) -> list[Rollout]:
        return [
            Rollout(t, [1, 2, 3], good if k % 2 == 0 else bad, steps, f"{t.task_id}:{k % 2}")
            for t in batch
            for k in range(n)
        ]

    def reward_fn(rollouts: Sequence[Rollout], cfg: RLConfig) -> list[float | None]:
        table: dict[str, float | None] = {"0:0": 1.0, "0:1": None, "1:0": 1.0, "1:1": 0.0}
        return [table[r.text] for r in rollouts]

    cfg = RLConfig(stage="e2e", num_steps=1, tasks_per_step=2, samples_per_task=2, learning_rate=1e-3)
    stats = run_stage(
        tiny_model(),
        tasks,
        cfg,
        rollout_fn=rollout_fn,
        reward_fn=reward_fn,
        block_size=4,
        mask_token_id=MASK_ID,
        pad_token_id=PAD_ID,
        cpu=True,
    )
    assert stats[0].num_kept_groups == 1 and stats[0].num_unscored == 1
    assert stats[0].mean_reward == pytest.approx(2.0 / 3.0)  # over the three scored
    one = replay_rows([1, 2, 3], good, steps, block_size=4, mask_token_id=MASK_ID, pad_token_id=PAD_ID)
    assert stats[0].num_rows == 2 * one.clean.shape[0]  # group 1's two rollouts, nothing of group 0


@pytest.mark.skipif(
    not Path("/usr/local/cuda/bin/nvcc").exists() and __import__("shutil").which("nvcc") is None,
    reason="needs nvcc (CUDA toolkit)",
)
def test_the_default_canary_on_a_real_pool(tmp_path: Path) -> None:
    """The bundled relu pair through a real `VerifyPool` passes as the canary: with a GPU it must
    be `correct`; without one (`expect=None`) a good kernel stops at `compiled`, which becomes the
    expectation. Files that are no candidate (no ModelNew) score 0 either way; a second batch
    verifies the canary again."""
    from cudice.verifier.api import gpu_available
    from cudice.verifier.pool import VerifyPool

    reference = (EXAMPLES / "relu.py").read_text()
    task = RLTask("e2e", 1, reference, task_id="relu")
    rollouts = [Rollout(task, [1], [2], [0], t) for t in ("import torch\n", "x = 1\n")]
    gpu = gpu_available()
    config = VerifyConfig(cache_dir=tmp_path / "cache")
    with VerifyPool(config, num_compile_workers=1, gpus=[0] if gpu else []) as pool:
        reward = verifier_reward_fn(pool, canary=default_canary("correct" if gpu else None))
        assert list(reward(rollouts, RLConfig(stage="e2e"))) == [0.0, 0.0]
        assert list(reward(rollouts, RLConfig(stage="e2e"))) == [0.0, 0.0]
        kernelless = (
            "import torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
        )
        broken = verifier_reward_fn(pool, canary=Canary(kernelless, reference, expect=None))
        with pytest.raises(RewardCanaryError, match="got verdict 'static_violation'"):
            broken(rollouts, RLConfig(stage="e2e"))


def test_the_backend_is_warmed_for_each_batch_and_idled_after_it_even_when_it_fails() -> None:
    """Between reward batches the policy has the GPU to itself: warm before the batch's first job,
    idle after its last, also when the batch raises; `idle_between=False` leaves the backend be."""
    events: list[str] = []

    class Recording(Scripted):
        def _submit(self, job: VerifyJob, config: VerifyConfig) -> Future[VerifyResult]:
            events.append("job")
            if "boom" in (job.source or ""):
                raise RuntimeError("the pool broke")
            return super()._submit(job, config)

        def idle(self) -> None:
            events.append("idle")

        def warm(self) -> None:
            events.append("warm")

    reward = verifier_reward_fn(Recording(_by_text), CANARY)
    reward(_rollouts(["good 1", "bad 2"]), RLConfig())
    assert events == ["warm", "job", "job", "job", "idle"]  # two rollouts and the canary
    events.clear()
    with pytest.raises(RuntimeError, match="the pool broke"):
        reward(_rollouts(["boom"]), RLConfig())
    assert events[0] == "warm" and events[-1] == "idle"
    events.clear()
    verifier_reward_fn(Recording(_by_text), idle_between=False)(_rollouts(["good 3"]), RLConfig())
    assert events == ["job"]
