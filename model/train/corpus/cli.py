"""`cudice train corpus ...` / `python -m cudice.model.train.corpus ...`: build the demo model's data.

- `build OUT_DIR [--seed N] [--heldout-sizes timed|small] [--timed-share F]
  [--names generic|composition] [--infill-names generic|composition]
  [--op-comments/--no-op-comments] [--families unary,binary] [--infill-every N]
  [--rl-source rl|train] [--op-pairs-every N]`: the corpus folder (`cudice.model.train.corpus.build`);
- `init OUT_DIR --corpus DIR [--smoke]`: tokenizer trained on the corpus + a random SDAR-layout
  checkpoint of the demo size (`cudice.model.train.corpus.init_model`);
- `verify-templates DIR [--out JSON]`: a sample of every family through the verifier;
- `install-demo TAR [--results JSON]`: make a recipe checkpoint the bundled default model.
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
@click.option(
    "--seed", default=0, show_default=True, type=int, help="Seed of the instances (shapes, dtypes)."
)
@click.option("--train-per-family", default=3000, show_default=True, type=int)
@click.option(
    "--heldout-per-family",
    default=24,
    show_default=True,
    type=int,
    help="Held-out problems per family (each one costs a verifier build per evaluated checkpoint).",
)
@click.option(
    "--heldout-sizes",
    type=click.Choice(["timed", "small"]),
    default="timed",
    show_default=True,
    help="Held-out shapes: timed (PyTorch's kernel takes long enough for the verifier to time a "
    "candidate on a GPU; inputs up to 256 MiB) or small (micro-sizes: correctness only, fast_1 "
    "unresolved).",
)
@click.option(
    "--timed-share",
    default=1 / 3,
    show_default=True,
    type=click.FloatRange(0.0, 1.0),
    help="Share of training problems with timed sizes (the rest small and odd).",
)
@click.option(
    "--names",
    "naming",
    type=click.Choice(["generic", "composition"]),
    default="generic",
    show_default=True,
    help="Identifiers of the solutions and end-to-end answers: one per kernel template (fused_kernel, "
    "reduce_cuda, ...) or spelled from the composition (sigmoid_relu_kernel, the first corpus's).",
)
@click.option(
    "--infill-names",
    "infill_naming",
    type=click.Choice(["generic", "composition", "varied"]),
    default="varied",
    show_default=True,
    help="Identifiers of the infilling pairs and RL infilling tasks, whose prompt states them (the "
    "scaffold's prefix and suffix): varied names teach the model to take the scaffold's own "
    "(varied: the composition's, 3 in 4 wrappers renamed and restyled, wrappers.py).",
)
@click.option(
    "--op-comments/--no-op-comments",
    default=False,
    show_default=True,
    help="Write a comment before each fused op's CUDA statement naming the op as the reference "
    "spells it (`// F.elu(v)`), an alignment a model can copy from the prompt (off: not shown to "
    "help yet, docs/model.md).",
)
@click.option(
    "--families",
    default="",
    help="Comma-separated families to build (default: all), e.g. unary,binary for a small corpus.",
)
@click.option(
    "--infill-every",
    default=4,
    show_default=True,
    type=click.IntRange(min=1),
    help="One training problem in this many also gets the infilling pair (1: every one).",
)
@click.option(
    "--rl-source",
    type=click.Choice(["rl", "train"]),
    default="rl",
    show_default=True,
    help="Problems of the RL task files: rl (an RL pool of about 12 %% of each family's "
    "compositions, SFT never sees them; its draws count in --train-per-family) or train (one "
    "training problem in --infill-every, problems SFT was trained on: the earlier corpora's).",
)
@click.option(
    "--op-pairs-every",
    default=0,
    show_default=True,
    type=click.IntRange(min=0),
    help="One training problem in this many also gets an op pair: the reference alone, answered by "
    "its op notes and statements (needs --op-comments; 0: none).",
)
def build_command(
    out_dir: Path,
    seed: int,
    train_per_family: int,
    heldout_per_family: int,
    heldout_sizes: str,
    timed_share: float,
    naming: str,
    infill_naming: str,
    op_comments: bool,
    families: str,
    infill_every: int,
    rl_source: str,
    op_pairs_every: int,
) -> None:
    """Write problems, solutions, SFT pairs and RL task files to OUT_DIR."""
    from cudice.model.train.corpus.build import build_corpus

    try:
        manifest = build_corpus(
            out_dir,
            seed=seed,
            train_per_family=train_per_family,
            heldout_per_family=heldout_per_family,
            heldout_sizes=heldout_sizes,
            timed_share=timed_share,
            naming=naming,
            infill_naming=infill_naming,
            op_comments=op_comments,
            families=tuple(f for f in families.split(",") if f),
            infill_every=infill_every,
            rl_source=rl_source,
            op_pairs_every=op_pairs_every,
        )
    except (ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from exc
    keys = ("seed", "names", "op_comments", "num_op_pairs", "num_problems", "num_sft_pairs")
    summary = {k: manifest[k] for k in keys}
    summary["heldout_compositions"] = {f: len(v["heldout"]) for f, v in manifest["compositions"].items()}
    summary["rl_compositions"] = {f: len(v["rl"]) for f, v in manifest["compositions"].items()}
    summary["num_rl_problems"] = manifest["num_rl_problems"]
    click.echo(json.dumps(summary))


@corpus_group.command("init")
@click.argument("out_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--corpus",
    "corpus_dir",
    required=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="A folder written by `build` (its sft.jsonl trains the tokenizer).",
)
@click.option("--smoke", is_flag=True, help="A tiny model (CPU tests of the recipe), not the demo size.")
@click.option("--seed", default=0, show_default=True, type=int)
def init_command(out_dir: Path, corpus_dir: Path, smoke: bool, seed: int) -> None:
    """Train the BPE tokenizer on the corpus and write a random SDAR-layout checkpoint to OUT_DIR."""
    from cudice.model.train.corpus.init_model import DEMO_DIMS, SMOKE_DIMS, init_checkpoint

    try:
        info = init_checkpoint(
            out_dir, corpus_dir / "sft.jsonl", SMOKE_DIMS if smoke else DEMO_DIMS, seed=seed
        )
    except (ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(json.dumps(info))


@corpus_group.command("verify-templates")
@click.argument("corpus_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--out",
    "out_json",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write the table as JSON here.",
)
@click.option(
    "--per-family",
    default=1,
    show_default=True,
    type=int,
    help="Training problems per family (plus one held-out problem each).",
)
def verify_templates_command(corpus_dir: Path, out_json: Path | None, per_family: int) -> None:
    """Verify a sample of every family's template solutions (static stage only without a GPU)."""
    import sys

    from cudice.model.train.corpus.verify_templates import verify_templates

    table = verify_templates(corpus_dir, per_family, lambda line: print(line, file=sys.stderr, flush=True))
    if out_json is not None:
        out_json.write_text(json.dumps(table, indent=1) + "\n")
    click.echo(json.dumps({k: table[k] for k in ("gpu", "all_correct", "all_static_ok")}))
    if not table["all_static_ok"]:
        raise SystemExit(1)


@corpus_group.command("install-demo")
@click.argument("tar_path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--results",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Phase c's results.json (held-out scores go into the card).",
)
@click.option(
    "--templates",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Phase a's templates.json.",
)
@click.option("--untrained", is_flag=True, help="Mark the weights as a random stand-in.")
@click.option(
    "--into",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Target folder (default: the package's model/assets/demo).",
)
def install_demo_command(
    tar_path: Path, results: Path | None, templates: Path | None, untrained: bool, into: Path | None
) -> None:
    """Install a recipe checkpoint tar as the bundled default model, with its card."""
    from cudice.model.bundled import DEMO_DIR
    from cudice.model.train.corpus.install import install_demo

    try:
        card = install_demo(
            tar_path, into=into or DEMO_DIR, trained=not untrained, results=results, templates=templates
        )
    except (ValueError, OSError, KeyError) as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(json.dumps({k: card[k] for k in ("name", "trained", "architecture")}))
