"""Held-out evaluation of a demo checkpoint: generate a ModelNew per problem, then `cudice eval`.

`evaluate_all({"sft": dir, "rl": dir}, corpus_dir, say)`, for each checkpoint:
  1. load the checkpoint (`load_engine`; GPU → bf16) and write ONE greedy end-to-end answer per
     held-out problem (the runtime's prompt, `Engine.generate_texts` in one batch, dynamic
     strategy at threshold 0.9 — the editor's defaults), extracting the first code block;
  2. score the candidates with `cudice eval PROBLEMS CANDIDATES --json` (the command users run:
     correct and fast_1 over ALL problems, a missing or unparsable answer counts as a failure);
  3. measure decoding alone at batch 1 on a few prompts (`Engine.generate_kernel`): tokens per
     forward and tokens per second, with the default runner (on a GPU the compiled fast path,
     whose first call includes its compilation) and, on a GPU, the eager HF runner.
Returns a JSON-able dict (per family: problems, correct, fast_1; verdict counts; speeds).
`comparison_table(results)` prints SFT against RL per family, with RL − SFT and its paired 95 %
interval (`paired_line`).

Not covered: several samples per problem (pass@k), in-distribution problems (the training
split's compositions), and timing stability beyond what the verifier reports.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

EVAL_MAX_NEW_TOKENS = 1536
SPEED_PROMPTS = 2
EXAMPLES = ("relu.py", "softmax.py")  # the repository's bundled examples (in-distribution, not held out)


def _speeds(engine: Any, references: list[str], config: Any) -> dict[str, float]:
    gens = [engine.generate_kernel(ref, config) for ref in references]
    tokens = sum(g.num_tokens for g in gens)
    forwards = sum(g.num_forwards for g in gens)
    seconds = sum(g.seconds for g in gens)
    return {
        "tokens": tokens,
        "tokens_per_forward": tokens / forwards if forwards else 0.0,
        "tokens_per_s": tokens / seconds if seconds > 0 else 0.0,
    }


def generate_candidates(checkpoint: Path, corpus: Path, candidates: Path, smoke: bool) -> dict[str, Any]:
    """Step 1: one greedy answer per held-out problem, one batch; the answers' code into `candidates`."""
    import torch
    from cudice.model.config import SamplerConfig
    from cudice.model.engine import load_engine
    from cudice.model.prompts import chat_prompt, e2e_prompt, extract_first_code_block

    manifest = json.loads((corpus / "manifest.json").read_text())
    held = [p for p in manifest["problems"] if p["split"] == "heldout"]
    candidates.mkdir(parents=True, exist_ok=True)
    for stale in candidates.glob("*.py"):
        stale.unlink()
    engine = load_engine(str(checkpoint), freeze=True)
    config = SamplerConfig(max_new_tokens=16 if smoke else EVAL_MAX_NEW_TOKENS, temperature=0.0)
    references = [(corpus / "problems" / "heldout" / p["file"]).read_text() for p in held]
    batch = engine.generate_texts([chat_prompt(e2e_prompt(r)) for r in references], config)
    for p, row in zip(held, batch.rows, strict=True):
        code = extract_first_code_block(row.text)
        (candidates / p["file"]).write_text(code if code is not None else row.text)
    # The bundled examples, answered the way `cudice generate examples/relu.py` answers them.
    examples_dir = Path(__file__).resolve().parents[3] / "examples"
    example_out = candidates.parent / "example_candidates"
    example_out.mkdir(exist_ok=True)
    for name in EXAMPLES if (examples_dir / EXAMPLES[0]).is_file() else ():
        gen = engine.generate_kernel((examples_dir / name).read_text(), config)
        (example_out / name).write_text(gen.text)
    # Step 3 (here, while the model is loaded): decoding alone at batch 1.
    refs = references[:SPEED_PROMPTS]
    # on a GPU the default is the compiled fast path
    speed: dict[str, Mapping[str, float | str]] = {"default": _speeds(engine, refs, config)}
    if torch.cuda.is_available() and not smoke:
        try:
            speed["eager"] = _speeds(load_engine(str(checkpoint), fast=False, freeze=True), refs, config)
        except Exception as exc:  # the figure is optional; the error is reported, not hidden
            speed["eager"] = {"error": f"{type(exc).__name__}: {exc}"}
    return {
        "family_of": {p["file"]: p["family"] for p in held},
        "finish_reasons": dict(Counter(r.finish_reason for r in batch.rows)),
        "batched_tokens": batch.num_tokens,
        "batched_seconds": batch.seconds,
        "speed_batch1": speed,
    }


def eval_process(
    problems: Path, candidates: Path, workers: int, out: Path | None = None
) -> subprocess.Popen[str]:
    """Step 2: the user's command, `cudice eval PROBLEMS CANDIDATES --json` (with `--out OUT`: each
    verdict is also written to OUT/problems/ as it arrives)."""
    args = [
        sys.executable,
        "-m",
        "cudice.server.cli",
        "eval",
        str(problems),
        str(candidates),
        "--json",
        "--workers",
        str(workers),
        *(["--out", str(out)] if out is not None else []),
    ]
    return subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )


def _scores(proc: subprocess.Popen[str], label: str) -> dict[str, Any]:
    stdout, stderr = proc.communicate()
    lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"cudice eval of {label} failed (exit {proc.returncode}): {stderr[-2000:]}")
    return dict(json.loads(lines[-1]))


def is_fast_row(row: dict[str, Any], p: float = 1.0) -> bool:
    """VerifyResult.is_fast(p)'s test on a `cudice eval --json` row: correct, and the pessimistic
    speedup (the plain one when there is none) clears `p`."""
    sp, sp_min = row.get("speedup"), row.get("speedup_min")
    return row["verdict"] == "correct" and sp is not None and (sp_min if sp_min is not None else sp) > p


def _summary(label: str, checkpoint: Path, gen: dict[str, Any], scores: dict[str, Any]) -> dict[str, Any]:
    per_family: dict[str, dict[str, float]] = {}
    for row in scores["per_problem"]:
        fam = per_family.setdefault(
            gen["family_of"][row["problem"]], {"problems": 0, "correct": 0, "fast_1": 0}
        )
        fam["problems"] += 1
        fam["correct"] += row["verdict"] == "correct"
        fam["fast_1"] += is_fast_row(row)
    return {
        "label": label,
        "checkpoint": str(checkpoint),
        "num_problems": scores["num_problems"],
        "samples_per_problem": 1,
        "gpu": scores.get("gpu"),
        "correct": scores["correct"],
        "fast_1": scores["fast_1"],
        "fast_2": scores["fast_2"],
        "per_family": per_family,
        "verdicts": dict(Counter(r["verdict"] for r in scores["per_problem"])),
        "finish_reasons": gen["finish_reasons"],
        "batched_tokens_per_s": gen["batched_tokens"] / max(gen["batched_seconds"], 1e-9),
        "speed_batch1": gen["speed_batch1"],
        "per_problem": scores["per_problem"],
    }


def evaluate_all(
    stages: dict[str, Path],
    corpus_dir: str | Path,
    say: Callable[[str], None],
    *,
    smoke: bool = False,
    workers: int = 14,
) -> dict[str, dict[str, Any]]:
    """Generate with every checkpoint of `stages` ({"sft": dir, "rl": dir}), then score them all at once.

    The `cudice eval` runs of the stages overlap (their builds share the CPU cores, `workers`
    split between them); generation runs first, one checkpoint at a time, on the GPU.
    """
    corpus = Path(corpus_dir)
    generated: dict[str, dict[str, Any]] = {}
    for label, checkpoint in stages.items():
        generated[label] = generate_candidates(checkpoint, corpus, checkpoint.parent / "candidates", smoke)
        g = generated[label]
        say(
            f"eval {label}: {len(g['family_of'])} answers, {g['batched_tokens']} tokens in "
            f"{g['batched_seconds']:.1f} s; finish {g['finish_reasons']}"
        )
    per_run = max(1, workers // max(1, len(stages)))
    procs = {
        label: eval_process(corpus / "problems" / "heldout", ckpt.parent / "candidates", per_run)
        for label, ckpt in stages.items()
    }
    examples = Path(__file__).resolve().parents[3] / "examples"
    example_procs = {
        label: eval_process(examples, ckpt.parent / "example_candidates", 1)
        for label, ckpt in stages.items()
        if any((ckpt.parent / "example_candidates").glob("*.py"))
    }
    results = {
        label: _summary(label, stages[label], generated[label], _scores(proc, label))
        for label, proc in procs.items()
    }
    for label, proc in example_procs.items():
        # `cudice eval` over examples/ scores every reference there; only the answered ones count
        rows = [r for r in _scores(proc, f"{label} examples")["per_problem"] if r["problem"] in EXAMPLES]
        results[label]["examples"] = {
            r["problem"]: {"verdict": r["verdict"], "speedup": r["speedup"]} for r in rows
        }
        say(f"eval {label}: bundled examples {results[label]['examples']}")
    for label, r in results.items():
        s = r["speed_batch1"]["default"]
        say(
            f"eval {label}: correct {r['correct']:.1%}, fast_1 {r['fast_1']:.1%} over {r['num_problems']} "
            f"problems x 1 sample; verdicts {r['verdicts']}; "
            f"batch 1: {s['tokens_per_forward']:.2f} tokens/forward, "
            f"{s['tokens_per_s']:.0f} tok/s"
        )
    return results


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
            correct, fast = (
                f"{f['correct']:.0f}/{f['problems']:.0f}",
                f"{f['fast_1']:.0f}/{f['problems']:.0f}",
            )
            cells += f" {correct:>12} {fast:>10}"
        lines.append(f"{fam:<10}{cells}")
    total = "".join(f" {results[s]['correct']:>12.1%} {results[s]['fast_1']:>10.1%}" for s in stages)
    lines.append(f"{'all':<10}{total}")
    if len(stages) == 2:
        lines.append(paired_line(results["sft"]["per_problem"], results["rl"]["per_problem"]))
    return "\n".join(lines)


def paired_line(sft_rows: list[dict[str, Any]], rl_rows: list[dict[str, Any]]) -> str:
    """RL − SFT in correct and fast_1 rate over the problems both stages were scored on, each with
    its paired 95 % interval (`heldout.paired_difference`), and whether the interval excludes 0."""
    from cudice.model.train.corpus.heldout import paired_difference

    sft = {r["problem"]: r for r in sft_rows}
    rl = {r["problem"]: r for r in rl_rows}
    both = sorted(set(sft) & set(rl))
    parts = []
    for what, test in (("correct", lambda r: r["verdict"] == "correct"), ("fast_1", is_fast_row)):
        d, lo, hi = paired_difference([test(rl[p]) for p in both], [test(sft[p]) for p in both])
        verdict = "RL better" if lo > 0 else "RL worse" if hi < 0 else "no difference shown"
        parts.append(f"{what} {d * 100:+.1f} points [{lo * 100:+.1f}, {hi * 100:+.1f}] ({verdict})")
    return f"RL - SFT over {len(both)} paired problems, 95 % interval: " + "; ".join(parts)
