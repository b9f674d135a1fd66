"""`cudice train`: offline fine-tuning commands for maintainers (SFT, BiC-RL).

Both write checkpoints with `cudice.model.train.checkpoint.save_checkpoint`, in the layout of
the checkpoint they started from, so the language server hot-reloads them.
Multi-GPU: `accelerate launch -m cudice.model.train.cli sft ...` (the same options).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
from pathlib import Path

import click


@click.group("train", context_settings={"help_option_names": ["-h", "--help"]})
def train_group() -> None:
    """Fine-tune a DICE/SDAR checkpoint: `sft` on CuKe pairs, then `rl` (BiC-RL)."""


def _load(model: str, device: str, dtype: str):  # type: ignore[no-untyped-def]
    from cudice.model.loader import ModelLoadError, load_checkpoint

    try:
        loaded = load_checkpoint(model, device=device, dtype=dtype)
    except ModelLoadError as exc:
        raise click.ClickException(str(exc)) from exc
    if loaded.block_size is None or loaded.ids.mask is None:
        raise click.ClickException(
            f"{loaded.path} has no block_size/mask_token_id in config.json: it is not a block-diffusion "
            "(SDAR/DICE) checkpoint. Train from an SDAR checkpoint, or add both keys to its config.json."
        )
    return loaded


@train_group.command("sft")
@click.option("--model", "model_path", required=True, help="Checkpoint to start from (SDAR/DICE layout).")
@click.option("--data", "data_path", required=True, type=click.Path(dir_okay=False),
              help="CuKe-format JSONL/JSON of {prompt, response}.")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Where to write the fine-tuned checkpoint.")
@click.option("--epochs", default=3, show_default=True, type=int)
@click.option("--lr", default=1e-5, show_default=True, type=float)
@click.option("--batch-size", default=1, show_default=True, type=int)
@click.option("--grad-accum", default=1, show_default=True, type=int)
@click.option("--max-length", default=6144, show_default=True, type=int, help="Drop longer samples (tokens).")
@click.option("--save-every", default=0, show_default=True, type=int, help="Also save every N steps.")
@click.option("--device", default="auto", show_default=True)
@click.option("--dtype", default="auto", show_default=True)
@click.option("--seed", default=0, show_default=True, type=int)
def sft_command(model_path: str, data_path: str, out_dir: str, epochs: int, lr: float, batch_size: int,
                grad_accum: int, max_length: int, save_every: int, device: str, dtype: str, seed: int) -> None:
    """Supervised fine-tuning with the block-diffusion objective; prints one JSON line per step."""
    from cudice.model.train.config import SFTConfig
    from cudice.model.train.data import load_sft
    from cudice.model.train.sft import encode_pair, train_sft

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    try:
        config = SFTConfig(learning_rate=lr, num_epochs=epochs, batch_size=batch_size,
                           grad_accum_steps=grad_accum, max_length=max_length, save_every_steps=save_every,
                           seed=seed)
        records = load_sft(data_path)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc
    loaded = _load(model_path, device, dtype)
    samples = [encode_pair(loaded.tokenizer, r["prompt"], r["response"], block_size=loaded.block_size,
                           pad_token_id=loaded.ids.pad) for r in records]
    loaded.model.train()
    try:
        history = train_sft(loaded.model, samples, config, block_size=loaded.block_size,
                            mask_token_id=loaded.ids.mask, pad_token_id=loaded.ids.pad,
                            source_dir=loaded.path, out_dir=out_dir,
                            on_step=lambda step, s: click.echo(json.dumps({"step": step, **s})))
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"wrote {Path(out_dir)} after {len(history)} steps", err=True)


@train_group.command("rl")
@click.option("--model", "model_path", required=True, help="Checkpoint to start from (usually the SFT output).")
@click.option("--infill-data", required=True, type=click.Path(dir_okay=False), help="Stage-1 infilling tasks.")
@click.option("--e2e-data", required=True, type=click.Path(dir_okay=False), help="Stage-2 end-to-end tasks.")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Writes stage-infill/ and stage-e2e/ checkpoints here.")
@click.option("--infill-steps", default=20, show_default=True, type=int)
@click.option("--e2e-steps", default=100, show_default=True, type=int)
@click.option("--tasks-per-step", default=64, show_default=True, type=int)
@click.option("--samples-per-task", default=16, show_default=True, type=int)
@click.option("--lr", default=1e-6, show_default=True, type=float)
@click.option("--max-new-tokens", default=4096, show_default=True, type=int)
@click.option("--required-speedup", default=1.0, show_default=True, type=float,
              help="Reward needs this verified speedup; 0 = correctness only (DICE's released reward).")
@click.option("--device", default="auto", show_default=True)
@click.option("--dtype", default="auto", show_default=True)
def rl_command(model_path: str, infill_data: str, e2e_data: str, out_dir: str, infill_steps: int,
               e2e_steps: int, tasks_per_step: int, samples_per_task: int, lr: float, max_new_tokens: int,
               required_speedup: float, device: str, dtype: str) -> None:
    """BiC-RL: kernel-infilling stage, then end-to-end stage; prints one JSON line per step."""
    from cudice.model.engine import Engine
    from cudice.model.train.config import RLConfig
    from cudice.model.train.data import load_rl_tasks
    from cudice.model.train.rl import run_bic_rl
    from cudice.model.train.rollout import engine_rollout_fn, verifier_reward_fn

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    speed = required_speedup if required_speedup > 0 else None
    common = {"tasks_per_step": tasks_per_step, "samples_per_task": samples_per_task, "learning_rate": lr,
              "max_new_tokens": max_new_tokens, "required_speedup": speed}
    try:
        infill_cfg = RLConfig(stage="infill", num_steps=infill_steps, **common)  # type: ignore[arg-type]
        e2e_cfg = RLConfig(stage="e2e", num_steps=e2e_steps, **common)  # type: ignore[arg-type]
        infill_tasks, e2e_tasks = load_rl_tasks(infill_data, "infill"), load_rl_tasks(e2e_data, "e2e")
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc
    loaded = _load(model_path, device, dtype)
    loaded.model.train()
    run_bic_rl(loaded.model, infill_tasks, e2e_tasks, infill_cfg, e2e_cfg,
               rollout_fn=engine_rollout_fn(Engine(loaded)), reward_fn=verifier_reward_fn(),
               block_size=loaded.block_size, mask_token_id=loaded.ids.mask, pad_token_id=loaded.ids.pad,
               source_dir=loaded.path, out_dir=out_dir,
               on_step=lambda s: click.echo(json.dumps(dataclasses.asdict(s))))


if __name__ == "__main__":
    train_group()
