"""Turn the demo recipe's `results.json` (phase c) into a markdown table and a per-family plot.

    python bench/demo_results.py out_c/results.json [--plot docs/demo_heldout.png]

Prints a markdown table for docs/benchmarks.md: per family, the held-out problems and how many
the SFT and the RL checkpoint got `correct` (and fast_1), the totals, the change RL made, the
bundled examples' verdicts and the decoding figures (tokens per forward with the dynamic
strategy at batch 1, tok/s). `--plot` writes a bar chart of the correct rate per family, SFT
against RL (needs matplotlib). Not covered: confidence intervals (one greedy sample per problem;
the table states the counts so a reader can judge).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def markdown(results: dict[str, Any]) -> str:
    stages = [s for s in ("sft", "rl") if s in results]
    families = sorted({f for s in stages for f in results[s]["per_family"]})
    head = "| family | " + " | ".join(f"{s.upper()} correct | {s.upper()} fast_1" for s in stages) + " |"
    rule = "|---|" + "---|---|" * len(stages)
    rows = [head, rule]
    for fam in families:
        cells = []
        for s in stages:
            f = results[s]["per_family"].get(fam, {"problems": 0, "correct": 0, "fast_1": 0})
            cells += [f"{f['correct']:.0f}/{f['problems']:.0f}", f"{f['fast_1']:.0f}/{f['problems']:.0f}"]
        rows.append(f"| {fam} | " + " | ".join(cells) + " |")
    total = []
    for s in stages:
        r = results[s]
        n = r["num_problems"]
        total += [
            f"**{r['correct'] * n:.0f}/{n}** ({r['correct']:.1%})",
            f"{r['fast_1'] * n:.0f}/{n} ({r['fast_1']:.1%})",
        ]
    rows.append("| all | " + " | ".join(total) + " |")
    lines = ["\n".join(rows), ""]
    n = results[stages[0]]["num_problems"]
    if len(stages) == 2:
        delta = (results["rl"]["correct"] - results["sft"]["correct"]) * n
        lines.append(
            f"RL changed the held-out correct count by {delta:+.0f} of {n} problems "
            f"({delta / n * 100:+.1f} points); one greedy sample per problem and stage."
        )
    for s in stages:
        r = results[s]
        speed = r["speed_batch1"]
        figures = "; ".join(
            f"{runner}: {v['tokens_per_forward']:.2f} tokens/forward, {v['tokens_per_s']:.0f} tok/s"
            for runner, v in speed.items()
            if "tokens_per_forward" in v
        )
        examples = ", ".join(f"{k}: {v['verdict']}" for k, v in r.get("examples", {}).items()) or "not run"
        lines.append(
            f"- {s.upper()}: batch 1 ({figures}); batched {r['batched_tokens_per_s']:.0f} tok/s; "
            f"verdicts {r['verdicts']}; bundled examples: {examples}"
        )
    return "\n".join(lines)


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stages = [s for s in ("sft", "rl") if s in results]
    families = sorted({f for s in stages for f in results[s]["per_family"]})
    width = 0.8 / len(stages)
    fig, ax = plt.subplots(figsize=(8, 3.5))
    for i, s in enumerate(stages):
        fam = results[s]["per_family"]
        rates = [
            fam[f]["correct"] / fam[f]["problems"] if f in fam and fam[f]["problems"] else 0.0
            for f in families
        ]
        ax.bar([k + i * width for k in range(len(families))], rates, width, label=s.upper())
    ax.set_xticks([k + width * (len(stages) - 1) / 2 for k in range(len(families))], families, rotation=20)
    ax.set_ylim(0, 1)
    ax.set_ylabel("held-out correct rate")
    n = results[stages[0]]["num_problems"]
    ax.set_title(f"cudice demo model, held-out compositions ({n} problems, 1 greedy sample each)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("--plot", type=Path, default=None)
    args = parser.parse_args()
    results = json.loads(args.results.read_text())
    print(markdown(results))
    if args.plot is not None:
        plot(results, args.plot)
        print(f"\nwrote {args.plot}")


if __name__ == "__main__":
    main()
