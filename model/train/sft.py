"""Supervised fine-tuning with the block-diffusion objective (DICE stage 0, CuKe data).

Each CuKe pair becomes `prompt (ChatML user turn + assistant header) | response <|im_end|>`,
padded with the pad token to a multiple of the block size; the answer **and** that padding
are trained (SDAR trains its pad tokens, so the model learns to fill a final block after
`<|im_end|>`). Samples longer than `max_length` are dropped, as in DICE.

Multi-GPU runs go through accelerate when it is installed (`accelerate launch -m
cudice.model.train.cli sft ...`); on one device the loop is plain torch.

Not covered: sequence packing, flex-attention, ZeRO sharding configs (pass an accelerate
config for those), resuming optimizer state.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from cudice.model.prompts import chat_prompt
from cudice.model.train.checkpoint import save_checkpoint
from cudice.model.train.config import SFTConfig
from cudice.model.train.objective import sft_loss

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class EncodedSample:
    input_ids: list[int]  # padded to a multiple of the block size
    num_prompt: int  # tokens before the answer (never masked, not trained)


def encode_pair(tokenizer: Any, prompt: str, response: str, *, block_size: int, pad_token_id: int,
                end_token: str = "<|im_end|>") -> EncodedSample:
    """Tokenise one CuKe pair as the sampler will see it: one ChatML user turn (`chat_prompt`)."""
    prompt_ids = list(tokenizer.encode(chat_prompt(prompt), add_special_tokens=False))
    answer_ids = tokenizer.encode(response + end_token, add_special_tokens=False)
    ids = prompt_ids + list(answer_ids)
    padded = -(-len(ids) // block_size) * block_size
    return EncodedSample(ids + [pad_token_id] * (padded - len(ids)), len(prompt_ids))


def batches(samples: Sequence[EncodedSample], batch_size: int, pad_token_id: int,
            rng: random.Random) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Shuffled (input_ids, loss_mask) batches, (B, L); rows right-padded to the longest.

    Padding added here (beyond each sample's own block padding) is excluded from the loss;
    it sits in later blocks, which earlier blocks never attend to.
    """
    order = list(range(len(samples)))
    rng.shuffle(order)
    for start in range(0, len(order), batch_size):
        chunk = [samples[i] for i in order[start:start + batch_size]]
        length = max(len(s.input_ids) for s in chunk)
        ids = torch.full((len(chunk), length), pad_token_id, dtype=torch.long)
        loss_mask = torch.zeros(len(chunk), length, dtype=torch.bool)
        for row, s in enumerate(chunk):
            ids[row, :len(s.input_ids)] = torch.tensor(s.input_ids)
            loss_mask[row, s.num_prompt:len(s.input_ids)] = True
        yield ids, loss_mask


def _lr_lambda(total_steps: int, warmup_ratio: float) -> Callable[[int], float]:
    warmup = max(1, math.ceil(total_steps * warmup_ratio)) if warmup_ratio > 0 else 0

    def factor(step: int) -> float:  # constant with warm-up, as DICE's SFT
        return min(1.0, (step + 1) / warmup) if warmup else 1.0

    return factor


def train_sft(model: torch.nn.Module, samples: Sequence[EncodedSample], config: SFTConfig, *,
              block_size: int, mask_token_id: int, pad_token_id: int, source_dir: str | Path | None = None,
              out_dir: str | Path | None = None,
              on_step: Callable[[int, dict[str, float]], None] | None = None) -> list[dict[str, float]]:
    """Run SFT; returns per-optimizer-step stats. Saves to `out_dir` (needs `source_dir`)."""
    samples = [s for s in samples if len(s.input_ids) <= config.max_length]
    if not samples:
        raise ValueError(f"no sample fits max_length={config.max_length} tokens; raise max_length")
    try:
        from accelerate import Accelerator

        accelerator: Any = Accelerator(gradient_accumulation_steps=config.grad_accum_steps)
    except ImportError:  # plain torch on one device
        accelerator = None
    device = accelerator.device if accelerator else next(model.parameters()).device
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate, weight_decay=0.0)
    steps_per_epoch = math.ceil(len(samples) / config.batch_size / config.grad_accum_steps)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, _lr_lambda(steps_per_epoch * config.num_epochs, config.warmup_ratio))
    if accelerator:
        model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    rng = random.Random(config.seed)
    gen = torch.Generator(device=device).manual_seed(config.seed)
    history: list[dict[str, float]] = []
    model.train()
    micro = 0
    for epoch in range(config.num_epochs):
        for ids, loss_mask in batches(samples, config.batch_size, pad_token_id, rng):
            ids, loss_mask = ids.to(device), loss_mask.to(device)
            loss, stats = sft_loss(model, ids, loss_mask, block_size=block_size,
                                   mask_token_id=mask_token_id, generator=gen,
                                   min_rate=config.min_noise_rate)
            (accelerator.backward(loss / config.grad_accum_steps) if accelerator
             else (loss / config.grad_accum_steps).backward())
            micro += 1
            if micro % config.grad_accum_steps:
                continue
            params = model.parameters()
            norm = (accelerator.clip_grad_norm_(params, config.max_grad_norm) if accelerator
                    else torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm))
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            step = len(history) + 1
            stats |= {"epoch": float(epoch), "grad_norm": float(norm), "lr": scheduler.get_last_lr()[0]}
            history.append(stats)
            if on_step:
                on_step(step, stats)
            log.info("sft step %d loss %.4f", step, stats["loss"])
            if out_dir and config.save_every_steps and step % config.save_every_steps == 0:
                _save(model, accelerator, source_dir, out_dir, step, stats)
    if out_dir:
        _save(model, accelerator, source_dir, out_dir, len(history), history[-1] if history else {})
    return history


def _save(model: torch.nn.Module, accelerator: Any, source_dir: str | Path | None, out_dir: str | Path,
          step: int, stats: dict[str, float]) -> None:
    if source_dir is None:
        raise ValueError("saving a checkpoint needs source_dir (the checkpoint training started from)")
    if accelerator:
        accelerator.wait_for_everyone()
        if not accelerator.is_main_process:
            return
        model = accelerator.unwrap_model(model)
    save_checkpoint(model, source_dir, out_dir, step=step, metrics=stats)
