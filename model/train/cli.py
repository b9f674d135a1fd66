"""`cudice train`: offline fine-tuning commands for maintainers (SFT, BiC-RL).

Both write checkpoints with `cudice.model.train.checkpoint.save_checkpoint`, in the layout of
the checkpoint they started from, so the language server hot-reloads them. Several GPUs:
`accelerate launch [--config_file fsdp.yaml] -m cudice.model.train.cli sft ...` (the same
options; docs/training.md). Figures: one JSON object per logged step on stdout, a progress bar
on stderr (when it is a terminal), TensorBoard with `--tensorboard DIR`.

Prompt styles (`--prompt-style cudice|dice`, `--prompt-templates DIR`; `cudice.model.prompt_styles`):
`rl` builds its prompts in the chosen style (`dice`: DICE's texts from the template files); `sft`
uses each record's prompt verbatim, in the style's chat turn, and refuses records worded by
cudice's own prompts under `dice`. Without `--prompt-style` the checkpoint decides
(`prompt_styles.default_style`), and both commands record the style in their output checkpoints
(`cudice_prompt_style.json`), so the next command on them keeps it.

Not covered: multi-node launch files (accelerate's own `--num_machines` options apply).
"""

from __future__ import annotations

import functools
import json
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, TypeVar

import click
from cudice.model.prompt_styles import STYLES, TEMPLATES_ENV, PromptStyle
from cudice.model.train.corpus.cli import corpus_group

_F = TypeVar("_F", bound=Callable[..., Any])
PRECISION_CHOICES = ("auto", "fp32", "bf16-autocast", "accelerate-bf16", "accelerate-fp16")


@click.group("train", context_settings={"help_option_names": ["-h", "--help"]})
def train_group() -> None:
    """Fine-tune a DICE/SDAR checkpoint: `sft` on CuKe pairs, then `rl` (BiC-RL); `corpus` builds data."""


train_group.add_command(corpus_group)


def _device(device: str) -> str:
    """Where this process trains: `--device cpu`, else accelerate's device for this rank."""
    if device == "cpu":
        return "cpu"
    from accelerate import PartialState

    return str(PartialState().device) if device == "auto" else device


def _load(model: str, device: str):  # type: ignore[no-untyped-def]
    """Load in float32 (the master weights) straight onto this rank's device."""
    from cudice.model.loader import ModelLoadError, load_checkpoint

    try:
        loaded = load_checkpoint(model, device=_device(device), dtype="float32")
    except ModelLoadError as exc:
        raise click.ClickException(str(exc)) from exc
    if loaded.block_size is None or loaded.ids.mask is None:
        raise click.ClickException(
            f"{loaded.path} has no block_size/mask_token_id in config.json: it is not a block-diffusion "
            "(SDAR/DICE) checkpoint. Train from an SDAR checkpoint, or add both keys to its config.json."
        )
    return loaded


@dataclass(frozen=True, slots=True)
class RunOptions:
    """The options both commands share (`_common`), passed to a command as `run`."""

    device: str
    dtype: str  # ignored: weights always train in float32
    precision: str
    gradient_checkpointing: bool
    lora_rank: int
    lora_alpha: float
    save_every: int
    tensorboard: str | None
    progress: bool | None


def _setup(run: RunOptions) -> Any:
    import torch
    from cudice.model.train.config import ModelSetup

    precision = run.precision
    if precision == "auto":  # bf16 matmuls over fp32 master weights where the GPU has bf16
        on_gpu = run.device != "cpu" and torch.cuda.is_available()
        precision = "bf16-autocast" if on_gpu and torch.cuda.is_bf16_supported() else "fp32"
    return ModelSetup(
        precision=precision,
        gradient_checkpointing=run.gradient_checkpointing,
        lora_rank=run.lora_rank,
        lora_alpha=run.lora_alpha,
    )


def _monitor(total: int, run: RunOptions, description: str) -> Any:
    from accelerate import PartialState
    from cudice.model.train.monitor import Monitor

    show = sys.stderr.isatty() if run.progress is None else run.progress
    main = PartialState(cpu=run.device == "cpu").is_main_process  # the first PartialState fixes the device
    return Monitor(
        total,
        emit=lambda record: click.echo(json.dumps(record)),
        tensorboard_dir=run.tensorboard,
        progress=show,
        enabled=main,
        description=description,
    )


def _common(fn: Any) -> Any:
    """Options both commands share (device, precision, memory, LoRA, logging), given to `fn` as one
    `RunOptions` keyword argument `run`."""

    @functools.wraps(fn)
    def command(**kwargs: Any) -> Any:
        run = RunOptions(**{f.name: kwargs.pop(f.name) for f in fields(RunOptions)})
        return fn(run=run, **kwargs)

    options = [
        click.option(
            "--device",
            default="auto",
            show_default=True,
            help="auto: accelerate's device for this rank; cpu: train on the CPU.",
        ),
        click.option(
            "--dtype",
            default="auto",
            show_default=True,
            hidden=True,
            help="Ignored: weights always train in float32 (master copy); see --precision.",
        ),
        click.option(
            "--precision",
            type=click.Choice(PRECISION_CHOICES),
            default="auto",
            show_default=True,
            help="auto = bf16-autocast on a bf16 GPU, else fp32. Weights stay float32 in every mode.",
        ),
        click.option(
            "--gradient-checkpointing/--no-gradient-checkpointing",
            default=False,
            show_default=True,
            help="Recompute activations in the backward (less memory, ~30% more compute).",
        ),
        click.option(
            "--lora-rank",
            default=0,
            show_default=True,
            type=int,
            help="> 0: train LoRA adapters of this rank (peft); the checkpoint holds merged weights.",
        ),
        click.option("--lora-alpha", default=16.0, show_default=True, type=float),
        click.option(
            "--save-every",
            default=0,
            show_default=True,
            type=int,
            help="Also save a checkpoint and the --resume state every N steps.",
        ),
        click.option(
            "--tensorboard",
            "tensorboard",
            default=None,
            type=click.Path(file_okay=False),
            help="Write TensorBoard scalars here (needs tensorboard installed).",
        ),
        click.option(
            "--progress/--no-progress", default=None, help="Progress bar on stderr (default: if a tty)."
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def _prompt_options(fn: _F) -> _F:
    """`--prompt-style` and `--prompt-templates`, given to `fn` as `prompt_style`, `prompt_templates`."""
    fn = click.option(
        "--prompt-templates",
        "prompt_templates",
        default=None,
        envvar=TEMPLATES_ENV,
        show_envvar=True,
        type=click.Path(file_okay=False),
        help="Folder of the dice style's template files (e2e.txt, infill.txt, optional chat.txt); "
        "docs/training.md, 'Prompt styles'.",
    )(fn)
    return click.option(
        "--prompt-style",
        "prompt_style",
        type=click.Choice(STYLES),
        default=None,
        help="cudice: cudice's own prompts; dice: DICE's, from --prompt-templates. "
        "Default: cudice for cudice's own checkpoints, dice for other DICE/SDAR checkpoints.",
    )(fn)


def _prompt_style(
    style: str | None, templates: str | None, model_path: str, need: tuple[str, ...]
) -> PromptStyle:
    """The `PromptStyle` to train with (`prompt_styles.resolve_style`); says which on stderr.

    Raises `PromptTemplateError` (a ValueError) when it cannot be built.
    """
    from cudice.model.prompt_styles import resolve_style

    chosen, why = resolve_style(style, templates, model_path, need)
    where = f", templates {chosen.directory}" if chosen.directory is not None else ""
    click.echo(f"prompt style: {chosen.name} ({why}{where})", err=True)
    if chosen.name == "cudice" and templates:
        click.echo(
            f"prompt templates {templates} ignored: the cudice style uses cudice's own prompts", err=True
        )
    return chosen


def _record_style(style: PromptStyle, *dirs: Path) -> None:
    """Write the style record into each output checkpoint directory (every rank: same bytes)."""
    from cudice.model.prompt_styles import write_record

    for d in dirs:
        write_record(d, style)


def _cudice_worded_records(records: list[dict[str, Any]], data_path: str) -> str:
    """An error message when records are worded by cudice's prompts, else ''."""
    from cudice.model.prompt_styles import cudice_worded

    worded = [r for r in records if cudice_worded(r["prompt"])]
    if not worded:
        return ""
    first = worded[0].get("_line", records.index(worded[0]) + 1)
    return (
        f"{len(worded)} of the {len(records)} records of {data_path} (the first at line {first}) are "
        "worded by cudice's own prompts (cudice's corpus writes them), but the prompt style is dice: "
        "the model would learn prompts that DICE's RL and evaluation never show it. Train on DICE's "
        "CuKe data for the dice style, or pass --prompt-style cudice to train on cudice's wording"
    )


def _required_path(*names: str, folder: bool = False, help: str) -> Callable[[_F], _F]:
    """A required path option: a folder (`folder`) or a file."""
    kind = click.Path(file_okay=False) if folder else click.Path(dir_okay=False)
    return click.option(*names, required=True, type=kind, help=help)


@train_group.command("sft")
@click.option("--model", "model_path", required=True, help="Checkpoint to start from (SDAR/DICE layout).")
@_required_path("--data", "data_path", help="CuKe-format JSONL/JSON of {prompt, response}.")
@_required_path(
    "--out",
    "out_dir",
    folder=True,
    help="Where to write the fine-tuned checkpoint (and train_state/ for --resume).",
)
@click.option("--epochs", default=3, show_default=True, type=int)
@click.option("--lr", default=1e-5, show_default=True, type=float)
@click.option("--batch-size", default=1, show_default=True, type=int, help="Per process.")
@click.option("--grad-accum", default=1, show_default=True, type=int)
@click.option("--max-length", default=6144, show_default=True, type=int, help="Drop longer samples (tokens).")
@click.option(
    "--max-steps", default=0, show_default=True, type=int, help="Stop after N optimizer steps (0: all)."
)
@click.option(
    "--log-every",
    default=1,
    show_default=True,
    type=int,
    help="Read the loss back from the GPU every N steps (fewer syncs).",
)
@click.option("--resume", is_flag=True, help="Continue the run saved in --out (model, optimizer, RNG, data).")
@click.option("--seed", default=0, show_default=True, type=int)
@_prompt_options
@_common
def sft_command(
    model_path: str,
    data_path: str,
    out_dir: str,
    epochs: int,
    lr: float,
    batch_size: int,
    grad_accum: int,
    max_length: int,
    max_steps: int,
    log_every: int,
    resume: bool,
    seed: int,
    prompt_style: str | None,
    prompt_templates: str | None,
    run: RunOptions,
) -> None:
    """Supervised fine-tuning with the block-diffusion objective; prints one JSON line per step.

    Each record's prompt is used verbatim, in the prompt style's chat turn."""
    from cudice.model.train.config import SFTConfig
    from cudice.model.train.data import load_sft
    from cudice.model.train.sft import encode_pair, train_sft

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    try:
        config = SFTConfig(
            learning_rate=lr,
            num_epochs=epochs,
            batch_size=batch_size,
            grad_accum_steps=grad_accum,
            max_length=max_length,
            save_every_steps=run.save_every,
            max_steps=max_steps,
            log_every_steps=log_every,
            seed=seed,
            setup=_setup(run),
        )
        records = load_sft(data_path)
        style = _prompt_style(prompt_style, prompt_templates, model_path, need=())
        mismatch = _cudice_worded_records(records, data_path) if style.name == "dice" else ""
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc
    if mismatch:
        raise click.ClickException(mismatch)
    loaded = _load(model_path, run.device)
    samples = [
        encode_pair(
            loaded.tokenizer,
            r["prompt"],
            r["response"],
            block_size=loaded.block_size,
            pad_token_id=loaded.ids.pad,
            style=style,
        )
        for r in records
    ]
    kept = sum(len(s.input_ids) <= max_length for s in samples)
    total = -(-kept // batch_size // grad_accum) * epochs
    # before training, so periodic checkpoints carry it; again after, in case a save copied the
    # start checkpoint's own record over it
    _record_style(style, Path(out_dir))
    try:
        history = train_sft(
            loaded.model,
            samples,
            config,
            block_size=loaded.block_size,
            mask_token_id=loaded.ids.mask,
            pad_token_id=loaded.ids.pad,
            source_dir=loaded.path,
            out_dir=out_dir,
            resume=resume,
            cpu=run.device == "cpu",
            monitor=_monitor(max_steps or total, run, "sft"),
        )
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc
    _record_style(style, Path(out_dir))
    from accelerate import PartialState

    if not PartialState().is_main_process:  # one closing line per run, not one per rank
        return
    if resume and not history:
        click.echo(
            f"the run saved in {Path(out_dir)} has already reached its last step: nothing to train", err=True
        )
    else:
        click.echo(f"wrote {Path(out_dir)} after {len(history)} logged steps", err=True)


@train_group.command("rl")
@click.option(
    "--model", "model_path", required=True, help="Checkpoint to start from (usually the SFT output)."
)
@_required_path("--infill-data", help="Stage-1 infilling tasks.")
@_required_path("--e2e-data", help="Stage-2 end-to-end tasks.")
@_required_path("--out", "out_dir", folder=True, help="Writes stage-infill/ and stage-e2e/ checkpoints here.")
@click.option("--infill-steps", default=20, show_default=True, type=int)
@click.option("--e2e-steps", default=100, show_default=True, type=int)
@click.option("--tasks-per-step", default=64, show_default=True, type=int, help="All processes together.")
@click.option("--samples-per-task", default=16, show_default=True, type=int)
@click.option("--lr", default=1e-6, show_default=True, type=float)
@click.option("--max-new-tokens", default=4096, show_default=True, type=int)
@click.option(
    "--infill-max-prompt-tokens",
    default=2000,
    show_default=True,
    type=int,
    help="Drop stage-1 tasks with longer prompts (DICE: 2000).",
)
@click.option(
    "--e2e-max-prompt-tokens",
    default=1500,
    show_default=True,
    type=int,
    help="Drop stage-2 tasks with longer prompts (DICE: 1500).",
)
@click.option("--ppo-epochs", default=1, show_default=True, type=int, help="Passes over each rollout batch.")
@click.option(
    "--num-minibatches",
    default=4,
    show_default=True,
    type=int,
    help="Optimizer steps per pass over a rollout batch.",
)
@click.option(
    "--old-logprobs",
    type=click.Choice(["sampler", "replay"]),
    default="sampler",
    show_default=True,
    help="PPO's logp_old: the log-probabilities the sampler drew each token with (no extra pass), "
    "or a no-grad replay pass of the master weights before the update.",
)
@click.option(
    "--rollout-memory-gib",
    default=16.0,
    show_default=True,
    type=float,
    help="KV-cache budget of one rollout micro-batch.",
)
@click.option(
    "--fast/--no-fast",
    default=True,
    show_default=True,
    help="Rollouts on the static-cache CUDA-graph sampler (GPU, no LoRA).",
)
@click.option(
    "--required-speedup",
    default=1.0,
    show_default=True,
    type=float,
    help="Reward needs this verified speedup; 0 = correctness only (DICE's released reward).",
)
@click.option(
    "--verify-gpus",
    default="auto",
    show_default=True,
    help="GPUs for the reward runs, e.g. 4,5,6,7; auto: the GPUs no training process uses.",
)
@click.option("--compile-workers", default=4, show_default=True, type=int, help="Parallel candidate builds.")
@click.option(
    "--replay-attention",
    type=click.Choice(("dense", "sparse", "auto")),
    default="auto",
    show_default=True,
    help="The update's packed replay: the dense mask (SDPA), or a flex-attention BlockMask that skips "
    "masked tiles (sparse; auto = sparse on a GPU, dense on a CPU).",
)
@click.option(
    "--compile-replay/--no-compile-replay",
    default=True,
    show_default=True,
    help="On a GPU, compile the decoder layers once for the update's replay (torch.compile: fused "
    "norms, RoPE, activations and casts); --no-compile-replay keeps them eager.",
)
@click.option(
    "--static-policy",
    type=click.Choice(("default", "strict")),
    default="default",
    show_default=True,
    help="The verifier's static anti-cheat policy for rewards.",
)
@click.option(
    "--resume", is_flag=True, help="Continue the run saved in --out (stage, step, model, optimizer, RNG)."
)
@click.option("--seed", default=0, show_default=True, type=int)
@_prompt_options
@_common
def rl_command(
    model_path: str,
    infill_data: str,
    e2e_data: str,
    out_dir: str,
    infill_steps: int,
    e2e_steps: int,
    tasks_per_step: int,
    samples_per_task: int,
    lr: float,
    max_new_tokens: int,
    infill_max_prompt_tokens: int,
    e2e_max_prompt_tokens: int,
    ppo_epochs: int,
    num_minibatches: int,
    old_logprobs: str,
    rollout_memory_gib: float,
    fast: bool,
    required_speedup: float,
    verify_gpus: str,
    compile_workers: int,
    replay_attention: str,
    compile_replay: bool,
    static_policy: str,
    resume: bool,
    seed: int,
    prompt_style: str | None,
    prompt_templates: str | None,
    run: RunOptions,
) -> None:
    """BiC-RL: kernel-infilling stage, then end-to-end stage; prints one JSON line per step.

    Both stages' prompts are built in the prompt style (--prompt-style)."""
    import torch
    from cudice.model.engine import Engine
    from cudice.model.train.config import RLConfig
    from cudice.model.train.data import load_rl_tasks
    from cudice.model.train.reward import default_canary, reward_pool, verifier_reward_fn
    from cudice.model.train.rl import run_bic_rl
    from cudice.model.train.rollout import RolloutWeights, engine_rollout_fn, prompt_token_counter

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    speed = required_speedup if required_speedup > 0 else None
    try:
        common: dict[str, Any] = {
            "tasks_per_step": tasks_per_step,
            "samples_per_task": samples_per_task,
            "learning_rate": lr,
            "max_new_tokens": max_new_tokens,
            "required_speedup": speed,
            "ppo_epochs": ppo_epochs,
            "num_minibatches": num_minibatches,
            "old_logprobs": old_logprobs,
            "rollout_memory_gib": rollout_memory_gib,
            "seed": seed,
            "save_every_steps": run.save_every,
            "setup": replace(_setup(run), replay_attention=replay_attention, compile_replay=compile_replay),
        }
        infill_cfg = RLConfig(
            stage="infill", num_steps=infill_steps, max_prompt_tokens=infill_max_prompt_tokens, **common
        )
        e2e_cfg = RLConfig(
            stage="e2e", num_steps=e2e_steps, max_prompt_tokens=e2e_max_prompt_tokens, **common
        )
        infill_tasks, e2e_tasks = load_rl_tasks(infill_data, "infill"), load_rl_tasks(e2e_data, "e2e")
        style = _prompt_style(prompt_style, prompt_templates, model_path, need=("e2e", "infill"))
        gpus = _verify_gpus(verify_gpus)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc
    loaded = _load(model_path, run.device)
    # rollouts sample from a bf16 copy of the fp32 master, refreshed after every update (LoRA: the
    # merged weights, W + scale·B·A, see rollout.RolloutWeights); the replay's log-probabilities
    # stay on the master
    weights = RolloutWeights(loaded.model, torch.bfloat16)
    engine = Engine(weights.loaded(loaded), fast=fast and loaded.model.device.type == "cuda")
    from cudice.verifier.config import VerifyConfig

    backend = reward_pool(
        VerifyConfig(
            static_policy=static_policy, required_speedup=required_speedup or 1.0, compile_violations=False
        ),
        gpus=gpus,
        num_compile_workers=compile_workers,
    )
    try:  # a known-good kernel in every reward batch: a broken verifier stops the step
        canary = default_canary("correct")
    except FileNotFoundError as exc:
        canary = None
        logging.getLogger(__name__).warning("rewards run without a canary: %s", exc)
    stage_dirs = (Path(out_dir) / "stage-infill", Path(out_dir) / "stage-e2e")
    _record_style(style, *stage_dirs)  # before and after, as in sft
    with backend:
        try:
            run_bic_rl(
                loaded.model,
                infill_tasks,
                e2e_tasks,
                infill_cfg,
                e2e_cfg,
                rollout_fn=engine_rollout_fn(engine, style=style),
                reward_fn=verifier_reward_fn(backend, canary=canary),
                block_size=loaded.block_size,
                mask_token_id=loaded.ids.mask,
                pad_token_id=loaded.ids.pad,
                source_dir=loaded.path,
                out_dir=out_dir,
                cpu=run.device == "cpu",
                count_prompt_tokens=prompt_token_counter(engine, style),
                monitor=_monitor(infill_steps + e2e_steps, run, "bic-rl"),
                resume=resume,
                rollout_weights=weights,
            )
        except ValueError as exc:
            raise click.ClickException(str(exc)) from exc
    _record_style(style, *stage_dirs)


def _verify_gpus(spec: str) -> list[int]:
    """This rank's reward GPUs: the listed ones (auto: those past the training ranks), split by rank."""
    from accelerate import PartialState
    from cudice.verifier.pool import count_gpus

    state = PartialState()
    world, rank = state.num_processes, state.process_index
    if spec == "auto":
        available = count_gpus()
        if available == 0:
            raise ValueError(
                "RL rewards need a GPU for the correctness runs and none was found; run on a GPU box "
                "(or pass --verify-gpus with the GPUs to use)"
            )
        gpus = list(range(world, available)) or [state.local_process_index]
        if gpus == [state.local_process_index]:
            logging.getLogger(__name__).warning(
                "no GPU is free of training processes: rewards are timed on the policy's GPU, under "
                "contention; "
                "launch fewer training processes than GPUs or pass --verify-gpus"
            )
    else:
        try:
            gpus = [int(g) for g in spec.split(",") if g.strip()]
        except ValueError:
            raise ValueError(
                f"--verify-gpus {spec!r} must be 'auto' or a comma-separated list like 4,5,6,7"
            ) from None
    return gpus[rank::world] if len(gpus) >= world else gpus


if __name__ == "__main__":
    train_group()
