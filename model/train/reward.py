"""BiC-RL rewards: each rollout's code through the verifier, behind a small backend interface.

`VerifyBackend.verify_many(jobs) -> list[VerifyResult]` is all the trainer needs. The local
backend, `PoolBackend`, runs the jobs on a `cudice.verifier.pool.VerifyPool`: compiles on CPU
workers, correctness and timing on the GPUs it is given — meant to be GPUs the policy does not
use, so kernels are timed without the trainer's contention. A backend over several machines
(Ray) implements the same method and plugs into `verifier_reward_fn` unchanged.

Anti-cheat stays on: the pool runs the verifier's static checks and its runtime checks (the
same verdicts the editor shows); a config with the lenient static policy or compile-only is
refused, since either would pay rewards for kernels that only look fast.

Not covered: caching rewards of identical candidates across steps (the build cache already makes
a repeated candidate cheap), partial credit.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from cudice.model.prompts import extract_first_code_block
from cudice.model.train.config import RLConfig
from cudice.model.train.rl import RewardFn, Rollout, reward_from_result


@dataclass(frozen=True, slots=True)
class VerifyJob:
    key: str  # unique within one call
    candidate: str  # the candidate file's text (class ModelNew + load_inline sources)
    reference: str  # the KernelBench reference file's text (class Model, get_inputs, ...)


class VerifyBackend(Protocol):
    def verify_many(self, jobs: Sequence[VerifyJob]) -> list[Any]:
        """One `cudice.verifier.result.VerifyResult` per job, in the order of `jobs`."""
        ...


def check_reward_config(config: Any) -> None:
    """Refuse verifier settings under which a reward could be earned by cheating."""
    if config.static_policy == "lenient":
        raise ValueError("RL rewards need the verifier's anti-cheat: static_policy='lenient' lets PyTorch "
                         "fallbacks pass; use 'default' or 'strict' (docs/anticheat.md)")
    if config.compile_only:
        raise ValueError("RL rewards need correctness runs: compile_only=True rewards nothing; run on a GPU box")


class PoolBackend:
    """Verify on a local `VerifyPool` (one runner per GPU in `gpus`). Close it, or use `with`."""

    def __init__(self, config: Any = None, *, gpus: list[int] | None = None, num_compile_workers: int = 4) -> None:
        from cudice.verifier.config import VerifyConfig
        from cudice.verifier.pool import VerifyPool

        self.config = config or VerifyConfig()
        check_reward_config(self.config)
        self.pool = VerifyPool(self.config, num_compile_workers=num_compile_workers, gpus=gpus)

    def verify_many(self, jobs: Sequence[VerifyJob]) -> list[Any]:
        with tempfile.TemporaryDirectory(prefix="cudice-rl-") as tmp:
            futures = []
            for i, job in enumerate(jobs):
                ref, cand = Path(tmp) / f"ref_{i}.py", Path(tmp) / f"cand_{i}.py"
                ref.write_text(job.reference)
                cand.write_text(job.candidate)
                futures.append(self.pool.submit(cand, reference=ref, key=f"{job.key}#{i}"))
            return [f.result() for f in futures]

    def close(self) -> None:
        self.pool.shutdown()

    def __enter__(self) -> PoolBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def candidate_code(rollout: Rollout) -> str:
    """The file a rollout proposes: its first fenced code block, else its whole text."""
    code = extract_first_code_block(rollout.text)
    return code if code is not None else rollout.text


def verifier_reward_fn(backend: VerifyBackend) -> RewardFn:
    """A `RewardFn`: every rollout's code verified against its task's reference by `backend`."""

    def reward(rollouts: Sequence[Rollout], config: RLConfig) -> list[float]:
        jobs = [VerifyJob(f"{r.task.task_id or 'task'}-{i}", candidate_code(r), r.task.pytorch_code)
                for i, r in enumerate(rollouts)]
        results = backend.verify_many(jobs)
        if len(results) != len(jobs):
            raise RuntimeError(f"verify backend returned {len(results)} results for {len(jobs)} jobs")
        return [reward_from_result(res, config.required_speedup) for res in results]

    return reward
