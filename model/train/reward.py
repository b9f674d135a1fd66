"""BiC-RL rewards: each rollout's code through the verifier's one backend interface.

`verifier_reward_fn(backend)` verifies every rollout's candidate against its task's reference on
a `cudice.verifier.backends.VerifyBackend` — the local `VerifyPool` (`reward_pool(...)`: compiles
on CPU workers, correctness and timing on the GPUs it is given, meant to be GPUs the policy does
not use, so kernels are timed without the trainer's contention) or the Ray backend — so a reward
is the same `VerifyResult` the editor and `cudice eval` get. `verify_texts(backend, jobs)` is
the step in between: the texts written to files, verified in one batch, results in job order.

Anti-cheat stays on: the backend runs the verifier's static checks and its runtime checks (the
same verdicts the editor shows); a backend configured with the lenient static policy or
compile-only is refused, since either would pay rewards for kernels that only look fast.

Not covered: caching rewards of identical candidates across steps (the build cache already makes
a repeated candidate cheap), partial credit.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cudice.model.prompts import extract_first_code_block
from cudice.model.train.config import RLConfig
from cudice.model.train.rl import RewardFn, Rollout, reward_from_result

if TYPE_CHECKING:
    from cudice.verifier.backends import VerifyBackend
    from cudice.verifier.pool import VerifyPool
    from cudice.verifier.result import VerifyResult


@dataclass(frozen=True, slots=True)
class RewardJob:
    key: str  # unique within one call
    candidate: str  # the candidate file's text (class ModelNew + load_inline sources)
    reference: str  # the KernelBench reference file's text (class Model, get_inputs, ...)


def check_reward_config(config: Any) -> None:
    """Refuse verifier settings under which a reward could be earned by cheating."""
    if config.static_policy == "lenient":
        raise ValueError(
            "RL rewards need the verifier's anti-cheat: static_policy='lenient' lets PyTorch "
            "fallbacks pass; use 'default' or 'strict' (docs/anticheat.md)"
        )
    if config.compile_only:
        raise ValueError(
            "RL rewards need correctness runs: compile_only=True rewards nothing; run on a GPU box"
        )


def reward_pool(
    config: Any = None, *, gpus: list[int] | None = None, num_compile_workers: int = 4
) -> VerifyPool:
    """A local `VerifyPool` for rewards (one runner per GPU in `gpus`); close it, or use `with`."""
    from cudice.verifier.config import VerifyConfig
    from cudice.verifier.pool import VerifyPool

    config = config or VerifyConfig()
    check_reward_config(config)
    return VerifyPool(config, num_compile_workers=num_compile_workers, gpus=gpus)


def verify_texts(backend: VerifyBackend, jobs: Sequence[RewardJob]) -> list[VerifyResult]:
    """One `VerifyResult` per job, in the order of `jobs`: the texts as files in a temporary folder."""
    from cudice.verifier.backends import VerifyJob, verify_all

    with tempfile.TemporaryDirectory(prefix="cudice-rl-") as tmp:
        files = []
        for i, job in enumerate(jobs):
            ref, cand = Path(tmp) / f"ref_{i}.py", Path(tmp) / f"cand_{i}.py"
            ref.write_text(job.reference)
            cand.write_text(job.candidate)
            files.append(VerifyJob(cand, reference=ref, key=f"{job.key}#{i}"))
        return verify_all(backend, files)


def candidate_code(rollout: Rollout) -> str:
    """The file a rollout proposes: its first fenced code block, else its whole text."""
    code = extract_first_code_block(rollout.text)
    return code if code is not None else rollout.text


def verifier_reward_fn(backend: VerifyBackend) -> RewardFn:
    """A `RewardFn`: every rollout's code verified against its task's reference by `backend`
    (refused when the backend's config turns anti-cheat or the correctness runs off)."""
    check_reward_config(backend.config)

    def reward(rollouts: Sequence[Rollout], config: RLConfig) -> list[float]:
        jobs = [
            RewardJob(f"{r.task.task_id or 'task'}-{i}", candidate_code(r), r.task.pytorch_code)
            for i, r in enumerate(rollouts)
        ]
        results = verify_texts(backend, jobs)
        if len(results) != len(jobs):
            raise RuntimeError(f"verify backend returned {len(results)} results for {len(jobs)} jobs")
        return [reward_from_result(res, config.required_speedup) for res in results]

    return reward
