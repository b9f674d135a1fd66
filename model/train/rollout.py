"""BiC-RL rollouts through the cudice block-diffusion sampler, in micro-batches under a memory budget.

`engine_rollout_fn(engine)` samples answers with DICE's RL settings (dynamic strategy,
threshold 0.9, temperature 1; `Engine(loaded, fast=True)` runs the static-cache CUDA-graph
path). The prompts of one RL step are sorted by length and cut into micro-batches whose KV
cache fits `RLConfig.rollout_memory_gib` (`rows_per_microbatch`): DICE's 64 × 16 rollouts of
up to 2000 + 4096 tokens would need hundreds of GB of cache at 1.7B in one batch. Each
micro-batch samples with its own seed (the step's seed + its index), so repeated prompts of one
task get distinct answers wherever they land.

A rollout keeps every decoded block untrimmed (`RowResult.block_tokens`/`block_step_map`):
the replay then sees the last block exactly as the sampler did, with the stop token as a
target, so RL can learn to stop. The reward reads `text`, the answer cut at the stop.

Prompts follow DICE's RL: stage 1 gets the infilling prompt and writes the whole file in a code
block (no prefix forcing — that is the editor's variant); stage 2 gets the end-to-end prompt.
The sampler can run on its own copy of the weights: `RolloutWeights(master)` keeps a bf16 copy
of the trainer's fp32 master weights (half their memory; the sampler's forwards in bf16), which
`run_stage` refreshes (`refresh`, in place: the fast path's packed weights are views and see it)
at the stage start and after every update; `RolloutWeights.loaded(loaded)` gives the
`LoadedModel` to build the `Engine` on. The replay's log-probabilities (the PPO ratio and its
`logp_old`) stay on the master weights: a rollout sampled in bf16 is scored by the trainer's own
policy. `dtype=torch.float32` makes an exact copy (the tests' check that the path samples the
master's tokens).
Not covered: continuous batching across micro-batches (each runs to its longest answer); a copy
of a LoRA-wrapped model (refused: the sampler then runs on the master, as before).
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
from collections.abc import Sequence
from typing import Any

import torch
from cudice.model.config import SamplerConfig
from cudice.model.prompts import chat_prompt, e2e_prompt, infill_prompt
from cudice.model.train.config import RLConfig
from cudice.model.train.data import RLTask
from cudice.model.train.types import Rollout, RolloutFn

_GIB = 1024**3


def task_prompt(task: RLTask) -> str:
    """The chat-formatted prompt of one RL task (stage-1 infilling or stage-2 end-to-end)."""
    if task.kind == "infill":
        return chat_prompt(infill_prompt(task.pytorch_code, task.prefix, task.suffix))
    return chat_prompt(e2e_prompt(task.pytorch_code))


def kv_bytes_per_token(model_config: Any, dtype_bytes: int) -> int:
    """K and V of every layer for one token: 2 · layers · kv_heads · head_dim · bytes."""
    heads = getattr(model_config, "num_key_value_heads", None) or model_config.num_attention_heads
    head_dim = (
        getattr(model_config, "head_dim", None)
        or model_config.hidden_size // model_config.num_attention_heads
    )
    return int(2 * model_config.num_hidden_layers * heads * head_dim * dtype_bytes)


def rows_per_microbatch(
    model_config: Any,
    prompt_tokens: int,
    max_new_tokens: int,
    block_size: int,
    budget_gib: float,
    dtype_bytes: int,
) -> int:
    """How many rollouts of this prompt length fit the KV budget at once (at least 1)."""
    per_row = kv_bytes_per_token(model_config, dtype_bytes) * (
        prompt_tokens + max_new_tokens + 2 * block_size
    )
    return max(1, int(budget_gib * _GIB // per_row))


def microbatches(
    lengths: Sequence[int], model_config: Any, config: RLConfig, block_size: int, dtype_bytes: int
) -> list[list[int]]:
    """Indices of `lengths` (prompt tokens), shortest first, cut so that each group fits the budget."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    groups: list[list[int]] = []
    for i in order:  # ascending: the newest member is the group's longest prompt
        limit = rows_per_microbatch(
            model_config,
            lengths[i],
            config.max_new_tokens,
            block_size,
            config.rollout_memory_gib,
            dtype_bytes,
        )
        if groups and len(groups[-1]) < limit:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


class RolloutWeights:
    """The sampler's copy of the trainer's weights, its parameters in `dtype` (buffers such as the
    rotary frequencies keep theirs). `refresh(master)` copies the master's current values in place."""

    def __init__(self, master: torch.nn.Module, dtype: torch.dtype = torch.bfloat16) -> None:
        if any("lora_" in name for name, _ in master.named_parameters()):
            raise ValueError(
                "RolloutWeights copies a plain model, not a LoRA-wrapped one: sample from the master"
            )
        self.dtype = dtype
        self.module: torch.nn.Module = copy.deepcopy(master)
        for param in self.module.parameters():
            param.requires_grad_(False)
            param.data = param.data.to(dtype)
        self.module.eval()
        self.refreshes = 0  # how many times the copy took the master's values

    def _tensors(self, module: torch.nn.Module) -> dict[str, torch.Tensor]:
        return dict(itertools.chain(module.named_parameters(), module.named_buffers()))

    @torch.no_grad()
    def refresh(self, master: torch.nn.Module) -> None:
        """Copy `master`'s parameters and buffers (the unwrapped module: same names) into the copy."""
        own, src = self._tensors(self.module), self._tensors(master)
        missing = sorted(own.keys() - src.keys())
        if missing:
            raise ValueError(
                f"the master has no {missing[:3]} (of {len(missing)}): RolloutWeights needs the "
                "unwrapped model it was copied from"
            )
        for name, tensor in own.items():
            tensor.copy_(src[name])
        self.refreshes += 1

    def loaded(self, loaded: Any) -> Any:
        """`loaded` (a `cudice.model.loader.LoadedModel`) with this copy as its model."""
        return dataclasses.replace(loaded, model=self.module, dtype=self.dtype)


def engine_rollout_fn(engine: Any, base: SamplerConfig | None = None) -> RolloutFn:
    """A `RolloutFn` over a `cudice.model.engine.Engine`, micro-batched under the KV budget."""

    def rollout(tasks: Sequence[RLTask], samples_per_task: int, config: RLConfig) -> list[Rollout]:
        sampler_config = dataclasses.replace(
            base or SamplerConfig(),
            strategy="low_confidence_dynamic",
            threshold=config.threshold,
            temperature=config.temperature,
            max_new_tokens=config.max_new_tokens,
        )
        owners = [t for t in tasks for _ in range(samples_per_task)]
        prompts = [task_prompt(t) for t in owners]
        encoded = [engine.encode(p) for p in prompts]
        block = engine.block_length(sampler_config)
        dtype_bytes = engine.runner.dtype.itemsize
        rows: list[Any] = [None] * len(prompts)
        groups = microbatches(
            [len(e) for e in encoded], engine.loaded.model.config, config, block, dtype_bytes
        )
        for k, group in enumerate(groups):
            result = engine.generate_texts(
                [prompts[i] for i in group], sampler_config.replace(seed=config.seed * 100_003 + k)
            )
            for i, row in zip(group, result.rows, strict=True):
                rows[i] = row
        return [
            Rollout(
                task=t,
                prompt_ids=e,
                response_ids=list(row.block_tokens),
                step_map=list(row.block_step_map),
                text=row.text,
                finish_reason=row.finish_reason,
            )
            for t, e, row in zip(owners, encoded, rows, strict=True)
        ]

    return rollout


def prompt_token_counter(engine: Any) -> Any:
    """`count_prompt_tokens` for `run_stage`: the length of a task's chat prompt in tokens."""
    return lambda task: len(engine.encode(task_prompt(task)))
