"""Held-out evaluation of a demo checkpoint: generate a ModelNew per problem, then `cudice eval`.

`evaluate(checkpoint, corpus_dir, label, say)`:
  1. load the checkpoint (`load_engine`; GPU → bf16) and write ONE greedy end-to-end answer per
     held-out problem (the runtime's prompt, `Engine.generate_texts` in one batch, dynamic
     strategy at threshold 0.9 — the editor's defaults), extracting the first code block;
  2. score the candidates with `cudice eval PROBLEMS CANDIDATES --json` (the command users run:
     correct and fast_1 over ALL problems, a missing or unparsable answer counts as a failure);
  3. measure decoding alone at batch 1 on a few prompts (`Engine.generate_kernel`): tokens per
     forward and tokens per second, with the default runner and, on a GPU, the `--fast` runner.
Returns a JSON-able dict (per family: problems, correct, fast_1; verdict counts; speeds).
`comparison_table(results)` prints SFT against RL per family with the change in correct rate.

Not covered: several samples per problem (pass@k), in-distribution problems (the training
split's compositions), and timing stability beyond what the verifier reports.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

EVAL_MAX_NEW_TOKENS = 768
SPEED_PROMPTS = 3


def _speeds(engine: Any, references: list[str], config: Any) -> dict[str, float]:
    gens = [engine.generate_kernel(ref, config) for ref in references]
    tokens = sum(g.num_tokens for g in gens)
    forwards = sum(g.num_forwards for g in gens)
    seconds = sum(g.seconds for g in gens)
    return {"tokens": tokens, "tokens_per_forward": tokens / forwards if forwards else 0.0,
            "tokens_per_s": tokens / seconds if seconds > 0 else 0.0}


def evaluate(checkpoint: str | Path, corpus_dir: str | Path, label: str, say: Callable[[str], None], *,
             smoke: bool = False, workers: int = 14) -> dict[str, Any]:
    """Generate, verify and score the held-out split (module docstring); returns the figures."""
    import torch
    from cudice.model.config import SamplerConfig
    from cudice.model.engine import load_engine
    from cudice.model.prompts import chat_prompt, e2e_prompt, extract_first_code_block

    corpus = Path(corpus_dir)
    manifest = json.loads((corpus / "manifest.json").read_text())
    held = [p for p in manifest["problems"] if p["split"] == "heldout"]
    problems_dir = corpus / "problems" / "heldout"
    candidates = Path(checkpoint).parent / f"candidates_{label}"
    candidates.mkdir(parents=True, exist_ok=True)
    for stale in candidates.glob("*.py"):
        stale.unlink()
    # 1. one greedy answer per problem, one batch
    engine = load_engine(str(checkpoint))
    config = SamplerConfig(max_new_tokens=16 if smoke else EVAL_MAX_NEW_TOKENS, temperature=0.0)
    references = [(problems_dir / p["file"]).read_text() for p in held]
    batch = engine.generate_texts([chat_prompt(e2e_prompt(r)) for r in references], config)
    for p, row in zip(held, batch.rows, strict=True):
        code = extract_first_code_block(row.text)
        (candidates / p["file"]).write_text(code if code is not None else row.text)
    say(f"eval {label}: {len(held)} answers, {batch.num_tokens} tokens in {batch.seconds:.1f} s "
        f"({batch.num_tokens / max(batch.seconds, 1e-9):.0f} tok/s batched)")
    # 2. the user's command scores them
    args = [sys.executable, "-m", "cudice.server.cli", "eval", str(problems_dir), str(candidates), "--json",
            "--workers", str(workers)]
    proc = subprocess.run(args, capture_output=True, text=True)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"cudice eval failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
    scores = json.loads(lines[-1])
    family_of = {p["file"]: p["family"] for p in held}
    per_family: dict[str, dict[str, float]] = {}
    for row in scores["per_problem"]:
        fam = per_family.setdefault(family_of[row["problem"]], {"problems": 0, "correct": 0, "fast_1": 0})
        fam["problems"] += 1
        fam["correct"] += row["verdict"] == "correct"
        sp, sp_min = row.get("speedup"), row.get("speedup_min")
        # VerifyResult.is_fast(1.0)'s test on the eval row: the pessimistic speedup clears 1
        fam["fast_1"] += row["verdict"] == "correct" and sp is not None and (sp_min if sp_min is not None else sp) > 1
    # 3. decoding speed at batch 1
    refs = references[:SPEED_PROMPTS]
    speed = {"default": _speeds(engine, refs, config)}
    if torch.cuda.is_available() and not smoke:
        try:
            speed["fast"] = _speeds(load_engine(str(checkpoint), fast=True), refs, config)
        except Exception as exc:  # the figure is optional; the error is reported, not hidden
            speed["fast"] = {"error": f"{type(exc).__name__}: {exc}"}
    result = {"label": label, "checkpoint": str(checkpoint), "num_problems": scores["num_problems"],
              "samples_per_problem": 1, "gpu": scores.get("gpu"), "correct": scores["correct"],
              "fast_1": scores["fast_1"], "fast_2": scores["fast_2"], "per_family": per_family,
              "verdicts": dict(Counter(r["verdict"] for r in scores["per_problem"])),
              "finish_reasons": dict(Counter(r.finish_reason for r in batch.rows)),
              "batched_tokens_per_s": batch.num_tokens / max(batch.seconds, 1e-9), "speed_batch1": speed,
              "per_problem": scores["per_problem"]}
    say(f"eval {label}: correct {result['correct']:.1%}, fast_1 {result['fast_1']:.1%} over "
        f"{result['num_problems']} problems x 1 sample; verdicts {result['verdicts']}; batch-1 "
        f"{speed['default']['tokens_per_forward']:.2f} tokens/forward, {speed['default']['tokens_per_s']:.0f} tok/s")
    return result


def comparison_table(results: dict[str, dict[str, Any]]) -> str:
    """Correct (and fast_1) per family for each stage in `results` ("sft", "rl"), with the change."""
    stages = [s for s in ("sft", "rl") if s in results]
    families = sorted({f for s in stages for f in results[s]["per_family"]})
    head = f"{'family':<10}" + "".join(f" {s + ' correct':>12} {s + ' fast_1':>10}" for s in stages)
    lines = [head]
    for fam in families:
        cells = ""
        for s in stages:
            f = results[s]["per_family"].get(fam, {"problems": 0, "correct": 0, "fast_1": 0})
            correct, fast = f"{f['correct']:.0f}/{f['problems']:.0f}", f"{f['fast_1']:.0f}/{f['problems']:.0f}"
            cells += f" {correct:>12} {fast:>10}"
        lines.append(f"{fam:<10}{cells}")
    total = "".join(f" {results[s]['correct']:>12.1%} {results[s]['fast_1']:>10.1%}" for s in stages)
    lines.append(f"{'all':<10}{total}")
    if len(stages) == 2:
        delta = results["rl"]["correct"] - results["sft"]["correct"]
        lines.append(f"RL changed the correct rate by {delta * 100:+.1f} points "
                     f"({results['sft']['num_problems']} problems x 1 greedy sample each stage)")
    return "\n".join(lines)
