"""Build the corpus folder: KernelBench problems, their solutions, SFT pairs and BiC-RL tasks.

`build_corpus(out_dir, seed=0, ...)` writes (deterministic for a seed: same bytes every run)

    problems/train/NNNN_name.py     references (Model, get_inputs, get_init_inputs)
    problems/heldout/NNNN_name.py   held-out compositions only (for `cudice eval`)
    solutions/train|heldout/...     the template ModelNew of each problem (same file names)
    sft.jsonl                       CuKe pairs {prompt, response}: for every training problem the
                                    end-to-end prompt and the infilling prompt (model/prompts.py,
                                    the builders the runtime uses), each answered by the fenced
                                    ModelNew file
    rl_e2e.jsonl                    {idx, level, pytorch_code} of the training problems
    rl_infill.jsonl                 {pytorch_code, cuda_code, prefix, middle, suffix, level}; the
                                    split is cudice.model.scaffold's, the editor's infill split
    manifest.json                   seed, counts, the split's compositions, one row per problem

Held-out problems never reach the SFT or RL files. Not covered: verifying the templates (the
GPU recipe does that with the verifier, `cudice.model.train.corpus.recipe`).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudice.model.prompts import CODE_FENCE, e2e_prompt, infill_prompt
from cudice.model.scaffold import split_scaffold
from cudice.model.train.corpus.families import FAMILIES, Composition
from cudice.model.train.corpus.files import ProblemSpec, reference_file, solution_file
from cudice.model.train.corpus.split import split_compositions


@dataclass(frozen=True, slots=True)
class Problem:
    file_name: str  # "0042_relu_sigmoid.py"
    split: str  # "train" | "heldout"
    spec: ProblemSpec
    reference: str
    solution: str


def fenced(code: str) -> str:
    """An answer as the model must write it: the file in one ```python block."""
    return f"{CODE_FENCE}python\n{code.rstrip()}\n{CODE_FENCE}"


def make_problem(comp: Composition, rng: random.Random, index: int, split: str) -> Problem:
    spec, kernel = FAMILIES[comp.family].build(comp, rng)
    return Problem(
        f"{index:04d}_{spec.name}.py", split, spec, reference_file(spec), solution_file(spec, kernel)
    )


def draw_problems(seed: int, train_per_family: int, heldout_per_family: int) -> list[Problem]:
    """Training instances (protected compositions drawn 4x as often) and held-out instances."""
    rng = random.Random(seed)
    problems: list[Problem] = []
    for family in FAMILIES.values():
        train, held = split_compositions(family.compositions())
        weights = [4 if c.protected else 1 for c in train]
        for _ in range(train_per_family):
            comp = rng.choices(train, weights=weights)[0]
            problems.append(make_problem(comp, rng, len(problems), "train"))
        order = rng.sample(held, len(held))
        for k in range(heldout_per_family if held else 0):
            problems.append(make_problem(order[k % len(order)], rng, len(problems), "heldout"))
    return problems


def sft_pairs(problem: Problem) -> list[dict[str, str]]:
    scaffold = split_scaffold(problem.solution, problem.file_name)
    answer = fenced(problem.solution)
    return [
        {"prompt": e2e_prompt(problem.reference), "response": answer},
        {"prompt": infill_prompt(problem.reference, scaffold.prefix, scaffold.suffix), "response": answer},
    ]


def rl_records(problem: Problem, idx: int) -> tuple[dict[str, Any], dict[str, Any]]:
    scaffold = split_scaffold(problem.solution, problem.file_name)
    e2e = {"idx": idx, "level": problem.spec.level, "pytorch_code": problem.reference}
    infill = {
        "idx": idx,
        "level": problem.spec.level,
        "pytorch_code": problem.reference,
        "cuda_code": problem.solution,
        "prefix": scaffold.prefix,
        "middle": scaffold.middle,
        "suffix": scaffold.suffix,
    }
    return e2e, infill


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows), encoding="utf-8")


def build_corpus(
    out_dir: str | Path, seed: int = 0, train_per_family: int = 400, heldout_per_family: int = 2
) -> dict[str, Any]:
    """Write the corpus to `out_dir` (created; existing corpus files are overwritten); return the manifest."""
    if train_per_family < 1 or heldout_per_family < 0:
        raise ValueError(
            f"train_per_family={train_per_family} must be >= 1 and heldout_per_family="
            f"{heldout_per_family} >= 0"
        )
    out = Path(out_dir)
    problems = draw_problems(seed, train_per_family, heldout_per_family)
    for split in ("train", "heldout"):
        for sub in ("problems", "solutions"):
            folder = out / sub / split
            folder.mkdir(parents=True, exist_ok=True)
            for stale in folder.glob("*.py"):
                stale.unlink()
    sft: list[dict[str, Any]] = []
    rl_e2e: list[dict[str, Any]] = []
    rl_infill: list[dict[str, Any]] = []
    for p in problems:
        (out / "problems" / p.split / p.file_name).write_text(p.reference, encoding="utf-8")
        (out / "solutions" / p.split / p.file_name).write_text(p.solution, encoding="utf-8")
        if p.split == "train":
            sft += sft_pairs(p)
            e2e, infill = rl_records(p, len(rl_e2e))
            rl_e2e.append(e2e)
            rl_infill.append(infill)
    _jsonl(out / "sft.jsonl", sft)
    _jsonl(out / "rl_e2e.jsonl", rl_e2e)
    _jsonl(out / "rl_infill.jsonl", rl_infill)
    splits = {
        name: [sorted(c.key for c in part) for part in split_compositions(f.compositions())]
        for name, f in FAMILIES.items()
    }
    manifest = {
        "seed": seed,
        "train_per_family": train_per_family,
        "heldout_per_family": heldout_per_family,
        "num_problems": {s: sum(p.split == s for p in problems) for s in ("train", "heldout")},
        "num_sft_pairs": len(sft),
        "compositions": {name: {"train": tr, "heldout": he} for name, (tr, he) in splits.items()},
        "problems": [
            {
                "file": p.file_name,
                "split": p.split,
                "family": p.spec.family,
                "composition": p.spec.composition,
                "level": p.spec.level,
                "dtype": p.spec.dtype,
            }
            for p in problems
        ],
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return manifest
