"""The demo model's training recipe, in phases that each fit one GPU call (`bench/train_demo.sh`).

    python3 -m cudice.model.train.corpus.recipe a --work W --out $OUT [--minutes 8] [--smoke]
    python3 -m cudice.model.train.corpus.recipe b --work W --out $OUT --start .ckpt/demo_sft.tar
    python3 -m cudice.model.train.corpus.recipe c --work W --out $OUT \\
        --sft .ckpt/demo_sft.tar --rl .ckpt/demo_rl.tar

Phase a: 1. build the corpus and the initial checkpoint (tokenizer trained on the corpus);
2. in the background, verify a sample of every template family with the verifier (`VerifyPool`;
without a GPU only the static anti-cheat stage runs; a per-family table goes to the log and
`templates.json`) — compiles are CPU-bound, so they overlap SFT on the GPU; 3. `cudice train
sft` until the phase's deadline (stopped there; the last complete checkpoint, saved every
`--save-every` steps, is kept); 4. export it as ONE bf16 tar file.
Phase b: 1. rebuild the corpus (deterministic) and unpack the carried tar; 2. continue SFT;
3. `cudice train rl` (infilling stage, then end-to-end, verifier rewards) until the deadline;
4. export both checkpoints. Phase c: generate for the held-out split with both checkpoints and
score them with `cudice eval` side by side (`evaluate.evaluate_all`), `results.json` + a table.
A verifier build costs about a minute of CPU per distinct kernel (docs/benchmarks.md), which is
why the evaluations get a call of their own.

Every run's stdout/stderr goes to `<phase>.log` in the output folder; deadlines are wall-clock
from the phase's start. Subprocesses run in their own process group and are killed with it.
The phases return a checkpoint as ONE file of at most 16 MiB, which the 20M-parameter
`DEMO_DIMS` model exceeds: train it with `recipe_fit.py` (`bench/train_demo.sh fit`).
Not covered: multi-GPU (pass `accelerate launch` yourself), resuming optimizer state across
calls (the carried file holds weights only, to stay under the 16 MiB a returned file may have).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

TAR_SFT, TAR_RL = "demo_sft.tar", "demo_rl.tar"
MAX_FILE_BYTES = 16 * 2**20


class Phase:
    """Clock and log of one phase: `left()` seconds to the deadline, `say()` to stderr and the log."""

    def __init__(self, name: str, out: Path, minutes: float) -> None:
        self.name, self.out, self.start = name, out, time.monotonic()
        self.deadline = self.start + 60 * minutes
        out.mkdir(parents=True, exist_ok=True)
        self.log_path = out / f"{name}.log"
        self.log_path.write_text("")

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def say(self, text: str) -> None:
        line = f"[{self.name} {time.monotonic() - self.start:6.1f}s] {text}"
        print(line, file=sys.stderr, flush=True)
        with self.log_path.open("a") as f:
            f.write(line + "\n")

    def run(self, args: list[str], seconds: float) -> tuple[int, bool]:
        """Run `args` for at most `seconds` (its group killed after); (exit code, stopped by deadline)."""
        self.say("$ " + " ".join(args) + f"   (budget {seconds:.0f} s)")
        with self.log_path.open("a") as log:
            proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                return proc.wait(timeout=max(1.0, seconds)), False
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                return proc.returncode, True
            except BaseException:
                os.killpg(proc.pid, signal.SIGKILL)
                raise


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", *args]


def _options(module: str, command: str) -> str:
    """The --help text of a training command (optional flags are passed only where it has them)."""
    return subprocess.run(_cli(module, command, "--help"), capture_output=True, text=True).stdout


def prepare(work: Path, seed: int, smoke: bool, phase: Phase, with_init: bool = True) -> tuple[Path, Path]:
    """Corpus (and, `with_init`, the initial checkpoint) under `work`, reused when complete.

    Returns (corpus dir, initial checkpoint dir)."""
    from cudice.model.train.corpus.build import build_corpus
    from cudice.model.train.corpus.init_model import DEMO_DIMS, SMOKE_DIMS, init_checkpoint

    corpus, init = work / "corpus", work / "init"
    if not (corpus / "manifest.json").is_file():
        if smoke:
            # six draws a family leave the RL-only pool a handful of tasks at best (none for some
            # seeds): the smoke run's RL tasks come from its training problems
            manifest = build_corpus(
                corpus, seed=seed, train_per_family=6, heldout_per_family=1, rl_source="train"
            )
        else:
            manifest = build_corpus(corpus, seed=seed)
        phase.say(f"corpus: {manifest['num_problems']} problems, {manifest['num_sft_pairs']} SFT pairs")
    if with_init and not (init / "model.safetensors").is_file():
        info = init_checkpoint(init, corpus / "sft.jsonl", SMOKE_DIMS if smoke else DEMO_DIMS, seed=seed)
        phase.say(f"init: {json.dumps(info)}")
    return corpus, init


def newest_checkpoint(*dirs: Path) -> Path | None:
    """The most recently completed cudice checkpoint among `dirs` (by its marker), or None."""
    from cudice.model.train.checkpoint import MARKER

    done = [d for d in dirs if (d / MARKER).is_file()]
    return max(done, key=lambda d: (d / MARKER).stat().st_mtime) if done else None


def sft(
    start: Path,
    corpus: Path,
    out_dir: Path,
    seconds: float,
    phase: Phase,
    smoke: bool,
    epochs: int,
    save_every: int = 100,
) -> Path | None:
    """`cudice train sft` from `start` for `epochs` or until `seconds` pass; the newest complete checkpoint.

    lr 1e-3 (a 7M model from scratch, not DICE's 1e-5 fine-tuning of 1.7B); the schedule's 3 %
    warm-up is taken of `epochs`, so `epochs` should be about what the budget allows.
    """
    help_text = _options("cudice.model.train.cli", "sft")
    args = _cli(
        "cudice.model.train.cli",
        "sft",
        "--model",
        str(start),
        "--data",
        str(corpus / "sft.jsonl"),
        "--out",
        str(out_dir),
        "--epochs",
        str(epochs),
        "--lr",
        "1e-3" if not smoke else "3e-3",
        "--batch-size",
        "2" if smoke else "16",
        "--max-length",
        "2048",
        "--save-every",
        "2" if smoke else str(save_every),
        "--log-every",
        "1" if smoke else "10",
    )
    if smoke and "--max-steps" in help_text:
        args += ["--max-steps", "4"]
    rc, stopped = phase.run(args, seconds)
    phase.say(f"sft exit {rc}{' (stopped at the deadline)' if stopped else ''}")
    return newest_checkpoint(out_dir)


def rl(start: Path, corpus: Path, out_dir: Path, seconds: float, phase: Phase, smoke: bool) -> Path | None:
    """`cudice train rl` (infill stage, then e2e) from `start`; the newest complete checkpoint.

    Three small steps (1 infilling, 2 end-to-end; 4 tasks x 4 samples): each distinct answer costs
    a full verifier build, so steps stay small (docs/benchmarks.md). lr 1e-5 (DICE: 1e-6 on 1.7B);
    correctness-only reward.
    """
    help_text = _options("cudice.model.train.cli", "rl")
    args = _cli(
        "cudice.model.train.cli",
        "rl",
        "--model",
        str(start),
        "--infill-data",
        str(corpus / "rl_infill.jsonl"),
        "--e2e-data",
        str(corpus / "rl_e2e.jsonl"),
        "--out",
        str(out_dir),
        "--infill-steps",
        "1",
        "--e2e-steps",
        "1" if smoke else "2",
        "--tasks-per-step",
        "2" if smoke else "4",
        "--samples-per-task",
        "2" if smoke else "4",
        "--lr",
        "1e-5",
        "--max-new-tokens",
        "16" if smoke else "1536",
        "--required-speedup",
        "0",
        "--save-every",
        "1",
        "--compile-workers",
        "2" if smoke else "14",
    )
    if smoke and "--verify-gpus" in help_text:
        args += ["--verify-gpus", "0"]  # no GPU: the pool still runs the parse/static/compile stages
    rc, stopped = phase.run(args, seconds)
    phase.say(f"rl exit {rc}{' (stopped at the deadline)' if stopped else ''}")
    return newest_checkpoint(out_dir / "stage-infill", out_dir / "stage-e2e", out_dir)


def export_tar(checkpoint: Path, tar_path: Path) -> Path:
    """`checkpoint` with bf16 weights (re-saved through the loader and `save_checkpoint`) as one tar."""
    import torch
    from cudice.model.loader import load_checkpoint
    from cudice.model.train.checkpoint import read_marker, save_checkpoint

    staging = tar_path.with_suffix(".staging")
    shutil.rmtree(staging, ignore_errors=True)
    loaded = load_checkpoint(str(checkpoint), device="cpu", dtype="bfloat16")
    marker = read_marker(checkpoint) or {}
    save_checkpoint(
        loaded.model, checkpoint, staging, step=int(marker.get("step", 0)), metrics=marker.get("metrics", {})
    )
    config = json.loads((staging / "config.json").read_text())
    config["torch_dtype"] = str(torch.bfloat16).removeprefix("torch.")
    (staging / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    with tarfile.open(tar_path, "w") as tar:
        for item in sorted(staging.iterdir()):
            if item.is_file() and not item.name.endswith(".tmp"):
                tar.add(item, arcname=item.name)
    shutil.rmtree(staging)
    size = tar_path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise RuntimeError(
            f"{tar_path} is {size / 2**20:.1f} MiB, over the 16 MiB a returned file may have; use "
            "`bench/train_demo.sh fit` (recipe_fit.py returns the checkpoint in 15 MiB parts) or train "
            "SMOKE-sized dims with these phases"
        )
    return tar_path


def unpack_tar(tar_path: Path, into: Path) -> Path:
    if not tar_path.is_file():
        raise click.ClickException(
            f"{tar_path} does not exist: copy phase A's {TAR_SFT} there (the lead's carried "
            "folder, e.g. .ckpt/) or pass --start"
        )
    shutil.rmtree(into, ignore_errors=True)
    into.mkdir(parents=True)
    with tarfile.open(tar_path) as tar:
        tar.extractall(into, filter="data")
    return into


@click.group()
def recipe() -> None:
    """Train the demo model in phases (bench/train_demo.sh)."""


_common = [
    click.option(
        "--work",
        type=click.Path(file_okay=False, path_type=Path),
        required=True,
        help="Scratch folder (corpus, checkpoints); kept between phases on one machine.",
    ),
    click.option(
        "--out",
        type=click.Path(file_okay=False, path_type=Path),
        required=True,
        help="What comes back: tar checkpoints, JSON results, logs (each file <= 16 MiB).",
    ),
    click.option(
        "--minutes", type=float, default=8.0, show_default=True, help="Wall-clock budget of the phase."
    ),
    click.option("--seed", type=int, default=0, show_default=True),
    click.option("--smoke", is_flag=True, help="Toy sizes, a few steps (CPU test of the whole recipe)."),
]


def common(fn: Any) -> Any:
    for option in reversed(_common):
        fn = option(fn)
    return fn


_F = TypeVar("_F", bound=Callable[..., Any])


def _tar_option(*names: str, tar_name: str, help: str | None = None) -> Callable[[_F], _F]:
    """A checkpoint tar an earlier phase wrote (default: .ckpt/`tar_name`, as bench/train_demo.sh has it)."""
    return click.option(
        *names,
        type=click.Path(dir_okay=False, path_type=Path),
        default=Path(".ckpt") / tar_name,
        show_default=True,
        help=help,
    )


@recipe.command("a")
@common
@click.option(
    "--verify-per-family",
    type=int,
    default=1,
    show_default=True,
    help="Training problems verified per family (plus one held-out each), while SFT runs.",
)
def phase_a(work: Path, out: Path, minutes: float, seed: int, smoke: bool, verify_per_family: int) -> None:
    """Corpus, tokenizer, init; SFT until the deadline while the templates are verified; export."""
    phase = Phase("phase_a", out, minutes)
    corpus, init = prepare(work, seed, smoke, phase)
    # The template check compiles on the CPU cores while SFT keeps the GPU busy.
    checker = subprocess.Popen(
        _cli(
            "cudice.model.train.corpus",
            "verify-templates",
            str(corpus),
            "--out",
            str(out / "templates.json"),
            "--per-family",
            str(verify_per_family),
        ),
        stdout=subprocess.DEVNULL,
        stderr=phase.log_path.open("a"),
        start_new_session=True,
    )
    reserve = 45.0 if not smoke else 5.0  # export + slack
    try:
        ckpt = sft(init, corpus, work / "sft", phase.left() - reserve, phase, smoke, epochs=8)
        if ckpt is None:
            raise click.ClickException(f"SFT wrote no checkpoint; see {phase.log_path}")
        export_tar(ckpt, out / TAR_SFT)
        phase.say(f"exported {ckpt} -> {out / TAR_SFT}; carry it to phase b as .ckpt/{TAR_SFT}")
        checker.wait(timeout=max(1.0, phase.left()))
    except subprocess.TimeoutExpired:
        phase.say("template verification did not finish inside the phase; templates.json has what it had")
    finally:
        if checker.poll() is None:
            os.killpg(checker.pid, signal.SIGTERM)


@recipe.command("b")
@common
@_tar_option("--start", tar_name=TAR_SFT, help="Phase a's checkpoint tar.")
@click.option("--sft-minutes", type=float, default=2.0, show_default=True, help="More SFT before RL.")
def phase_b(
    work: Path, out: Path, minutes: float, seed: int, smoke: bool, start: Path, sft_minutes: float
) -> None:
    """More SFT, then BiC-RL (infilling, then end-to-end) until the deadline; export both."""
    phase = Phase("phase_b", out, minutes)
    corpus, _ = prepare(work, seed, smoke, phase, with_init=False)
    begin = unpack_tar(start, work / "start")
    # saved every 25 steps: a minute of SFT must leave a checkpoint behind when it is stopped
    more = (
        sft(begin, corpus, work / "sft_b", 60 * sft_minutes, phase, smoke, epochs=2, save_every=25)
        if sft_minutes > 0
        else None
    )
    ckpt = more or begin
    export_tar(ckpt, out / TAR_SFT)
    reserve = 40.0 if not smoke else 5.0
    rl_ckpt = rl(ckpt, corpus, work / "rl", phase.left() - reserve, phase, smoke)
    if rl_ckpt is None:
        raise click.ClickException(f"RL wrote no checkpoint before the deadline; see {phase.log_path}")
    export_tar(rl_ckpt, out / TAR_RL)
    phase.say(f"exported {ckpt} -> {TAR_SFT} and {rl_ckpt} -> {TAR_RL}; carry both to phase c in .ckpt/")


@recipe.command("c")
@common
@_tar_option("--sft", "sft_tar", tar_name=TAR_SFT)
@_tar_option("--rl", "rl_tar", tar_name=TAR_RL)
def phase_c(
    work: Path, out: Path, minutes: float, seed: int, smoke: bool, sft_tar: Path, rl_tar: Path
) -> None:
    """Held-out evaluation of the SFT and the RL checkpoint (`cudice eval`), side by side."""
    from cudice.model.train.corpus.evaluate import comparison_table, evaluate_all

    phase = Phase("phase_c", out, minutes)
    corpus, _ = prepare(work, seed, smoke, phase, with_init=False)
    stages = {"sft": unpack_tar(sft_tar, work / "eval_sft" / "ckpt")}
    if rl_tar.is_file():
        stages["rl"] = unpack_tar(rl_tar, work / "eval_rl" / "ckpt")
    else:
        phase.say(f"{rl_tar} missing: evaluating the SFT checkpoint only")
    results = evaluate_all(stages, corpus, phase.say, smoke=smoke)
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    phase.say("\n" + comparison_table(results))


if __name__ == "__main__":
    recipe()
