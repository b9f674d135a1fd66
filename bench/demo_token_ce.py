"""Where a demo checkpoint's loss sits: per-token cross-entropy on training pairs, the op lines
(`fit.focus_spans`, the tokens `--focus-weight` weighs) against the rest of each answer.

    python bench/demo_token_ce.py CHECKPOINT SFT_JSONL [--pairs 300] [--seed 0] [--prompts shuffled]

Each pair's answer is masked whole in the noisy half (`objective.forward_doubled`), so every token
is predicted with its own block masked and the blocks before it clean: the first step of decoding
that block, the hardest case. Prints, for each kind of token (the op notes, in a corpus built
with `--op-comments`; the op lines; the rest): count, mean CE (nats), how often the top-1 token is
right, and their share of the answers' summed CE. CPU: 300 pairs of the demo
model in about 2.5 minutes on 2 cores.
`--prompts shuffled` is the control for "does the model read the prompt": each answer is scored
after another pair's prompt (a derangement of the same sample). A model that reads the reference
loses much more on the op lines then; one that writes its ops from the answer's own context alone
loses about the same.
Not covered: the later denoising steps of a block (some of its tokens already revealed).
"""

from __future__ import annotations

import argparse
import json
import random

import torch


def note_positions(tok, response: str, num_prompt: int) -> set[int]:
    """Positions (in prompt + answer ids) of the answer tokens on an op note: a `//` line that
    `fit.focus_spans` weighs with the op line below it."""
    from cudice.model.train.corpus.fit import focus_spans

    spans = [(a, b) for a, b in focus_spans(response) if response[a:b].lstrip().startswith("//")]
    if not spans:
        return set()
    enc = tok(response, add_special_tokens=False, return_offsets_mapping=True)
    return {
        num_prompt + k
        for k, (lo, hi) in enumerate(enc["offset_mapping"])
        if hi > lo and any(lo < b and hi > a for a, b in spans)
    }


def rotated_prompts(records: list[dict[str, str]]) -> list[dict[str, str]]:
    """The records with their prompts rotated by one: every answer gets a prompt not its own."""
    return [{**rec, "prompt": records[(i + 1) % len(records)]["prompt"]} for i, rec in enumerate(records)]


def masked_answer_scores(loaded, ids: list[int], num_prompt: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(per-position CE, per-position top-1 right, the answer's end before its block padding) of one
    encoded pair, its whole answer masked in the noisy half (`objective.forward_doubled`)."""
    from cudice.model.train.objective import forward_doubled

    clean = torch.tensor([ids])
    noisy = clean.clone()
    noisy[0, num_prompt:] = loaded.ids.mask
    with torch.no_grad():
        logits = forward_doubled(loaded.model, noisy, clean, loaded.block_size)[0].float()
    end = len(ids)
    while end > num_prompt and ids[end - 1] == loaded.ids.pad:
        end -= 1
    ce = torch.nn.functional.cross_entropy(logits, clean[0], reduction="none")
    return ce, logits.argmax(-1) == clean[0], end


def main() -> None:
    from cudice.model.loader import load_checkpoint
    from cudice.model.train.corpus.fit import encode_all

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint")
    ap.add_argument("sft_jsonl")
    ap.add_argument("--pairs", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--read", type=int, default=20000, help="sample from the file's first N lines")
    ap.add_argument("--prompts", choices=("own", "shuffled"), default="own")
    args = ap.parse_args()
    loaded = load_checkpoint(args.checkpoint, device="cpu", dtype="float32")
    loaded.model.eval()
    tok, ids_of = loaded.tokenizer, loaded.ids
    if loaded.block_size is None or ids_of.mask is None:
        raise SystemExit(f"{args.checkpoint} is not a block-diffusion checkpoint")
    records = []
    with open(args.sft_jsonl, encoding="utf-8") as f:
        for i, line in enumerate(f):
            if i >= args.read:
                break
            records.append(json.loads(line))
    random.Random(args.seed).shuffle(records)
    records = records[: args.pairs]
    if args.prompts == "shuffled":
        records = rotated_prompts(records)
    samples = encode_all(tok, records, loaded.block_size, ids_of.pad, focus=True)
    # CE sum, tokens, top-1 right; "op notes" only where the answers have them (`build --op-comments`)
    totals = {"op notes": [0.0, 0, 0], "op lines": [0.0, 0, 0], "the rest": [0.0, 0, 0]}
    for rec, (ids, num_prompt, marked) in zip(records, samples, strict=True):
        notes = note_positions(tok, rec["response"], num_prompt)
        ce, right, end = masked_answer_scores(loaded, ids, num_prompt)
        focus = set(marked)
        for j in range(num_prompt, end):
            row = totals["op notes" if j in notes else "op lines" if j in focus else "the rest"]
            row[0] += float(ce[j])
            row[1] += 1
            row[2] += int(right[j])
    whole = sum(row[0] for row in totals.values())
    print(f"{len(samples)} pairs of {args.sft_jsonl}, checkpoint {args.checkpoint}, prompts {args.prompts}")
    print("| tokens | count | mean CE (nats) | top-1 right | share of the CE |")
    print("|---|---|---|---|---|")
    for kind, (ce_sum, n, right_n) in totals.items():
        if not n:
            continue
        print(
            f"| {kind} | {n} | {ce_sum / max(n, 1):.3f} | {right_n / max(n, 1):.1%} | {ce_sum / whole:.1%} |"
        )


if __name__ == "__main__":
    main()
