"""The real rollout and reward functions of BiC-RL: the cudice sampler and the cudice verifier.

`engine_rollout_fn(engine, sampler_config)` samples answers with the block-diffusion sampler
(DICE's RL settings: dynamic strategy, threshold 0.9, temperature 1) and keeps each answer's
step map; `verifier_reward_fn(...)` writes each answer's code next to its task's reference and
asks `cudice.verifier.api.verify` for the one `VerifyResult` that the editor and the benchmark
also use, then `reward_from_result` turns it into 0/1.

Prompts follow DICE's RL: stage 1 gets the infilling prompt and writes the whole file in a code
block (no prefix forcing — that is the editor's variant); stage 2 gets the end-to-end prompt.
Not covered: stop-token targets (the stop token ends a rollout but is not replayed as a target).
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from cudice.model.config import SamplerConfig
from cudice.model.prompts import chat_prompt, e2e_prompt, extract_first_code_block, infill_prompt
from cudice.model.train.config import RLConfig
from cudice.model.train.data import RLTask
from cudice.model.train.rl import RewardFn, Rollout, RolloutFn, reward_from_result


def task_prompt(task: RLTask) -> str:
    """The chat-formatted prompt of one RL task (stage-1 infilling or stage-2 end-to-end)."""
    if task.kind == "infill":
        return chat_prompt(infill_prompt(task.pytorch_code, task.prefix, task.suffix))
    return chat_prompt(e2e_prompt(task.pytorch_code))


def engine_rollout_fn(engine: Any, base: SamplerConfig | None = None) -> RolloutFn:
    """A `RolloutFn` over a `cudice.model.engine.Engine`: one batch per RL step."""

    def rollout(tasks: Sequence[RLTask], samples_per_task: int, config: RLConfig) -> list[Rollout]:
        sampler_config = dataclasses.replace(
            base or SamplerConfig(), strategy="low_confidence_dynamic", threshold=config.threshold,
            temperature=config.temperature, max_new_tokens=config.max_new_tokens,
        )
        prompts = [task_prompt(t) for t in tasks for _ in range(samples_per_task)]
        result = engine.generate_texts(prompts, sampler_config)
        owners = [t for t in tasks for _ in range(samples_per_task)]
        return [
            Rollout(task=t, prompt_ids=engine.encode(p), response_ids=list(row.tokens),
                    step_map=list(row.step_map), text=row.text)
            for t, p, row in zip(owners, prompts, result.rows, strict=True)
        ]

    return rollout


def candidate_code(rollout: Rollout) -> str:
    """The file a rollout proposes: its first fenced code block, else its whole text."""
    code = extract_first_code_block(rollout.text)
    return code if code is not None else rollout.text


def verifier_reward_fn(verify_config: Any = None, max_workers: int = 4) -> RewardFn:
    """A `RewardFn` that verifies each rollout's code against its task's reference."""

    def reward(rollouts: Sequence[Rollout], config: RLConfig) -> list[float]:
        from cudice.verifier.api import verify

        with tempfile.TemporaryDirectory(prefix="cudice-rl-") as tmp:
            def one(i: int) -> float:
                r = rollouts[i]
                ref = Path(tmp) / f"ref_{i}.py"
                cand = Path(tmp) / f"cand_{i}.py"
                ref.write_text(r.task.pytorch_code)
                cand.write_text(candidate_code(r))
                result = verify(cand, reference=ref, config=verify_config)
                return reward_from_result(result, config.required_speedup)

            with ThreadPoolExecutor(max_workers=max_workers) as pool:
                return list(pool.map(one, range(len(rollouts))))

    return reward
