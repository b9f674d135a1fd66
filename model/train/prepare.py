"""How a model is made ready to train, and read back out: precision, checkpointing, LoRA.

- `make_accelerator(setup)`: the one `accelerate.Accelerator` of a run. accelerate reads the
  launch environment (`accelerate launch`, torchrun), so the same code runs on one device, on
  several processes with DDP, or under an FSDP config.
- `prepare_model(model, setup)`: weights in fp32 (the optimizer's master copy: a bf16 weight
  cannot take a 1e-6 step, since bf16 keeps 8 significant bits), gradient checkpointing,
  LoRA adapters through peft.
- `autocast(accelerator, setup)`: the forward's autocast context for the precision mode.
  "bf16-autocast" is plain `torch.autocast`; "accelerate-*" lets accelerate wrap the forward
  (and, for fp16, scale the loss). The backward and the optimizer always see fp32 weights.
- `export_state_dict(model)`: the weights to save under their native Qwen3 names; LoRA adapters
  are merged (W + B·A·alpha/r) without touching the training copy. `save_trained` is the
  collective save every rank calls (FSDP gathers the full state dict from all of them).

Not covered: pure-bf16 weights (deliberately: see above), QLoRA, LoRA under FSDP.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from cudice.model.train.checkpoint import save_checkpoint
from cudice.model.train.config import ModelSetup

log = logging.getLogger(__name__)

_ACCELERATE_PRECISION = {
    "fp32": "no",
    "bf16-autocast": "no",
    "accelerate-bf16": "bf16",
    "accelerate-fp16": "fp16",
}


def make_accelerator(setup: ModelSetup, *, seed: int = 0, cpu: bool = False) -> Any:
    """An `Accelerator` for `setup.precision`; gradient accumulation is done by the loops.

    The data sampler is seeded with `seed` (+ the epoch), the same on every rank, so the ranks
    cut one permutation into disjoint shards. accelerate keeps its state in a process-wide
    singleton; it is reset here so that one process can run several jobs (tests, RL stages).
    """
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState
    from accelerate.utils import DataLoaderConfiguration, DistributedDataParallelKwargs

    AcceleratorState._reset_state()
    GradientState._reset_state()
    # broadcast_buffers=False: DDP would otherwise broadcast the (constant) rotary buffers at every
    # forward, a collective that deadlocks when RL ranks run different numbers of forwards
    return Accelerator(
        mixed_precision=_ACCELERATE_PRECISION[setup.precision],
        cpu=cpu,
        dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True, data_seed=seed),
        kwargs_handlers=[DistributedDataParallelKwargs(broadcast_buffers=False)],
    )


def prepare_model(model: torch.nn.Module, setup: ModelSetup) -> torch.nn.Module:
    """fp32 master weights, optional gradient checkpointing, optional LoRA. Returns the model to train."""
    # 1. master weights in fp32: the optimizer updates these; autocast only lowers the matmuls
    low = sorted(
        {str(p.dtype) for p in model.parameters() if p.is_floating_point() and p.dtype != torch.float32}
    )
    if low:
        log.info("casting %s weights to float32 master weights for training", ", ".join(low))
        model.float()
    # 2. activation memory: recompute each layer in the backward (non-reentrant works with LoRA and DDP)
    if setup.gradient_checkpointing:
        # a transformers model: torch types `Module` attributes as `Tensor | Module`, and transformers
        # leaves gradient_checkpointing_enable unannotated
        hf_model: Any = model
        hf_model.config.use_cache = False
        hf_model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    # 3. LoRA: only the adapters train; the saved checkpoint holds merged full weights
    if setup.lora_rank > 0:
        try:
            from peft import LoraConfig, get_peft_model
        except ImportError as exc:
            raise ValueError(
                "lora_rank > 0 needs peft: pip install 'cudice[train]' (or pip install peft)"
            ) from exc
        # peft annotates lora_alpha as int but only divides it by r (github.com/huggingface/peft,
        # src/peft/tuners/lora/layer.py, `update_layer`), so a float alpha scales as written
        config = LoraConfig(
            r=setup.lora_rank,
            lora_alpha=setup.lora_alpha,  # type: ignore[arg-type]
            lora_dropout=setup.lora_dropout,
            target_modules=list(setup.lora_target_modules),
            bias="none",
        )
        model = get_peft_model(model, config)
    return model


def autocast(accelerator: Any, setup: ModelSetup) -> contextlib.AbstractContextManager[Any]:
    """The context a forward runs in: bf16 autocast for "bf16-autocast", else accelerate's own."""
    if setup.precision == "bf16-autocast":
        return torch.autocast(device_type=accelerator.device.type, dtype=torch.bfloat16)
    context: contextlib.AbstractContextManager[Any] = accelerator.autocast()
    return context


def base_model(model: torch.nn.Module) -> torch.nn.Module:
    """The transformers model under a peft wrapper (the model itself otherwise)."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def _lora_layers(model: torch.nn.Module) -> Iterator[tuple[str, Any]]:
    try:
        from peft.tuners.lora import LoraLayer
    except ImportError:
        return
    for name, module in model.named_modules():
        if isinstance(module, LoraLayer):
            yield name, module


@torch.no_grad()
def export_state_dict(
    model: torch.nn.Module, state: dict[str, torch.Tensor] | None = None
) -> dict[str, torch.Tensor]:
    """Native-name weights of `model` (an unwrapped model; `state` = an already gathered state dict).

    For a peft model the adapters are merged: `x.weight = base_layer.weight + delta`.
    """
    base = base_model(model)
    state = dict(state if state is not None else base.state_dict())
    prefix = "base_model.model."
    state = {k[len(prefix) :] if k.startswith(prefix) else k: v for k, v in state.items()}
    layers = dict(_lora_layers(base))
    if not layers:
        return state
    out = {k.replace(".base_layer.", "."): v for k, v in state.items() if "lora_" not in k}
    for name, layer in layers.items():
        adapter = layer.active_adapters[0]
        weight = layer.get_base_layer().weight
        out[f"{name}.weight"] = (weight + layer.get_delta_weight(adapter).to(weight.dtype)).detach()
    return out


def save_trained(
    accelerator: Any,
    model: torch.nn.Module,
    source_dir: str | Path,
    out_dir: str | Path,
    *,
    step: int,
    metrics: dict[str, Any],
) -> None:
    """Collective: every rank gathers its part (`get_state_dict`); rank 0 writes the checkpoint."""
    state = accelerator.get_state_dict(model)
    if accelerator.is_main_process:
        unwrapped = accelerator.unwrap_model(model)
        save_checkpoint(
            unwrapped,
            source_dir,
            out_dir,
            step=step,
            metrics=metrics,
            state_dict=export_state_dict(unwrapped, state),
        )
    accelerator.wait_for_everyone()
