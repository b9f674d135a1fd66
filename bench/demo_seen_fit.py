"""How well a demo checkpoint fits problems it trained on: greedy answers to K training problems
per family, scored as the held-out ones are (`recipe_fit.evaluate`: parses, consistent names,
exact, same kernel, same computation), with 95 % Wilson intervals.

    python bench/demo_seen_fit.py CHECKPOINT CORPUS_DIR [--per-family 12] [--families a,b] [--seed 1]

CORPUS_DIR is a corpus folder with its training files (`corpus build`'s output, not the carried
tar, which holds the held-out files only). Beside `recipe_fit`'s held-out figure it separates
"has not learned the training set" (both low) from "learned it but does not generalise" (this
high, held-out low). Runs on a CPU (96 answers in about 2 minutes on a 2-core VM).
Not covered: which training problems a time-budgeted fit actually reached (less than one epoch
sees a random ~3/4 of them).
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path


def main() -> None:
    from cudice.model.train.corpus.recipe_fit import Clock, evaluate, problem_row

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint")
    ap.add_argument("corpus", type=Path)
    ap.add_argument("--per-family", type=int, default=12)
    ap.add_argument("--families", default="", help="comma-separated; default every family")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path("bench/out/seen_fit"))
    args = ap.parse_args()
    manifest = json.loads((args.corpus / "manifest.json").read_text())
    wanted = set(filter(None, args.families.split(",")))
    by_family: dict[str, list[dict]] = {}
    for p in manifest["problems"]:
        if p["split"] == "train" and (not wanted or p["family"] in wanted):
            by_family.setdefault(p["family"], []).append(p)
    if not by_family:
        raise SystemExit(
            f"{args.corpus}/manifest.json lists no training problems of {sorted(wanted) or 'any family'}"
        )
    rng = random.Random(args.seed)
    rows = []
    for _family, problems in sorted(by_family.items()):
        for p in rng.sample(problems, min(args.per_family, len(problems))):
            files = [args.corpus / kind / "train" / p["file"] for kind in ("problems", "solutions")]
            if not all(f.is_file() for f in files):
                raise SystemExit(
                    f"{files[0]} or its solution is missing: give a corpus folder with its training files"
                )
            rows.append(problem_row(args.corpus, p))
    args.out.mkdir(parents=True, exist_ok=True)
    res = evaluate("seen", args.checkpoint, rows, time.monotonic() + 3600, Clock(args.out, 61), 512)
    with (args.out / "answers.jsonl").open("w") as f:
        f.writelines(json.dumps(r) + "\n" for r in res["rows"])
    summary = res["summary"]
    keys = ("parses", "consistent", "exact", "same_kernel", "same_compute")
    print("| rows | n | " + " | ".join(keys) + " |")
    print("|---|---|" + "---|" * len(keys))
    for label, s in [("all", summary["all"]), *sorted(summary["family"].items())]:
        cells = [f"{s[k]['k']} ({100 * s[k]['ci95'][0]:.0f}–{100 * s[k]['ci95'][1]:.0f} %)" for k in keys]
        print(f"| {label} | {s['n']} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
