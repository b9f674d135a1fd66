"""Build the corpus folder: KernelBench problems, their solutions, SFT pairs and BiC-RL tasks.

`build_corpus(out_dir, seed=0, ...)` writes (deterministic for a seed: same bytes every run)

    problems/train/NNNN_name.py     references (Model, get_inputs, get_init_inputs)
    problems/heldout/NNNN_name.py   held-out compositions only (for `cudice eval`), none with an
                                    answer equal to a training answer up to names and constants
    solutions/train|heldout/...     the template ModelNew of each problem (same file names)
    sft.jsonl                       CuKe pairs {prompt, response}: for every training problem the
                                    end-to-end prompt, and for one in INFILL_EVERY the infilling
                                    prompt too (model/prompts.py, the builders the runtime uses),
                                    each answered by the fenced ModelNew file
    rl_e2e.jsonl                    {idx, level, pytorch_code} of one training problem in INFILL_EVERY
    rl_infill.jsonl                 {pytorch_code, cuda_code, prefix, middle, suffix, level}; the
                                    split is cudice.model.scaffold's, the editor's infill split
    manifest.json                   seed, counts, the split's compositions, one row per problem

Held-out problems never reach the SFT or RL files; the training files pass the KernelBench
leak check (`leak.check_corpus`) or the build fails. Not covered: verifying the templates (the
GPU recipe does that with the verifier, `cudice.model.train.corpus.recipe`).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudice.model.prompts import CODE_FENCE, e2e_prompt, infill_prompt
from cudice.model.scaffold import Scaffold, split_scaffold
from cudice.model.train.corpus.families import FAMILIES, Composition
from cudice.model.train.corpus.files import ProblemSpec, reference_file, solution_file
from cudice.model.train.corpus.leak import check_corpus
from cudice.model.train.corpus.split import answer_signature, split_compositions


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


def _signature(p: Problem) -> str:
    names = [*p.spec.params, *(a for a, _, _ in p.spec.init_args)]
    return answer_signature(p.solution, p.spec.name, names)


def draw_problems(seed: int, train_per_family: int, heldout_per_family: int) -> list[Problem]:
    """Training instances (protected compositions drawn 4x as often), then held-out instances
    whose answer signature no training answer has (`split.answer_signature`)."""
    rng = random.Random(seed)
    train: list[Problem] = []
    held_comps: dict[str, list[Composition]] = {}
    for family in FAMILIES.values():
        comps, held = split_compositions(family.compositions())
        held_comps[family.name] = held
        weights = [4 if c.protected else 1 for c in comps]
        for _ in range(train_per_family):
            comp = rng.choices(comps, weights=weights)[0]
            train.append(make_problem(comp, rng, len(train), "train"))
    seen = {_signature(p) for p in train}
    problems = list(train)
    for held in held_comps.values():
        order = rng.sample(held, len(held))
        kept, tries = 0, 0
        while held and kept < heldout_per_family and tries < 20 * heldout_per_family:
            p = make_problem(order[tries % len(order)], rng, len(problems), "heldout")
            tries += 1
            if _signature(p) not in seen:
                problems.append(p)
                kept += 1
    return problems


def sft_pairs(problem: Problem, scaffold: Scaffold | None = None) -> list[dict[str, str]]:
    """The end-to-end pair, plus the infilling pair when `scaffold` (the solution's split) is given."""
    answer = fenced(problem.solution)
    pairs = [{"prompt": e2e_prompt(problem.reference), "response": answer}]
    if scaffold is not None:
        pairs.append(
            {"prompt": infill_prompt(problem.reference, scaffold.prefix, scaffold.suffix), "response": answer}
        )
    return pairs


def rl_records(problem: Problem, idx: int, scaffold: Scaffold) -> tuple[dict[str, Any], dict[str, Any]]:
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


INFILL_EVERY = 4  # one training problem in this many also gets the infilling prompt


def build_corpus(
    out_dir: str | Path, seed: int = 0, train_per_family: int = 3000, heldout_per_family: int = 24
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
    number = -1
    for p in problems:
        (out / "problems" / p.split / p.file_name).write_text(p.reference, encoding="utf-8")
        (out / "solutions" / p.split / p.file_name).write_text(p.solution, encoding="utf-8")
        if p.split != "train":
            continue
        number += 1
        if number % INFILL_EVERY:
            sft += sft_pairs(p)
            continue
        # one problem in INFILL_EVERY: the infilling pair, and the RL task records (the split
        # into prefix/middle/suffix is the editor's, and costs milliseconds a file)
        scaffold = split_scaffold(p.solution, p.file_name)
        sft += sft_pairs(p, scaffold)
        e2e, infill = rl_records(p, len(rl_e2e), scaffold)
        rl_e2e.append(e2e)
        rl_infill.append(infill)
    _jsonl(out / "sft.jsonl", sft)
    _jsonl(out / "rl_e2e.jsonl", rl_e2e)
    _jsonl(out / "rl_infill.jsonl", rl_infill)
    leaks = check_corpus(out)
    if leaks:
        raise RuntimeError(
            f"KernelBench text in the training files: {leaks[:3]} (cudice.model.train.corpus.leak)"
        )
    splits = {
        name: [sorted(c.key for c in part) for part in split_compositions(f.compositions())]
        for name, f in FAMILIES.items()
    }
    splits_named = {name: {"train": tr, "heldout": he} for name, (tr, he) in splits.items()}
    manifest = {
        "seed": seed,
        "train_per_family": train_per_family,
        "heldout_per_family": heldout_per_family,
        "num_problems": {s: sum(p.split == s for p in problems) for s in ("train", "heldout")},
        "num_sft_pairs": len(sft),
        "num_compositions": {s: sum(len(c[s]) for c in splits_named.values()) for s in ("train", "heldout")},
        "kernelbench_leaks": 0,
        "compositions": {name: {"train": tr, "heldout": he} for name, (tr, he) in splits.items()},
        "problems": [
            {
                "file": p.file_name,
                "split": p.split,
                "family": p.spec.family,
                "composition": p.spec.composition,
                "level": p.spec.level,
                "dtype": p.spec.dtype,
                "style": p.spec.style,
            }
            for p in problems
        ],
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return manifest
