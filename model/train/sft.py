"""Supervised fine-tuning with the block-diffusion objective (DICE stage 0, CuKe data).

Each CuKe pair becomes `prompt (ChatML user turn + assistant header) | response <|im_end|>`
(the prompt verbatim, in the prompt style's chat turn: `encode_pair(..., style=...)`), padded
with the pad token to a multiple of the block size; the answer **and** that padding are trained
(SDAR trains its pad tokens, so the model learns to fill a final block after `<|im_end|>`).
Samples longer than `max_length` are dropped, as in DICE.

The loop, one optimizer step:
  1. the accelerate-prepared loader gives this rank its shard of the shuffled samples
     (seeded sampler, `set_epoch`); each sample's noise comes from its own seed (`seeded_noise`);
  2. `grad_accum_steps` micro-batches: forward under the precision mode's autocast, backward of
     loss / micro-batches-in-this-group (divided once: the accelerator's own accumulation stays
     at 1); DDP's all-reduce runs on the group's last backward only (`no_sync` before it);
  3. clip on the true norm (after the all-reduce and, for fp16, the unscale), step, schedule;
  4. on logging steps only: one reduce of (loss, tokens) over ranks and one read to the host;
  5. every `save_every_steps`: a hot-reload checkpoint and the resume state (`state.py`).
The same code runs on one device, under `accelerate launch` with DDP, or with an FSDP config.

Not covered: sequence packing, flex-attention kernels (a dense mask is built).
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch
from cudice.model.prompt_styles import CUDICE_STYLE, PromptStyle
from cudice.model.train.config import SFTConfig
from cudice.model.train.monitor import Monitor
from cudice.model.train.objective import NoisedBatch, seeded_noise, sft_loss
from cudice.model.train.prepare import autocast, make_accelerator, prepare_model, save_trained
from cudice.model.train.state import load_train_state, save_train_state

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class EncodedSample:
    input_ids: list[int]  # padded to a multiple of the block size
    num_prompt: int  # tokens before the answer (never masked, not trained)


def encode_pair(
    tokenizer: Any,
    prompt: str,
    response: str,
    *,
    block_size: int,
    pad_token_id: int,
    end_token: str = "<|im_end|>",
    style: PromptStyle | None = None,
) -> EncodedSample:
    """Tokenise one CuKe pair as the sampler will see it: `prompt` verbatim in `style`'s chat turn
    (None or cudice: one ChatML user turn, `chat_prompt`)."""
    prompt_ids = list(tokenizer.encode((style or CUDICE_STYLE).chat(prompt), add_special_tokens=False))
    answer_ids = tokenizer.encode(response + end_token, add_special_tokens=False)
    ids = prompt_ids + list(answer_ids)
    padded = -(-len(ids) // block_size) * block_size
    return EncodedSample(ids + [pad_token_id] * (padded - len(ids)), len(prompt_ids))


@dataclass
class Batch:
    """One micro-batch: (B, L) ids and loss mask, its noise, the sample indices, its real tokens."""

    input_ids: torch.Tensor
    loss_mask: torch.Tensor
    noised: NoisedBatch
    index: torch.Tensor  # (B,) positions in the sample list
    num_tokens: int  # non-padding tokens (a Python int: counting them costs no device sync)
    answer_start: int = 0  # the first answer position of any row (`sft_loss`'s, without a sync)


class Collate:
    """Right-pads a list of samples to the longest and draws each sample's seeded noise.

    Padding added here (beyond each sample's own block padding) is excluded from the loss;
    it sits in later blocks, which earlier blocks never attend to. `epoch` is set by the loop,
    so a sample gets fresh noise every epoch: seed = (seed · 1_000_003 + epoch) · N + index.
    """

    def __init__(
        self,
        samples: Sequence[EncodedSample],
        pad_token_id: int,
        mask_token_id: int,
        seed: int,
        min_rate: float,
    ) -> None:
        self.samples, self.pad, self.mask, self.seed, self.min_rate = (
            samples,
            pad_token_id,
            mask_token_id,
            seed,
            min_rate,
        )
        self.epoch = 0

    def __call__(self, indices: list[int]) -> Batch:
        chunk = [self.samples[i] for i in indices]
        lengths = [len(s.input_ids) for s in chunk]
        ids = torch.full((len(chunk), max(lengths)), self.pad, dtype=torch.long)
        loss_mask = torch.zeros(ids.shape, dtype=torch.bool)
        for row, s in enumerate(chunk):
            ids[row, : len(s.input_ids)] = torch.tensor(s.input_ids)
            loss_mask[row, s.num_prompt : len(s.input_ids)] = True
        base = (self.seed * 1_000_003 + self.epoch) * len(self.samples)
        noised = seeded_noise(ids, loss_mask, lengths, [base + i for i in indices], self.mask, self.min_rate)
        start = min(s.num_prompt for s in chunk)
        return Batch(ids, loss_mask, noised, torch.tensor(indices), sum(lengths), start)


def _to(batch: Batch, device: torch.device) -> Batch:
    n = batch.noised
    return Batch(
        batch.input_ids.to(device),
        batch.loss_mask.to(device),
        NoisedBatch(n.noisy.to(device), n.is_masked.to(device), n.noise_rate.to(device)),
        batch.index,
        batch.num_tokens,
        batch.answer_start,
    )


def _lr_lambda(total_steps: int, warmup_ratio: float) -> Callable[[int], float]:
    warmup = max(1, math.ceil(total_steps * warmup_ratio)) if warmup_ratio > 0 else 0

    def factor(step: int) -> float:  # constant with warm-up, as DICE's SFT
        return min(1.0, (step + 1) / warmup) if warmup else 1.0

    return factor


def train_sft(
    model: torch.nn.Module,
    samples: Sequence[EncodedSample],
    config: SFTConfig,
    *,
    block_size: int,
    mask_token_id: int,
    pad_token_id: int,
    source_dir: str | Path | None = None,
    out_dir: str | Path | None = None,
    on_step: Callable[[int, dict[str, float]], None] | None = None,
    resume: bool = False,
    cpu: bool = False,
    monitor: Monitor | None = None,
) -> list[dict[str, float]]:
    """Run SFT (module docstring); returns the stats of each logged optimizer step of this process.

    Saves to `out_dir` (needs `source_dir`). `resume` continues the run saved in `out_dir`.
    `cpu` keeps accelerate off the GPU. `on_step(step, stats)` runs on the main process.
    """
    samples = [s for s in samples if len(s.input_ids) <= config.max_length]
    if not samples:
        raise ValueError(f"no sample fits max_length={config.max_length} tokens; raise max_length")
    if (resume or config.save_every_steps) and out_dir is None:
        raise ValueError("resume and save_every_steps need out_dir (where the resume state lives)")
    setup = config.setup
    accelerator = make_accelerator(setup, seed=config.seed, cpu=cpu)
    model = prepare_model(model, setup)
    collate = Collate(samples, pad_token_id, mask_token_id, config.seed, config.min_noise_rate)
    # the sample indices: a list is a map-style dataset (__getitem__ + __len__), not a Dataset subclass
    indices = cast("torch.utils.data.Dataset[int]", list(range(len(samples))))
    loader = torch.utils.data.DataLoader(
        indices, batch_size=config.batch_size, shuffle=True, collate_fn=collate
    )
    model = accelerator.prepare(model)  # first: FSDP's optimizer must see the sharded parameters
    optimizer = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad], lr=config.learning_rate, weight_decay=0.0
    )
    optimizer, loader = accelerator.prepare(optimizer, loader)
    micro_per_epoch = len(loader)  # this rank's micro-batches per epoch
    steps_per_epoch = math.ceil(micro_per_epoch / config.grad_accum_steps)
    total_steps = steps_per_epoch * config.num_epochs
    # Not prepared: accelerate's scheduler wrapper steps once per process; this one steps once per update.
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _lr_lambda(total_steps, config.warmup_ratio))
    accelerator.register_for_checkpointing(scheduler)
    position = {"epoch": 0, "micro": 0, "step": 0}
    if resume:
        position = load_train_state(accelerator, out_dir)  # type: ignore[arg-type]
    last_step = min(total_steps, config.max_steps) if config.max_steps else total_steps
    if monitor is None:
        monitor = Monitor(last_step, enabled=False)
    history: list[dict[str, float]] = []
    step, device = int(position["step"]), accelerator.device
    loss_sum = torch.zeros((), device=device)  # summed on the device; read on logging steps only
    tokens, clock, logged_at = 0, time.perf_counter(), step
    model.train()
    for epoch in range(int(position["epoch"]), config.num_epochs):
        if step >= last_step:
            break
        loader.set_epoch(epoch)
        collate.epoch = epoch
        skip = int(position["micro"]) if epoch == int(position["epoch"]) else 0
        batches = accelerator.skip_first_batches(loader, skip) if skip else loader
        for micro, batch in enumerate(batches, start=skip):
            # 2. one micro-batch of this step's accumulation group
            group_start = micro - micro % config.grad_accum_steps
            group_size = min(config.grad_accum_steps, micro_per_epoch - group_start)
            is_last = micro - group_start == group_size - 1
            batch = _to(batch, device)
            with contextlib.nullcontext() if is_last else accelerator.no_sync(model):
                with autocast(accelerator, setup):
                    loss, _ = sft_loss(
                        model,
                        batch.input_ids,
                        batch.loss_mask,
                        block_size=block_size,
                        mask_token_id=mask_token_id,
                        noised=batch.noised,
                        answer_start=batch.answer_start,
                    )
                accelerator.backward(loss / group_size)
            loss_sum += loss.detach() / group_size
            tokens += batch.num_tokens
            if not is_last:
                continue
            # 3. clip on the true (all-reduced, unscaled) norm; step
            norm = accelerator.clip_grad_norm_(model.parameters(), config.max_grad_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            done = step >= last_step
            # 4. logging steps: one collective, one host read
            if step % config.log_every_steps == 0 or done:
                figures = accelerator.reduce(
                    torch.stack([loss_sum, torch.tensor(float(tokens), device=device)]), "sum"
                ).tolist()  # sync point
                seconds = time.perf_counter() - clock
                stats = {
                    "loss": figures[0] / accelerator.num_processes / (step - logged_at),
                    "grad_norm": float(norm),
                    "lr": scheduler.get_last_lr()[0],
                    "epoch": float(epoch),
                    "tokens_per_s": figures[1] / seconds if seconds > 0 else 0.0,
                }
                history.append(stats)
                monitor.log(step, stats)
                if on_step and accelerator.is_main_process:
                    on_step(step, stats)
                log.info("sft step %d loss %.4f", step, stats["loss"])
                loss_sum.zero_()
                tokens, clock, logged_at = 0, time.perf_counter(), step
            # 5. periodic checkpoint + resume state
            if out_dir and config.save_every_steps and step % config.save_every_steps == 0 and not done:
                _save(model, accelerator, source_dir, out_dir, step, history[-1] if history else {})
                at_end = micro + 1 == micro_per_epoch
                save_train_state(
                    accelerator,
                    out_dir,
                    {
                        "epoch": epoch + 1 if at_end else epoch,
                        "micro": 0 if at_end else micro + 1,
                        "step": step,
                    },
                )
            if done:
                break
    if out_dir and step > int(position["step"]):
        _save(model, accelerator, source_dir, out_dir, step, history[-1] if history else {})
        save_train_state(
            accelerator,
            out_dir,
            {"epoch": config.num_epochs, "micro": 0, "step": step}
            if step >= total_steps
            else _position_after(step, steps_per_epoch, config.grad_accum_steps),
        )
    monitor.close()
    return history


def _position_after(step: int, steps_per_epoch: int, grad_accum: int) -> dict[str, int]:
    """Data position after `step` optimizer steps (the loop stopped at `max_steps`)."""
    epoch, within = divmod(step, steps_per_epoch)
    return {"epoch": epoch, "micro": within * grad_accum, "step": step}


def _save(
    model: torch.nn.Module,
    accelerator: Any,
    source_dir: str | Path | None,
    out_dir: str | Path,
    step: int,
    stats: dict[str, float],
) -> None:
    if source_dir is None:
        raise ValueError("saving a checkpoint needs source_dir (the checkpoint training started from)")
    save_trained(accelerator, model, source_dir, out_dir, step=step, metrics=stats)
