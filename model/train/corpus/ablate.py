"""A CPU A/B of two corpora: the same tiny model trained for the same time on each, scored on held-out
problems by text (no GPU, no build).

    python -m cudice.model.train.corpus.ablate CORPUS_DIR OUT_DIR [--seconds 1200] [--threads 1]

1. the corpus's end-to-end pairs only (`sft_e2e.jsonl`: the infilling pairs are another task and
   would take half the few steps a CPU affords);
2. a tokenizer of `ABLATION_DIMS["vocab_size"]` trained on them and a random checkpoint of
   `ABLATION_DIMS` (`init_model.init_checkpoint`, seed 0);
3. `fit.fit` for `--seconds` of wall-clock (the schedule runs over time, so two arms run side by
   side on one machine get the same budget under the same load);
4. one greedy answer per held-out problem (`heldout.generate`), scored by `heldout.score`:
   `parses` (valid Python with a `ModelNew`) and `same_compute` (the answer's compute lines equal
   the template's); `results.json` holds the rates with 95 % intervals, per family too, and
   `answers.jsonl` every answer.

Two arms built from one seed with the same flags but one (e.g. `build --op-comments` and
`--no-op-comments`) hold the same problems, prompts and held-out set; only the answers differ.
Not covered: the demo size (a GPU's work: `recipe_fit.py`), compiling or running the answers.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import click
from cudice.model.tiny import TINY_DIMS

ABLATION_DIMS: dict[str, Any] = {
    **TINY_DIMS,
    "vocab_size": 2048,
    "hidden_size": 128,
    "intermediate_size": 384,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": True,
}
INFILL_MARK = "(prefix)"  # words of the infilling prompt (model/prompts.infill_prompt) only


def e2e_pairs(sft_path: Path, out_path: Path) -> int:
    """Copy the end-to-end pairs of `sft_path` to `out_path`; return how many."""
    kept = [
        line
        for line in sft_path.read_text(encoding="utf-8").splitlines()
        if INFILL_MARK not in json.loads(line)["prompt"]
    ]
    out_path.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
    return len(kept)


@click.command()
@click.argument("corpus_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("out_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--seconds", type=float, default=1200.0, show_default=True, help="Training budget.")
@click.option("--threads", type=int, default=1, show_default=True, help="torch CPU threads.")
@click.option("--lr", type=float, default=3e-3, show_default=True)
@click.option("--tokens-per-batch", type=int, default=4096, show_default=True)
@click.option("--max-new-tokens", type=int, default=400, show_default=True)
@click.option("--eval-seconds", type=float, default=1800.0, show_default=True, help="Generation budget.")
def main(
    corpus_dir: Path,
    out_dir: Path,
    seconds: float,
    threads: int,
    lr: float,
    tokens_per_batch: int,
    max_new_tokens: int,
    eval_seconds: float,
) -> None:
    import torch
    from cudice.model.train.corpus.fit import FitConfig, fit
    from cudice.model.train.corpus.heldout import generate, score, summarise
    from cudice.model.train.corpus.init_model import init_checkpoint
    from cudice.model.train.corpus.recipe_fit import _heldout, _names_of

    torch.set_num_threads(threads)
    out_dir.mkdir(parents=True, exist_ok=True)
    log = (out_dir / "ablate.log").open("a")
    start = time.monotonic()

    def say(text: str) -> None:
        line = f"[ablate {time.monotonic() - start:7.1f}s] {text}"
        print(line, file=sys.stderr, flush=True)
        log.write(line + "\n")
        log.flush()

    sft = out_dir / "sft_e2e.jsonl"
    say(f"{e2e_pairs(corpus_dir / 'sft.jsonl', sft)} end-to-end pairs")
    info = init_checkpoint(out_dir / "init", sft, ABLATION_DIMS, seed=0)
    say(f"init: {json.dumps(info)}")
    config = FitConfig(
        seconds=seconds, learning_rate=lr, warmup_seconds=min(60.0, seconds / 10),
        tokens_per_batch=tokens_per_batch, max_length=min(2048, tokens_per_batch), log_every=10,
    )  # fmt: skip
    trained = fit(out_dir / "init", sft, out_dir / "fit", config, say)
    say(f"trained: {trained['steps']} steps, {trained['epochs']} epochs started")
    rows = _heldout(corpus_dir)
    answers, speed = generate(
        str(out_dir / "fit"), [r["reference"] for r in rows], max_new_tokens,
        time.monotonic() + eval_seconds, say, batch_size=16,
    )  # fmt: skip
    scored = []
    with (out_dir / "answers.jsonl").open("w") as f:
        for r, answer in zip(rows, answers, strict=True):
            kernel, names = _names_of(r["solution"])
            row = {
                "file": r["file"],
                "family": r["family"],
                "style": r.get("style", "cudice"),
                "composition": r["composition"],
                **score(answer, r["solution"], kernel, names),
            }
            scored.append(row)
            f.write(json.dumps({**row, "answer": answer}) + "\n")
    summary = summarise(scored)
    a = summary["all"]
    say(
        f"held-out: parses {a['parses']['k']}/{a['n']}, same_compute {a['same_compute']['k']}/{a['n']} "
        f"{a['same_compute']['ci95']}, same_kernel {a['same_kernel']['k']}/{a['n']}"
    )
    results = {"corpus": str(corpus_dir), "dims": ABLATION_DIMS, "init": info, "speed": speed}
    results["training"] = {k: v for k, v in trained.items() if k != "history"}
    results["loss"] = [h["loss"] for h in trained["history"]]
    results["summary"] = summary
    (out_dir / "results.json").write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
