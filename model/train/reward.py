"""BiC-RL rewards: each rollout's code through the verifier's one backend interface.

`verifier_reward_fn(backend)` verifies every rollout's candidate against its task's reference on
a `cudice.verifier.backends.VerifyBackend` — the local `VerifyPool` (`reward_pool(...)`: compiles
on CPU workers, correctness and timing on the GPUs it is given, meant to be GPUs the policy does
not use, so kernels are timed without the trainer's contention) or the Ray backend — so a reward
is the same `VerifyResult` the editor and `cudice eval` get, read by `reward_from_result`.
`verify_texts(backend, jobs)` is the step in between: one batch, results in job order. Candidate
and reference both go to the backend as text (`source=`, `reference_source=`); the paths are only
names the diagnostics carry, and no file is written.

Anti-cheat stays on: the backend runs the verifier's static checks and its runtime checks (the
same verdicts the editor shows); a backend configured with the lenient static policy or
compile-only is refused, since either would pay rewards for kernels that only look fast.

Each distinct (candidate, reference) pair, as normalised text, is verified once per
`verifier_reward_fn`: repeats within a batch and across steps reuse the first verdict (rollouts
of a peaked policy repeat often). A verdict's speedup is then measured once per distinct kernel.

Not covered: partial credit; a verdict cache shared between reward functions or runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cudice.model.prompts import extract_first_code_block
from cudice.model.train.config import RLConfig
from cudice.model.train.types import RewardFn, Rollout

if TYPE_CHECKING:
    from cudice.verifier.backends import VerifyBackend
    from cudice.verifier.pool import VerifyPool
    from cudice.verifier.result import VerifyResult


def reward_from_result(result: Any, required_speedup: float | None) -> float:
    """Binary execution reward from a `cudice.verifier.result.VerifyResult`.

    Correctness only when `required_speedup` is None (DICE's released reward); otherwise the
    speedup must clear the bound beyond its measured spread (`VerifyResult.is_fast`, the same
    test as the benchmark's fast_p).
    """
    if not result.is_correct:
        return 0.0
    if required_speedup is None:
        return 1.0
    return 1.0 if result.is_fast(required_speedup) else 0.0


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


def verify_texts(
    backend: VerifyBackend,
    jobs: Sequence[RewardJob],
    cache: dict[tuple[str, str], VerifyResult] | None = None,
) -> list[VerifyResult]:
    """One `VerifyResult` per job, in the order of `jobs`: candidate and reference as text, no
    file written (the paths are names the diagnostics carry). Each distinct (candidate, reference)
    pair, compared as `normalised` text, is verified once; `cache` (updated here) carries the
    verdicts of earlier batches, so a rollout repeated across steps is not verified again."""
    from cudice.verifier.backends import VerifyJob, verify_all

    cache = {} if cache is None else cache
    names: dict[str, str] = {}  # one name per distinct reference
    pairs = [(normalised(job.candidate), normalised(job.reference)) for job in jobs]
    todo: dict[tuple[str, str], VerifyJob] = {}
    for i, (job, pair) in enumerate(zip(jobs, pairs, strict=True)):
        if pair in cache or pair in todo:
            continue
        todo[pair] = VerifyJob(
            f"cand_{i}.py",
            source=as_read_back(job.candidate),
            reference=names.setdefault(pair[1], f"<reference {len(names)}>"),
            key=f"{job.key}#{i}",
            reference_source=as_read_back(job.reference),
        )
    for pair, result in zip(todo, verify_all(backend, list(todo.values())), strict=True):
        cache[pair] = result
    return [cache[pair] for pair in pairs]


def normalised(text: str) -> str:
    """`text` with what cannot change a verdict removed: line endings made `\n`, trailing
    whitespace of each line and trailing blank lines dropped (comments stay: `# cudice:` lines
    name references)."""
    lines = [line.rstrip() for line in as_read_back(text).split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


def as_read_back(text: str) -> str:
    """`text` as the verifier read it back from a file this module wrote: newlines made `\\n`
    (the universal-newline read), so a candidate passed as text is verified as its file was."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def candidate_code(rollout: Rollout) -> str:
    """The file a rollout proposes: its first fenced code block, else its whole text."""
    code = extract_first_code_block(rollout.text)
    return code if code is not None else rollout.text


def verifier_reward_fn(backend: VerifyBackend) -> RewardFn:
    """A `RewardFn`: every rollout's code verified against its task's reference by `backend`
    (refused when the backend's config turns anti-cheat or the correctness runs off)."""
    check_reward_config(backend.config)

    verdicts: dict[tuple[str, str], VerifyResult] = {}  # every step's, by normalised text

    def reward(rollouts: Sequence[Rollout], config: RLConfig) -> list[float]:
        jobs = [
            RewardJob(f"{r.task.task_id or 'task'}-{i}", candidate_code(r), r.task.pytorch_code)
            for i, r in enumerate(rollouts)
        ]
        results = verify_texts(backend, jobs, verdicts)
        if len(results) != len(jobs):
            raise RuntimeError(f"verify backend returned {len(results)} results for {len(jobs)} jobs")
        return [reward_from_result(res, config.required_speedup) for res in results]

    return reward
