"""Markdown tables of `recipe_fit`'s results.json: the new and the shipped checkpoint side by side.

    python bench/demo_fit_table.py RESULTS_JSON [ANSWERS_JSONL]

With ANSWERS_JSONL the summaries are recomputed from the answers, `consistent` (the extension's
names agree, `heldout.names_agree`) included.

Rows: all problems, each family, each reference style; cells: k/n and the 95 % Wilson interval
of valid Python with a ModelNew (`parses`), answers equal to the verified template (`exact`) and
equal up to names and constants (`same kernel`). Also the loss curve as a text table.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def _cell(r: dict[str, Any], key: str) -> str:
    c = r[key]
    lo, hi = c["ci95"]
    return f"{c['k']}/{r['n']} ({100 * lo:.0f}–{100 * hi:.0f} %)"


def rescore(results: dict[str, Any], answers_path: str) -> None:
    """Replace each checkpoint's summary by one recomputed from its answers (adds `consistent`)."""
    from cudice.model.train.corpus.heldout import names_agree, summarise

    rows = [json.loads(line) for line in open(answers_path)]
    for label in ("new", "old"):
        mine = [{**r, "consistent": names_agree(r["answer"] or "")} for r in rows if r["model"] == label]
        results[label]["summary"] = summarise(mine)


def table(results: dict[str, Any]) -> str:
    lines = [
        "| problems | new: parses | new: names agree | new: same kernel | old: parses | old: names agree "
        "| old: same kernel |",
        "|---|---|---|---|---|---|---|",
    ]
    new, old = results["new"]["summary"], results["old"]["summary"]
    rows = [("**all**", new["all"], old["all"])]
    rows += [(f"family {f}", new["family"][f], old["family"][f]) for f in sorted(new["family"])]
    rows += [(f"style {s}", new["style"][s], old["style"][s]) for s in sorted(new["style"])]
    for name, n, o in rows:
        cells = [_cell(r, key) for r in (n, o) for key in ("parses", "consistent", "same_kernel")]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def loss_curve(results: dict[str, Any], every: int = 10) -> str:
    history = results["training"]["history"]
    lines = ["| step | seconds | loss | lr | tokens/s |", "|---|---|---|---|---|"]
    for h in history[::every] + history[-1:]:
        lines.append(
            f"| {h['step']} | {h['seconds']:.0f} | {h['loss']:.4f} | {h['lr']:.2e} | "
            f"{h['tokens_per_s'] / 1e3:.0f}k |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    data = json.loads(open(sys.argv[1]).read())
    if len(sys.argv) > 2:
        rescore(data, sys.argv[2])
    print(table(data))
    print()
    print(loss_curve(data))
