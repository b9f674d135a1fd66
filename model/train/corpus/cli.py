"""`cudice train corpus ...` / `python -m cudice.model.train.corpus ...`: build the demo model's data.

- `build OUT_DIR [--seed N]`: the corpus folder (`cudice.model.train.corpus.build`);
- `init OUT_DIR --corpus DIR [--smoke]`: tokenizer trained on the corpus + a random SDAR-layout
  checkpoint of the demo size (`cudice.model.train.corpus.init_model`).
Errors end with a one-paragraph message and exit code 1.
"""

from __future__ import annotations

import json
from pathlib import Path

import click


@click.group("corpus", context_settings={"help_option_names": ["-h", "--help"]})
def corpus_group() -> None:
    """The demo model's generated KernelBench corpus, tokenizer and initial checkpoint."""


@corpus_group.command("build")
@click.argument("out_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the instances (shapes, dtypes).")
@click.option("--train-per-family", default=400, show_default=True, type=int)
@click.option("--heldout-per-family", default=4, show_default=True, type=int)
def build_command(out_dir: Path, seed: int, train_per_family: int, heldout_per_family: int) -> None:
    """Write problems, solutions, SFT pairs and RL task files to OUT_DIR."""
    from cudice.model.train.corpus.build import build_corpus

    try:
        manifest = build_corpus(out_dir, seed=seed, train_per_family=train_per_family,
                                heldout_per_family=heldout_per_family)
    except (ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from exc
    summary = {k: manifest[k] for k in ("seed", "num_problems", "num_sft_pairs")}
    summary["heldout_compositions"] = {f: len(v["heldout"]) for f, v in manifest["compositions"].items()}
    click.echo(json.dumps(summary))


@corpus_group.command("init")
@click.argument("out_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--corpus", "corpus_dir", required=True, type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="A folder written by `build` (its sft.jsonl trains the tokenizer).")
@click.option("--smoke", is_flag=True, help="A tiny model (CPU tests of the recipe), not the demo size.")
@click.option("--seed", default=0, show_default=True, type=int)
def init_command(out_dir: Path, corpus_dir: Path, smoke: bool, seed: int) -> None:
    """Train the BPE tokenizer on the corpus and write a random SDAR-layout checkpoint to OUT_DIR."""
    from cudice.model.train.corpus.init_model import DEMO_DIMS, SMOKE_DIMS, init_checkpoint

    try:
        info = init_checkpoint(out_dir, corpus_dir / "sft.jsonl", SMOKE_DIMS if smoke else DEMO_DIMS, seed=seed)
    except (ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(json.dumps(info))
