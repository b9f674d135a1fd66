"""Can the demo's objective teach a model of a given shape to copy the ops from a reference? A
probe on the CPU, in minutes: the task cut down to its core.

    python bench/demo_copy_probe.py CORPUS_DIR [--minutes 8] [--dims hidden_size=256,...]
        [--lr 1.5e-3] [--tokens-per-batch 8192]

From a corpus built with `--op-comments` it takes the elementwise answers (a `fused_op` device
function) and makes pairs whose prompt is the reference's code alone and whose answer is that
function's body: one note naming each op as the reference spells it, then its CUDA statement.
Compositions (the answer texts) are split 85/15, so the held-out answers are never-seen texts.
A fresh model of the demo's tokenizer and the given shape (`init_model.DEMO_DIMS` changed by
`--dims`) trains with `fit.fit` for the budget; then every answer token of 200 training and 200
held-out pairs is predicted with its block masked (`objective.forward_doubled`), once after its
own prompt and once after another pair's. A model that reads the reference gets a far lower
cross-entropy with its own prompt; one that writes the answer from priors gets about the same.
Prints both, and the share of held-out answers whose every token is the top-1.
Not covered: the full answer's wrapper (in the real task ~500 tokens around the ~20 here),
decoding (top-1 per token with its block masked stands in for it), prompt styles other than the
bare reference.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import tempfile
import time
from pathlib import Path

import torch

_BODY = re.compile(r"__device__ __forceinline__ float fused_op\(float v\) \{\n(.*?)\n\s*return v;", re.S)
_REFERENCE = re.compile(r"```python\n(.*?)```", re.S)


def probe_pairs(sft_jsonl: Path, limit: int) -> list[dict[str, str]]:
    """(reference code, fused_op body) pairs from the corpus's first `limit` lines."""
    pairs = []
    with sft_jsonl.open(encoding="utf-8") as f:
        for i, line in enumerate(f):
            if i >= limit:
                break
            rec = json.loads(line)
            body = _BODY.search(rec["response"])
            refs = _REFERENCE.findall(rec["prompt"])
            if body and refs and "//" in body.group(1):
                pairs.append({"prompt": refs[-1].strip(), "response": body.group(1).strip("\n") + "\n"})
    return pairs


def token_scores(loaded, pairs: list[dict[str, str]], shuffled: bool) -> tuple[float, float, float]:
    """(mean CE per answer token, top-1 rate, share of answers all top-1) with each block masked."""
    from cudice.model.train.corpus.fit import encode_all
    from demo_token_ce import masked_answer_scores, rotated_prompts

    loaded.model.eval()
    if shuffled:
        pairs = rotated_prompts(pairs)
    ce_sum, right_sum, count, whole = 0.0, 0, 0, 0
    for ids, num_prompt, _ in encode_all(loaded.tokenizer, pairs, loaded.block_size, loaded.ids.pad):
        ce, right, end = masked_answer_scores(loaded, ids, num_prompt)
        ce_sum += float(ce[num_prompt:end].sum())
        right_sum += int(right[num_prompt:end].sum())
        count += end - num_prompt
        whole += bool(right[num_prompt:end].all())
    return ce_sum / max(count, 1), right_sum / max(count, 1), whole / max(len(pairs), 1)


def main() -> None:
    from cudice.model.loader import load_checkpoint
    from cudice.model.train.corpus.fit import FitConfig, fit
    from cudice.model.train.corpus.init_model import DEMO_DIMS, init_checkpoint, shape_overrides

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("corpus", type=Path, help="a corpus folder built with --op-comments")
    ap.add_argument("--minutes", type=float, default=8.0)
    ap.add_argument(
        "--dims", default="", help="e.g. hidden_size=256,intermediate_size=768,num_hidden_layers=4"
    )
    ap.add_argument("--read", type=int, default=60000, help="corpus lines to read")
    ap.add_argument("--lr", type=float, default=1.5e-3)
    ap.add_argument("--tokens-per-batch", type=int, default=8192)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    pairs = probe_pairs(args.corpus / "sft.jsonl", args.read)
    answers = sorted({p["response"] for p in pairs})
    if len(answers) < 20:
        sys.exit(
            f"{args.corpus}: {len(answers)} distinct noted elementwise answers; build it with --op-comments"
        )
    random.Random(args.seed).shuffle(answers)
    held = set(answers[: max(10, len(answers) * 15 // 100)])
    train = [p for p in pairs if p["response"] not in held]
    test = [p for p in pairs if p["response"] in held]
    print(f"{len(pairs)} pairs, {len(answers)} compositions; train {len(train)}, held out {len(test)}")
    with tempfile.TemporaryDirectory() as tmp:
        sft = Path(tmp) / "sft.jsonl"
        sft.write_text("".join(json.dumps(p) + "\n" for p in train), encoding="utf-8")
        dims = shape_overrides(args.dims, DEMO_DIMS)
        repo = Path(__file__).resolve().parents[1]
        init_checkpoint(Path(tmp) / "init", sft, dims, seed=args.seed, dtype="float32",
                        tokenizer_dir=repo / "model" / "assets" / "demo")  # fmt: skip
        start = time.monotonic()
        config = FitConfig(
            seconds=60 * args.minutes,
            learning_rate=args.lr,
            tokens_per_batch=args.tokens_per_batch,
            seed=args.seed,
        )
        trained = fit(Path(tmp) / "init", sft, Path(tmp) / "fit", config, lambda m: print(m, flush=True))
        print(
            f"trained {trained['steps']} steps, {trained['epochs']} epochs, {time.monotonic() - start:.0f} s"
        )
        loaded = load_checkpoint(str(Path(tmp) / "fit"), device="cpu", dtype="float32")
        rng = random.Random(args.seed + 1)
        sample = {
            "training": rng.sample(train, min(200, len(train))),
            "held out": rng.sample(test, min(200, len(test))),
        }
        print("| pairs | prompt | CE / token | top-1 | answers all top-1 |")
        print("|---|---|---|---|---|")
        for name, chosen in sample.items():
            for shuffled in (False, True):
                ce, top1, whole = token_scores(loaded, chosen, shuffled)
                prompt = "another pair's" if shuffled else "its own"
                print(f"| {name} | {prompt} | {ce:.3f} | {top1:.1%} | {whole:.1%} |", flush=True)


if __name__ == "__main__":
    main()
