"""A CPU A/B of two corpora: the same tiny model trained for the same time on each, scored on held-out
problems by text and by likelihood (no GPU, no build).

    python -m cudice.model.train.corpus.ablate CORPUS_DIR OUT_DIR [--seconds 1200] [--threads 1]

1. the corpus's end-to-end pairs only (`sft_e2e.jsonl`: the infilling pairs are another task and
   would take half the few steps a CPU affords);
2. a tokenizer of `ABLATION_DIMS["vocab_size"]` trained on them and a random checkpoint of
   `ABLATION_DIMS` (`init_model.init_checkpoint`, seed 0);
3. `fit.fit` for `--seconds` of wall-clock (the schedule runs over time, so two arms run side by
   side on one machine get the same budget under the same load); `--start` continues an earlier
   run's checkpoint instead (a fresh optimizer and schedule), `--score-only` skips training and
   scores the `--start` checkpoint (any block-diffusion checkpoint, the demo size too);
4. the compute region's likelihood (`region_nll`: -log P of the notes and statements between the
   template's head and the rest, given the prompt and the head), the notes' share apart;
5. guided scoring (`guided`): the prompt plus the template's head up to its compute region (the
   same text in both arms), the model writes on; does it write the template's compute lines?
6. one greedy answer per held-out problem (`heldout.generate`), scored by `heldout.score`:
   `parses` (valid Python with a `ModelNew`) and `same_compute` (the answer's compute lines equal
   the template's); `results.json` holds the rates with 95 % intervals, per family too, and
   `answers.jsonl` every answer.

Two arms built from one seed with the same flags but one (e.g. `build --op-comments` and
`--no-op-comments`) hold the same problems, prompts and held-out set; only the answers differ.
Not covered: the demo size (a GPU's work: `recipe_fit.py`), compiling or running the answers.
"""

from __future__ import annotations

import json
import re
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
GUIDED_TOKENS = 96  # a compute region: a few op lines (and their notes)


def compute_region(solution: str) -> tuple[str, list[str]]:
    """(the template's text before its first note or compute line, cut before that line's newline;
    the template's compute lines): the answer's head is the same with or without notes."""
    from cudice.model.train.corpus.heldout import compute_lines

    lines = solution.splitlines()
    for i, line in enumerate(lines):
        if line.lstrip().startswith("// ") or compute_lines(line):
            return "\n".join(lines[:i]), compute_lines(solution)
    raise ValueError("the template has no compute line")


def region_lines(continuation: str) -> list[str]:
    """The compute lines a continuation writes before its first line that is neither a note nor a
    statement on `v` (the end of the region)."""
    from cudice.model.train.corpus.heldout import compute_lines

    kept = []
    for line in continuation.split("\n")[1:]:
        if not _in_region(line):
            break
        kept.append(line)
    return compute_lines("\n".join(kept))


def _in_region(line: str) -> bool:
    """A line of the compute region: a note, a compute line or a statement setting `v`."""
    from cudice.model.train.corpus.heldout import compute_lines

    return (
        line.lstrip().startswith("// ")
        or bool(compute_lines(line))
        or line.strip().startswith(("v = ", "float v = "))
    )


def region_span(solution: str) -> tuple[int, int]:
    """Character offsets in `solution` of its compute region: from the newline ending the head
    (`compute_region`) to the end of the region's last line (notes included)."""
    head, _ = compute_region(solution)
    end = len(head)
    for line in solution[len(head) :].split("\n")[1:]:
        if not _in_region(line):
            break
        end += 1 + len(line)
    return len(head), end


def region_nll(checkpoint: str, rows: list[dict[str, Any]], say: Any) -> list[dict[str, Any]]:
    """Per held-out problem, -log P(compute region | prompt, the template's text before it), in
    nats, by the chain rule in the decoding order of a block model
    (block by block, left to right inside a block): `block_size` forwards of the training
    objective's doubled sequence, the answer's tokens at and after offset o of every block
    masked, read at offset o. `region_nll` sums the region's tokens (notes included: the arm
    with notes must write them too, so both arms pay for the same decision, which ops in which
    order); `note_nll`: the part of it on the notes' tokens (those starting in a note line,
    its leading newline included); `region_tf_exact`: every region token is the model's top
    choice."""
    import torch
    from cudice.model.loader import load_checkpoint
    from cudice.model.prompts import CODE_FENCE, chat_prompt, e2e_prompt
    from cudice.model.train.objective import forward_doubled

    loaded = load_checkpoint(checkpoint, device="cpu", dtype="float32")
    model, tok, block, mask_id = loaded.model, loaded.tokenizer, loaded.block_size, loaded.ids.mask
    if block is None or mask_id is None:
        raise ValueError(f"{checkpoint} is not a block-diffusion checkpoint")
    model.eval()
    out = []
    for n, r in enumerate(rows):
        prompt = list(tok(chat_prompt(e2e_prompt(r["reference"])), add_special_tokens=False)["input_ids"])
        fence = f"{CODE_FENCE}python\n"
        enc = tok(fence + r["solution"].rstrip() + f"\n{CODE_FENCE}<|im_end|>", add_special_tokens=False,
                  return_offsets_mapping=True)  # fmt: skip
        lo, hi = (len(fence) + c for c in region_span(r["solution"]))
        spans = enc["offset_mapping"]
        region = [k for k, (a, b) in enumerate(spans) if a < hi and b > lo]
        notes = [m.span() for m in re.finditer(r"\n[ \t]*//[^\n]*", fence + r["solution"])]
        in_note = {k for k in region if any(a <= spans[k][0] < b for a, b in notes)}
        ids = prompt + list(enc["input_ids"])
        length = -(-len(ids) // block) * block
        clean = torch.tensor([ids + [loaded.ids.pad or 0] * (length - len(ids))])
        pos = torch.arange(length)
        answer = pos >= len(prompt)
        nll, note_nll, exact = 0.0, 0.0, True
        with torch.no_grad():
            for o in range(block):
                noisy = clean.clone()
                noisy[0, answer & (pos % block >= o)] = mask_id
                logits = forward_doubled(model, noisy, clean, block)[0].float()
                for k in region:
                    p = len(prompt) + k
                    if p % block == o:
                        logp = torch.log_softmax(logits[p], dim=-1)
                        nll -= float(logp[clean[0, p]])
                        note_nll -= float(logp[clean[0, p]]) if k in in_note else 0.0
                        exact = exact and int(logp.argmax()) == int(clean[0, p])
        out.append(
            {"file": r["file"], "region_tokens": len(region), "note_tokens": len(in_note), "region_nll": nll,
             "note_nll": note_nll, "region_tf_exact": exact}
        )  # fmt: skip
        if (n + 1) % 25 == 0:
            say(f"region nll: {n + 1}/{len(rows)}")
    return out


def guided(
    checkpoint: str, rows: list[dict[str, Any]], say: Any, batch_size: int = 16
) -> list[dict[str, Any]]:
    """Per held-out problem: the model is given the prompt and the template's head (the same text in
    either arm) and writes on greedily; `region_ok` says whether the compute lines it writes
    equal the template's. The template's boilerplate given, this asks only whether the model
    turns the prompt's ops into the right lines, which a tiny model may do long before it writes
    a whole file."""
    from cudice.model.config import SamplerConfig
    from cudice.model.engine import load_engine
    from cudice.model.prompts import CODE_FENCE, chat_prompt, e2e_prompt

    engine = load_engine(checkpoint, fast=False, freeze=True)
    config = SamplerConfig(max_new_tokens=GUIDED_TOKENS, temperature=0.0)
    block = engine.block_length(config)
    out = []
    for first in range(0, len(rows), batch_size):
        chunk = rows[first : first + batch_size]
        heads = [compute_region(r["solution"]) for r in chunk]
        encoded = [
            engine.encode(chat_prompt(e2e_prompt(r["reference"])))
            + engine.encode(f"{CODE_FENCE}python\n{head}")
            for r, (head, _) in zip(chunk, heads, strict=True)
        ]  # the response encoded on its own, as in training (fit.encode_all)
        result = engine.sampler.generate(encoded, config, block)
        for r, (_, want), row in zip(chunk, heads, result.rows, strict=True):
            got = region_lines(row.text)
            out.append(
                {"file": r["file"], "family": r["family"], "region_ok": got == want, "got": got, "want": want}
            )
        say(f"guided: {first + len(chunk)}/{len(rows)}")
    return out


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
@click.option(
    "--start",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="Continue from this checkpoint (an earlier run's fit/, its tokenizer kept) instead of a random one.",
)
@click.option("--tokens-per-batch", type=int, default=4096, show_default=True)
@click.option("--max-new-tokens", type=int, default=400, show_default=True)
@click.option("--eval-seconds", type=float, default=1800.0, show_default=True, help="Generation budget.")
@click.option("--score-only", is_flag=True, help="No training: score the --start checkpoint.")
def main(
    corpus_dir: Path,
    out_dir: Path,
    seconds: float,
    threads: int,
    lr: float,
    start: Path | None,
    tokens_per_batch: int,
    max_new_tokens: int,
    eval_seconds: float,
    score_only: bool,
) -> None:
    import torch
    from cudice.model.train.corpus.fit import FitConfig, fit
    from cudice.model.train.corpus.heldout import generate, summarise, wilson
    from cudice.model.train.corpus.init_model import init_checkpoint
    from cudice.model.train.corpus.recipe_fit import heldout_rows, scored_rows

    torch.set_num_threads(threads)
    out_dir.mkdir(parents=True, exist_ok=True)
    log = (out_dir / "ablate.log").open("a")
    t0 = time.monotonic()

    def say(text: str) -> None:
        line = f"[ablate {time.monotonic() - t0:7.1f}s] {text}"
        print(line, file=sys.stderr, flush=True)
        log.write(line + "\n")
        log.flush()

    sft = out_dir / "sft_e2e.jsonl"
    say(f"{e2e_pairs(corpus_dir / 'sft.jsonl', sft)} end-to-end pairs")
    if start is None:
        init = out_dir / "init"
        info: dict[str, Any] = init_checkpoint(init, sft, ABLATION_DIMS, seed=0)
    else:
        init, info = start, {"dir": str(start), "continued": True}
    say(f"init: {json.dumps(info)}")
    config = FitConfig(
        seconds=seconds, learning_rate=lr, warmup_seconds=min(60.0, seconds / 10),
        tokens_per_batch=tokens_per_batch, max_length=min(2048, tokens_per_batch), log_every=10,
    )  # fmt: skip
    if score_only:
        if start is None:
            raise click.UsageError("--score-only scores the --start checkpoint: give --start")
        checkpoint = start
        trained: dict[str, Any] = {"steps": 0, "epochs": 0, "history": [], "scored": str(start)}
    else:
        checkpoint = out_dir / "fit"
        trained = fit(init, sft, checkpoint, config, say)
        say(f"trained: {trained['steps']} steps, {trained['epochs']} epochs started")
    rows = heldout_rows(corpus_dir)
    nlls = region_nll(str(checkpoint), rows, say)
    with (out_dir / "region_nll.jsonl").open("w") as f:
        f.writelines(json.dumps(r) + "\n" for r in nlls)
    mean_nll = sum(r["region_nll"] for r in nlls) / len(nlls)
    tf_exact = sum(r["region_tf_exact"] for r in nlls)
    say(f"region nll: mean {mean_nll:.2f} nats, teacher-forced exact {tf_exact}/{len(nlls)}")
    region = guided(str(checkpoint), rows, say)
    with (out_dir / "guided.jsonl").open("w") as f:
        f.writelines(json.dumps(r) + "\n" for r in region)
    k = sum(r["region_ok"] for r in region)
    say(f"guided: compute region right {k}/{len(region)} {wilson(k, len(region))}")
    answers, speed = generate(
        str(checkpoint), [r["reference"] for r in rows], max_new_tokens,
        time.monotonic() + eval_seconds, say, batch_size=16,
    )  # fmt: skip
    scored = scored_rows(rows, answers)
    with (out_dir / "answers.jsonl").open("w") as f:
        f.writelines(json.dumps(row) + "\n" for row in scored)
    summary = summarise(scored)
    a = summary["all"]
    say(
        f"held-out: parses {a['parses']['k']}/{a['n']}, same_compute {a['same_compute']['k']}/{a['n']} "
        f"{a['same_compute']['ci95']}, same_kernel {a['same_kernel']['k']}/{a['n']}"
    )
    history: list[dict[str, float]] = trained["history"]
    results: dict[str, Any] = {"corpus": str(corpus_dir), "dims": ABLATION_DIMS, "init": info, "speed": speed}
    results["training"] = {k: v for k, v in trained.items() if k != "history"}
    results["loss"] = [h["loss"] for h in history]
    results["summary"] = summary
    results["region_nll"] = {"mean": mean_nll, "tf_exact": tf_exact, "n": len(nlls)}
    results["guided"] = {
        "n": len(region),
        "region_ok": k,
        "ci95": wilson(k, len(region)),
        "per_family": {
            fam: sum(r["region_ok"] for r in region if r["family"] == fam)
            for fam in sorted({r["family"] for r in region})
        },
    }
    (out_dir / "results.json").write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
