"""Install a trained demo checkpoint as the package's default model (`model/assets/demo/`).

`install_demo(tar_path, results=..., templates=...)` unpacks a recipe tar (`recipe.export_tar`)
into the assets folder, replacing what was there, and writes `demo_card.json`: what the model
is, its size, the corpus it was trained on, the training marker's figures and — when the
recipe's `results.json` is given — its held-out scores per stage. `cudice model info` shows the
card (`cudice.model.bundled.demo_card`).

Not covered: checking that the weights are good (that is what the held-out scores are for).
"""

from __future__ import annotations

import json
import shutil
import tarfile
import time
from pathlib import Path
from typing import Any

from cudice.model.bundled import CARD, DEMO_DIR, LIMITATIONS


def _stage_scores(results: dict[str, Any]) -> dict[str, Any]:
    keep = ("num_problems", "samples_per_problem", "correct", "fast_1", "per_family", "verdicts")
    out = {}
    for stage, r in results.items():
        out[stage] = {k: r[k] for k in keep if k in r}
        speed = r.get("speed_batch1", {}).get("default", {})
        out[stage]["tokens_per_forward"] = speed.get("tokens_per_forward")
    return out


def install_demo(
    tar_path: str | Path,
    *,
    into: str | Path = DEMO_DIR,
    trained: bool = True,
    results: str | Path | None = None,
    templates: str | Path | None = None,
    note: str = "",
    what: str | None = None,
    limitations: str | None = None,
    heldout: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Unpack `tar_path` into `into` (emptied first) and write its card; returns the card.

    `what` and `limitations` replace the card's default wording (say what was trained, and how);
    `heldout` is stored as the card's held-out table as given (`fit_heldout_table` makes one from
    `recipe_fit`'s results).
    """
    tar_path, into = Path(tar_path), Path(into)
    if not tar_path.is_file():
        raise ValueError(f"{tar_path} does not exist: pass the demo_sft.tar or demo_rl.tar the recipe wrote")
    if into.exists():
        shutil.rmtree(into)
    into.mkdir(parents=True)
    with tarfile.open(tar_path) as tar:
        tar.extractall(into, filter="data")
    for item in into.iterdir():  # package data: readable by whoever installs it
        item.chmod(0o644)
    config = json.loads((into / "config.json").read_text())
    marker_path = into / "cudice_checkpoint.json"
    marker = json.loads(marker_path.read_text()) if marker_path.is_file() else {}
    card: dict[str, Any] = {
        "name": "cudice-demo",
        "trained": trained,
        "what": what
        or (
            "a Qwen3-architecture block-diffusion model in SDAR layout (block size 4, <|MASK|>), "
            "trained from scratch by bench/train_demo.sh: SFT on cudice's generated corpus, then BiC-RL "
            "with verifier rewards"
            if trained
            else "a stand-in with RANDOM weights (it writes gibberish) until trained weights are installed"
        ),
        "architecture": {
            k: config.get(k)
            for k in (
                "hidden_size",
                "num_hidden_layers",
                "num_attention_heads",
                "num_key_value_heads",
                "intermediate_size",
                "vocab_size",
                "block_size",
                "torch_dtype",
            )
        },
        "source": tar_path.name,
        "installed_unix": time.time(),
        "training_step": marker.get("step"),
        "training_metrics": marker.get("metrics", {}),
        "limitations": limitations or LIMITATIONS,
    }
    if note:
        card["note"] = note
    if results is not None:
        card["heldout"] = _stage_scores(json.loads(Path(results).read_text()))
    if heldout is not None:
        card["heldout"] = heldout
    if templates is not None:
        table = json.loads(Path(templates).read_text())
        card["templates_verified"] = {
            "gpu": table.get("gpu"),
            "all_correct": table.get("all_correct"),
            "num": len(table.get("rows", [])),
        }
    (into / CARD).write_text(json.dumps(card, indent=1) + "\n")
    return card


def fit_heldout_table(results: dict[str, Any], *, date: str, machine: str) -> dict[str, Any]:
    """The card's held-out table from `recipe_fit`'s results.json: per checkpoint, each rate with
    its 95 % interval, overall and per family."""

    def cell(r: dict[str, Any]) -> dict[str, Any]:
        return {k: {"k": r[k]["k"], "rate": r[k]["rate"], "ci95": r[k]["ci95"]}
                for k in ("parses", "exact", "same_kernel")} | {"n": r["n"]}  # fmt: skip

    table: dict[str, Any] = {"date": date, "machine": machine, "samples_per_problem": 1, "decoding": "greedy"}
    for label in ("new", "old"):
        summary = results[label]["summary"]
        table[label] = {
            "all": cell(summary["all"]),
            "family": {f: cell(v) for f, v in summary["family"].items()},
        }
    return table
