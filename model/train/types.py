"""The types BiC-RL's modules share: a rollout, and the rollout and reward callables.

`rl` (the loop), `rollout` (the sampler side), `reward` (the verifier side) and `ppo` (the update)
all read these; they live here, below all four, so that none of them imports another for its
types and no module of `cudice.model.train` imports `rl` for one: the loop imports the others,
never the reverse (tests/model/test_import_structure.py keeps the package's imports acyclic).
This module imports only the config and the task record, neither torch nor the verifier.
Not covered: the loop's own records (`rl.StepStats`), the reward's jobs (`reward.RewardJob`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from cudice.model.train.config import RLConfig
from cudice.model.train.data import RLTask


@dataclass(frozen=True, slots=True)
class Rollout:
    """One sampled answer: the replayed token ids and step map, and the text the reward reads.

    `response_ids`/`step_map` are every decoded block as the sampler saw it (the stop token and
    what its block holds after it included: RL learns to stop); `text` is the answer cut at the
    stop, as the editor would get it. `logprobs`, when the sampler recorded them (one per
    response id): each token's log-probability under the policy that sampled it, in the state
    the replay rebuilds; the update's `logp_old` (`RLConfig.old_logprobs`). Empty otherwise.
    """

    task: RLTask
    prompt_ids: list[int]
    response_ids: list[int]
    step_map: list[int]
    text: str
    finish_reason: str = ""
    logprobs: list[float] = field(default_factory=list)


RolloutFn = Callable[[Sequence[RLTask], int, RLConfig], list[Rollout]]
"""(tasks, samples_per_task, config) -> len(tasks) * samples_per_task rollouts, grouped by task."""

RewardFn = Callable[[Sequence[Rollout], RLConfig], Sequence[float | None]]
"""(rollouts, config) -> one reward per rollout, in order; None for a rollout that was not scored
(the verifier failed, not the kernel): the update leaves it out of its group."""
