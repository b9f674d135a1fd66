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
block (no prefix forcing — that is the editor's variant); stage 2 gets the end-to-end prompt. Their
wording is a `cudice.model.prompt_styles.PromptStyle` (`style`; default cudice's own prompts).
The sampler can run on its own copy of the weights: `RolloutWeights(master)` keeps a bf16 copy
of the trainer's fp32 master weights (half their memory; the sampler's forwards in bf16), which
`run_stage` refreshes (`refresh`, in place: the fast path's packed weights are views and see it)
at the stage start and after every update; `RolloutWeights.loaded(loaded)` gives the
`LoadedModel` to build the `Engine` on. The replay's log-probabilities (the PPO ratio's
numerator) are the master weights'; a rollout also carries the log-probability the sampler drew
each token with (`Rollout.logprobs`, recorded where those are the policy's own: `policy_logprobs`),
which the update takes as `logp_old` by default (`RLConfig.old_logprobs`): the ratio is then
against the bf16 copy that actually sampled, and no pass over the rollouts precedes the update.
`dtype=torch.float32` makes an exact copy (the tests' check that the path samples the master's
tokens, and that the recorded log-probabilities equal the replay's).

LoRA: the master may be a peft model (or a model peft injected its LoRA layers into). The copy
is then the plain model, under the names the fast sampler reads (`...q_proj.weight`), holding
the merged weights `W + scale · B·A` of every adapted module (peft's `get_delta_weight`, the
delta `merge_and_unload` adds); `refresh` recomputes them layer by layer from the master's
current base weights and adapters, and never merges into the master. The copy may be made from
the plain model before `prepare_model` wraps it (the CLI's order) or from the wrapped one.
LoRA dropout needs nothing: rollouts sample the master in eval mode (`run_stage`), where peft's
dropout is the identity, so the merged copy is the policy the eager path sampled. Refused with
`UnmergeableLoraError` (the adapters are not a weight delta, or not one this copy can hold):
LoRA variants (DoRA and the others peft implements through `lora_variant`), `lora_bias`,
several active adapters, adapters already merged or disabled, LoRA on layers other than
`nn.Linear`/`nn.Embedding` (convolutions, attention, parameter targets, quantized bases), LoRA
on a tied weight (`lm_head` of a model with `tie_word_embeddings`: merging would change the
embedding too), and `lora_` parameters outside a peft LoRA layer.
Not covered: continuous batching across micro-batches (each runs to its longest answer); peft
tuners other than LoRA and peft's `modules_to_save` (refused too: the error names the module).
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
from collections.abc import Sequence
from typing import Any

import torch
from cudice.model.config import SamplerConfig
from cudice.model.prompt_styles import CUDICE_STYLE, PromptStyle
from cudice.model.train.config import RLConfig
from cudice.model.train.data import RLTask
from cudice.model.train.prepare import base_model
from cudice.model.train.types import Rollout, RolloutFn

_GIB = 1024**3


def task_prompt(task: RLTask, style: PromptStyle | None = None) -> str:
    """The chat-formatted prompt of one RL task (stage-1 infilling or stage-2 end-to-end) in
    `style`'s wording (None: cudice's)."""
    style = style or CUDICE_STYLE
    if task.kind == "infill":
        return style.chat(style.infill(task.pytorch_code, task.prefix, task.suffix))
    return style.chat(style.e2e(task.pytorch_code))


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


class UnmergeableLoraError(ValueError):
    """A LoRA master whose adapters the rollout copy cannot hold as merged weights; says why."""


def _lora_classes() -> tuple[type, ...]:
    """peft's LoRA layer classes whose merge is `W + get_delta_weight` (empty without peft)."""
    try:
        from peft.tuners.lora import Embedding, Linear
    except ImportError:
        return ()
    return (Linear, Embedding)


def _adapted_layers(base: torch.nn.Module) -> dict[str, Any]:
    """The LoRA layers of `base` (the model under the peft wrapper) by module name, each checked
    to merge as `W + get_delta_weight(adapter)` with one active adapter; raises
    `UnmergeableLoraError` otherwise."""
    supported = _lora_classes()
    tuner: tuple[type, ...] = ()  # peft layers of other kinds (LoRA elsewhere, IA3, ...)
    saved: tuple[type, ...] = ()  # peft's modules_to_save / trainable-token wrappers
    if supported:
        from peft.tuners.tuners_utils import BaseTunerLayer
        from peft.utils.other import AuxiliaryTrainingWrapper

        tuner, saved = (BaseTunerLayer,), (AuxiliaryTrainingWrapper,)
    layers: dict[str, Any] = {}
    inside = ""  # the adapted layer whose submodules (base layer, adapters) are being walked
    for name, module in base.named_modules():  # parents before their children
        if inside and name.startswith(inside):
            continue
        kind = f"{type(module).__module__}.{type(module).__name__}"
        if type(module) in supported:
            layers[name], inside = _checked(name, module), f"{name}."
        elif isinstance(module, tuner):
            raise UnmergeableLoraError(
                f"{name} is a {kind}: the rollout copy holds merged LoRA on nn.Linear and "
                "nn.Embedding modules only; target those (ModelSetup.lora_target_modules) or sample "
                "from the master (no rollout_weights)"
            )
        elif isinstance(module, saved):
            raise UnmergeableLoraError(
                f"{name} is a {kind} (peft's modules_to_save or trainable tokens): the rollout copy "
                "holds merged LoRA only; leave modules_to_save unset or sample from the master "
                "(no rollout_weights)"
            )
        elif any("lora_" in f"{name}.{n}" for n, _ in module.named_parameters(recurse=False)):
            raise UnmergeableLoraError(
                f"{name or 'the model'} ({type(module).__name__}) holds lora_ parameters but is not a "
                "peft LoRA layer: "
                "the rollout copy cannot merge an adapter it does not know; wrap the model with peft "
                "(ModelSetup.lora_rank) or sample from the master (no rollout_weights)"
            )
    if layers:  # a merged weight tied to another (lm_head to embed_tokens) would change both
        shared: dict[int, list[str]] = {}
        for name, param in base.named_parameters(remove_duplicate=False):
            shared.setdefault(id(param), []).append(name)
        for name, layer in layers.items():
            tied = [n for n in shared[id(layer.get_base_layer().weight)] if not n.startswith(f"{name}.")]
            if tied:
                raise UnmergeableLoraError(
                    f"{name}: its base weight is tied to {tied[0]}, so a merged copy would add the "
                    "adapter there too (the LoRA model adds it here only); leave the tied module out "
                    "of ModelSetup.lora_target_modules or sample from the master (no rollout_weights)"
                )
    return layers


def _checked(name: str, layer: Any) -> Any:
    """`layer` if its active adapter merges as a plain weight delta; else `UnmergeableLoraError`."""
    active = list(layer.active_adapters)
    why = ""
    base = layer.get_base_layer()
    if layer.disable_adapters:
        why = "its adapters are disabled (the master samples without them); enable them"
    elif layer.merged:
        why = f"adapters {layer.merged_adapters} are already merged into its base weight; unmerge them"
    elif len(active) != 1:
        why = f"{len(active)} adapters are active ({active}); activate exactly one"
    elif type(base) not in (torch.nn.Linear, torch.nn.Embedding):
        why = f"its base layer is a {type(base).__name__}, not an nn.Linear or nn.Embedding"
    elif active[0] in getattr(layer, "lora_variant", {}):
        variant = type(layer.lora_variant[active[0]]).__name__
        why = f"adapter {active[0]!r} is a LoRA variant ({variant}, e.g. use_dora), not W + scale · B·A"
    elif getattr(layer, "lora_bias", {}).get(active[0], False):
        why = f"adapter {active[0]!r} has lora_bias=True (it changes the bias too)"
    if why:
        raise UnmergeableLoraError(
            f"{name}: the rollout copy cannot hold this LoRA layer as merged weights: {why}; or sample "
            "from the master (no rollout_weights)"
        )
    return layer


def _owner(name: str, layers: dict[str, Any]) -> str:
    """The adapted layer a tensor name lies under ("" when none)."""
    parts = name.split(".")
    return next((o for o in (".".join(parts[:i]) for i in range(1, len(parts))) if o in layers), "")


class RolloutWeights:
    """The sampler's copy of the trainer's weights, its parameters in `dtype` (buffers such as the
    rotary frequencies keep theirs). `refresh(master)` copies the master's current values in place;
    a LoRA master's adapted modules are copied merged (module docstring)."""

    def __init__(self, master: torch.nn.Module, dtype: torch.dtype = torch.bfloat16) -> None:
        base = base_model(master)
        layers = _adapted_layers(base)
        self.dtype = dtype
        # deepcopy with every (non-adapter) parameter already converted and every LoRA layer already
        # replaced by a copy of its base layer: the copy never holds a second fp32 model, and has
        # the plain model's structure and names
        memo: dict[int, Any] = {}
        for name, param in base.named_parameters():
            if not _owner(name, layers) or ".base_layer." in name:  # not an adapter's
                own = param.detach().to(dtype, copy=True)  # a copy even in the master's dtype
                memo[id(param)] = torch.nn.Parameter(own, requires_grad=False)
        for layer in layers.values():
            memo[id(layer)] = copy.deepcopy(layer.get_base_layer(), memo)
        self.module: torch.nn.Module = copy.deepcopy(base, memo)
        self.module.requires_grad_(False)
        self.module.eval()
        self.refreshes = 0  # how many times the copy took the master's values
        if layers:  # the base layers' copies hold W: merge the adapters in
            self.refresh(master)
            self.refreshes = 0

    def _tensors(self, module: torch.nn.Module) -> dict[str, torch.Tensor]:
        return dict(itertools.chain(module.named_parameters(), module.named_buffers()))

    @torch.no_grad()
    def refresh(self, master: torch.nn.Module) -> None:
        """Copy `master`'s parameters and buffers (the unwrapped module: same names; or its peft
        wrapper, whose adapted modules are copied merged) into the copy."""
        base = base_model(master)
        layers = _adapted_layers(base)
        src: dict[str, torch.Tensor] = {}
        for name, tensor in self._tensors(base).items():
            owner = _owner(name, layers)
            if not owner:
                src[name] = tensor
            elif name.startswith(f"{owner}.base_layer."):  # its base weight, bias (adapters: below)
                src[owner + name[len(owner) + len(".base_layer") :]] = tensor
        own = self._tensors(self.module)
        missing = sorted(own.keys() - src.keys())
        if missing:
            raise ValueError(
                f"the master has no {missing[:3]} (of {len(missing)}): RolloutWeights needs the "
                "model it was copied from (plain, or wrapped by peft's LoRA only)"
            )
        for name, tensor in own.items():
            if name.rsplit(".", 1)[0] not in layers or not name.endswith(".weight"):
                tensor.copy_(src[name])
        for name, layer in layers.items():  # one merged weight at a time: W + scale · B·A
            weight = layer.get_base_layer().weight
            own[f"{name}.weight"].copy_(weight + layer.get_delta_weight(layer.active_adapters[0]))
        self.refreshes += 1

    def loaded(self, loaded: Any) -> Any:
        """`loaded` (a `cudice.model.loader.LoadedModel`) with this copy as its model."""
        return dataclasses.replace(loaded, model=self.module, dtype=self.dtype)


def engine_rollout_fn(
    engine: Any, base: SamplerConfig | None = None, style: PromptStyle | None = None
) -> RolloutFn:
    """A `RolloutFn` over a `cudice.model.engine.Engine`, micro-batched under the KV budget; its
    prompts are `task_prompt(task, style)`."""

    def rollout(tasks: Sequence[RLTask], samples_per_task: int, config: RLConfig) -> list[Rollout]:
        sampler_config = dataclasses.replace(
            base or SamplerConfig(),
            strategy="low_confidence_dynamic",
            threshold=config.threshold,
            temperature=config.temperature,
            max_new_tokens=config.max_new_tokens,
        )
        owners = [t for t in tasks for _ in range(samples_per_task)]
        prompts = [task_prompt(t, style) for t in owners]
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
        policy_probs = policy_logprobs(sampler_config)
        return [
            Rollout(
                task=t,
                prompt_ids=e,
                response_ids=list(row.block_tokens),
                step_map=list(row.block_step_map),
                text=row.text,
                finish_reason=row.finish_reason,
                logprobs=list(row.block_logprobs) if policy_probs else [],
            )
            for t, e, row in zip(owners, encoded, rows, strict=True)
        ]

    return rollout


def policy_logprobs(config: SamplerConfig) -> bool:
    """Whether the probabilities the sampler draws with are the policy's own: at temperature 1
    without a top-k or top-p filter (the softmax of the logits), or greedy (the sampler's
    confidence is then the unfiltered softmax's largest entry). Elsewhere the draws follow a
    reshaped distribution, which the replay (raw logits) does not score, so the rollout records
    none and the update computes `logp_old` itself."""
    if config.temperature == 0:
        return True
    return config.temperature == 1 and config.top_k == 0 and config.top_p == 1


def prompt_token_counter(engine: Any, style: PromptStyle | None = None) -> Any:
    """`count_prompt_tokens` for `run_stage`: the length of a task's chat prompt in tokens."""
    return lambda task: len(engine.encode(task_prompt(task, style)))
