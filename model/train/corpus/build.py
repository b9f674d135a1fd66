"""Build the corpus folder: KernelBench problems, their solutions, SFT pairs and BiC-RL tasks.

`build_corpus(out_dir, seed=0, ...)` writes (deterministic for a seed: same bytes every run)

    problems/train/NNNN_name.py     references (Model, get_inputs, get_init_inputs)
    problems/rl/NNNN_name.py        RL-pool compositions only (`--rl-source rl`, the default): in
                                    the RL task files and nowhere else, none with an answer equal
                                    to an SFT answer up to names and constants
    problems/heldout/NNNN_name.py   held-out compositions only (for `cudice eval`), none with an
                                    answer equal to a training or RL answer up to names and
                                    constants;
                                    timed sizes by default (`heldout_sizes`), so `cudice eval`
                                    can measure fast_1 on them
    solutions/train|rl|heldout/...  the template ModelNew of each problem (same file names), its
                                    identifiers in `naming` (generic by default: `fused_kernel`,
                                    `reduce_cuda`, ..., the same for every composition of a
                                    family; families.NAMINGS)
    sft.jsonl                       CuKe pairs {prompt, response}: for every training problem the
                                    end-to-end prompt, and for one in `infill_every` (default
                                    INFILL_EVERY) the infilling prompt too (model/prompts.py,
                                    the builders the runtime uses), and for one in
                                    `op_pairs_every` (off by default) its op pair (`op_pair`),
                                    each answered by the fenced ModelNew file; the infilling
                                    answer in `infill_naming` (by default the composition's
                                    names, 3 in 4 wrappers varied by `wrappers.vary_wrapper`
                                    and half of those with some literal arguments baked into
                                    the host function by `wrappers.bake_arguments`:
                                    its prompt's scaffold states them, and an editor's scaffold
                                    carries the user's own, which the answer must keep)
    rl_e2e.jsonl                    {idx, level, pytorch_code} of every RL-pool problem (with
                                    `rl_source="train"`: of one training problem in `infill_every`,
                                    problems SFT was trained on)
    rl_infill.jsonl                 {pytorch_code, cuda_code, prefix, middle, suffix, level} of the
                                    same problems, the answer in `infill_naming`; the split is
                                    cudice.model.scaffold's, the editor's infill split
    manifest.json                   seed, namings, counts, the split's compositions (train, rl,
                                    heldout), one row per problem (with its size regime and answer
                                    variant)

Which compositions training draws: per family, a chain length first (`LENGTH_SHARE`: single
ops, two-op chains, longer ones; a family without some length shares among the rest), then a
composition of that length (protected ones 4x, the bundled examples' 8x); a draw that lands on an
RL-pool composition (`split.split_rl_pool`, about 12 % of a family's compositions, drawn with
weight 1 like any unprotected one) becomes an RL problem instead of an SFT one, so
`train_per_family` counts both, and the held-out problems that follow are drawn from the same
random stream as with `rl_source="train"`: the held-out files are the same bytes either way.
RL problems get no SFT pair: a policy that recites an SFT answer meets a new composition there,
and its reward group is not flat by construction. A training problem
gets timed sizes with probability `timed_share` (a third by default), small and odd sizes
otherwise (`families.draw_shape`).

Held-out problems never reach the SFT or RL files, RL problems never the SFT file; the training
files pass the KernelBench leak check (`leak.check_corpus`) or the build fails. Not covered:
verifying the templates (the GPU recipe does that with the verifier,
`cudice.model.train.corpus.recipe`); a minimum RL pool size (a family's RL problems are its draws
on RL-pool compositions that survive the answer-text rule: `manifest.json`'s `num_rl_problems`).
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudice.model.prompts import CODE_FENCE, e2e_prompt, infill_prompt
from cudice.model.scaffold import Scaffold, split_scaffold
from cudice.model.train.corpus.families import FAMILIES, NAMINGS, Composition
from cudice.model.train.corpus.files import ProblemSpec, reference_file, solution_file
from cudice.model.train.corpus.kernels import NOTE, without_notes
from cudice.model.train.corpus.leak import check_corpus
from cudice.model.train.corpus.split import answer_signature, split_compositions, split_rl_pool
from cudice.model.train.corpus.wrappers import BAKE_SHARE, VARY_SHARE, bake_arguments, vary_wrapper


@dataclass(frozen=True, slots=True)
class Problem:
    file_name: str  # "0042_relu_sigmoid.py"
    split: str  # "train" | "heldout"
    spec: ProblemSpec
    reference: str
    solution: str
    timed: bool = False  # sizes of the timed regime (families.draw_shape)
    fast: bool = False  # the answer is a template's fast variant (kernels)
    infill_solution: str = ""  # the same solution in the infilling pair's naming; empty: `solution`
    index: int = 0  # the draw's number (file name prefix; training draws: which get an infilling pair)

    @property
    def infill_answer(self) -> str:
        return self.infill_solution or self.solution


def fenced(code: str) -> str:
    """An answer as the model must write it: the file in one ```python block."""
    return f"{CODE_FENCE}python\n{code.rstrip()}\n{CODE_FENCE}"


# The op pairs (`build --op-pairs-every N`): the copy from the reference into the op notes, the
# skill the end-to-end answers need and a 20M model had not learned in 0.7 of an epoch, as a
# short pair of its own (bench/demo_copy_probe.py: a 5.2M model learns it from such pairs).
OPS_INSTRUCTION = (
    "List the operations this architecture's forward computes, in order: each as a comment spelled "
    "the way the code spells it (its operand written v), followed by the CUDA statement that "
    "computes it on the float v."
)


def op_program(solution: str) -> str:
    """The op notes and the statements that compute the value (`heldout.compute_lines`) of a noted
    solution, in order, each once (a variant that repeats the sequence is read once), indented by
    four spaces; "" for a solution without notes."""
    from cudice.model.train.corpus.heldout import compute_lines

    lines = [line.strip() for line in solution.splitlines() if NOTE.match(line + "\n") or compute_lines(line)]
    if not any(line.startswith("//") for line in lines):
        return ""
    for size in range(1, len(lines) // 2 + 1):  # a sequence written twice (plain, vectorised)
        if len(lines) % size == 0 and lines == lines[:size] * (len(lines) // size):
            lines = lines[:size]
            break
    return "".join(f"    {line}\n" for line in lines)


def op_pair(problem: Problem) -> dict[str, str] | None:
    """The op pair of a training problem with a noted solution, or None."""
    program = op_program(problem.solution)
    if not program:
        return None
    answer = f"{CODE_FENCE}cpp\n{program}{CODE_FENCE}"
    return {"prompt": f"{OPS_INSTRUCTION}\n\n{fenced(problem.reference)}\n", "response": answer}


SIZE_REGIMES = ("timed", "small")
# Share of a family's training problems per chain length (1 op, 2 ops, 3 or more).
LENGTH_SHARE = {1: 0.15, 2: 0.35, 3: 0.50}
EXAMPLE_KEYS = ("unary:relu", "softmax:pre=none>softmax")  # examples/relu.py, examples/softmax.py
TIMED_SHARE = 1 / 3
INFILL_EVERY = 4  # one training problem in this many also gets the infilling prompt
# Answers name each fused op in a comment before its CUDA statement (`build --op-comments`): off by
# default: a CPU A/B of tiny models found a cost and no benefit (docs/benchmarks.md).
OP_COMMENTS = False
VARIED = "varied"  # infilling pairs: the composition's names, 3 in 4 wrappers varied (wrappers.py)
INFILL_NAMINGS = (*NAMINGS, VARIED)
# Where the RL task files come from: the RL pool (compositions SFT never saw, split.split_rl_pool)
# or the training problems that get an infilling pair (SFT's own problems, the first corpora's).
RL_SOURCES = ("rl", "train")
SPLITS = ("train", "rl", "heldout")


def make_problem(
    comp: Composition,
    rng: random.Random,
    index: int,
    split: str,
    timed: bool = False,
    naming: str = "generic",
    infill_naming: str | None = None,
    op_comments: bool = OP_COMMENTS,
) -> Problem:
    """One instance; its solution in `naming` (families.NAMINGS) and, when `infill_naming` is
    another, the same instance in that naming too (drawn again from the same `rng` state).
    `op_comments`: the kernels keep their notes (a comment naming each op as the reference spells
    it, before the op's statement); the instance drawn is the same either way."""
    family = FAMILIES[comp.family]
    state = rng.getstate()
    spec, kernel = family.build(comp, rng, timed, naming)
    kernel = kernel if op_comments else without_notes(kernel)
    infill = ""
    if infill_naming is not None and infill_naming != naming:
        again = random.Random()
        again.setstate(state)
        built = "composition" if infill_naming == VARIED else infill_naming
        infill_spec, infill_kernel = family.build(comp, again, timed, built)
        infill = solution_file(infill_spec, infill_kernel if op_comments else without_notes(infill_kernel))
        wrap = random.Random(index * 7919 + 17)  # its own stream: the problems drawn stay the same
        if infill_naming == VARIED and wrap.random() < VARY_SHARE:
            if wrap.random() < BAKE_SHARE:  # some literal arguments become the host function's locals
                infill = bake_arguments(infill, infill_kernel.function, infill_spec.extra_args, wrap)
            infill = vary_wrapper(infill, infill_spec.answer_name, infill_kernel.function, wrap)
    return Problem(
        f"{index:04d}_{spec.name}.py",
        split,
        spec,
        reference_file(spec),
        solution_file(spec, kernel),
        timed,
        "aligned16(" in kernel.source or "__shfl_down_sync" in kernel.source,
        infill,
        index,
    )


def _weight(c: Composition) -> int:
    return 8 if c.key in EXAMPLE_KEYS else 4 if c.protected else 1


def composition_sampler(comps: list[Composition]) -> tuple[list[Composition], list[float]]:
    """Weights that give each chain length its `LENGTH_SHARE` (renormalised over the lengths the
    family has), split inside a length by `_weight`."""
    by_length: dict[int, list[Composition]] = {}
    for c in comps:
        by_length.setdefault(min(c.length, 3), []).append(c)
    total_share = sum(LENGTH_SHARE[n] for n in by_length)
    weights = []
    for c in comps:
        group = by_length[min(c.length, 3)]
        weights.append(LENGTH_SHARE[min(c.length, 3)] / total_share * _weight(c) / sum(map(_weight, group)))
    return comps, weights


def _signature(p: Problem) -> str:
    names = [*p.spec.params, *(a for a, _, _ in p.spec.init_args)]
    return answer_signature(p.solution, p.spec.answer_name, names)


def draw_problems(
    seed: int,
    train_per_family: int,
    heldout_per_family: int,
    heldout_sizes: str = "timed",
    timed_share: float = TIMED_SHARE,
    naming: str = "generic",
    infill_naming: str = VARIED,
    op_comments: bool = OP_COMMENTS,
    families: tuple[str, ...] = (),
    infill_every: int = INFILL_EVERY,
    rl_source: str = "rl",
) -> list[Problem]:
    """Training-side instances (`composition_sampler`; timed sizes with probability
    `timed_share`), then held-out instances in the `heldout_sizes` regime whose answer signature
    no training-side answer has (`split.answer_signature`). With `rl_source="rl"` the draws on
    RL-pool compositions (`split.split_rl_pool`) are split "rl", and those whose signature an SFT
    ("train") answer has are dropped; with "train" every draw is a training problem. Solutions
    in `naming`; RL problems and the training problems that get an infilling pair (draw number a
    multiple of `infill_every`, INFILL_EVERY by default) also in `infill_naming`. `op_comments`:
    see `make_problem`; `families`: only these families (all when empty), e.g. a small corpus for
    a CPU experiment."""
    if rl_source not in RL_SOURCES:
        raise ValueError(
            f"rl_source={rl_source!r} must be one of {', '.join(RL_SOURCES)} (rl: the RL pool SFT "
            "never saw; train: RL tasks from the SFT problems)"
        )
    if infill_every < 1:
        raise ValueError(f"infill_every={infill_every} must be >= 1 (1: every training problem)")
    if heldout_sizes not in SIZE_REGIMES:
        raise ValueError(f"heldout_sizes={heldout_sizes!r} must be one of {', '.join(SIZE_REGIMES)}")
    if naming not in NAMINGS:
        raise ValueError(f"naming={naming!r} must be one of {', '.join(NAMINGS)}")
    if infill_naming not in INFILL_NAMINGS:
        raise ValueError(f"infill_naming={infill_naming!r} must be one of {', '.join(INFILL_NAMINGS)}")
    if not 0.0 <= timed_share <= 1.0:
        raise ValueError(f"timed_share={timed_share} must be within [0, 1]")
    unknown = sorted(set(families) - set(FAMILIES))
    if unknown:
        raise ValueError(f"unknown families {unknown}; known: {', '.join(FAMILIES)}")
    rng = random.Random(seed)
    drawn: list[Problem] = []  # the training side in draw order: SFT ("train") and RL pool ("rl")
    held_comps: dict[str, list[Composition]] = {}
    for family in (f for f in FAMILIES.values() if not families or f.name in families):
        # 1. the sampler over split_compositions' training side, as without an RL pool, so the
        #    random stream (and with it every held-out instance) does not depend on `rl_source`
        trained, held = split_compositions(family.compositions())
        held_comps[family.name] = held
        pool = {c.key for c in split_rl_pool(family.compositions())[1]} if rl_source == "rl" else set()
        comps, weights = composition_sampler(trained)
        for _ in range(train_per_family):
            comp = rng.choices(comps, weights=weights)[0]
            timed = rng.random() < timed_share
            in_pool = comp.key in pool
            infill = infill_naming if in_pool or len(drawn) % infill_every == 0 else None
            split = "rl" if in_pool else "train"
            drawn.append(make_problem(comp, rng, len(drawn), split, timed, naming, infill, op_comments))
    # 2. held-out answers differ from every training-side answer, SFT and RL pool alike
    signatures = [_signature(p) for p in drawn]
    seen = set(signatures)
    problems = list(drawn)
    for held in held_comps.values():
        order = rng.sample(held, len(held))
        kept, tries = 0, 0
        while held and kept < heldout_per_family and tries < 20 * heldout_per_family:
            p = make_problem(
                order[tries % len(order)],
                rng,
                len(problems),
                "heldout",
                heldout_sizes == "timed",
                naming,
                op_comments=op_comments,
            )
            tries += 1
            if _signature(p) not in seen:
                problems.append(p)
                kept += 1
    # 3. an RL problem whose answer equals an SFT answer up to names and constants is dropped
    sft_seen = {sig for p, sig in zip(drawn, signatures, strict=True) if p.split == "train"}
    dropped = {
        p.index for p, sig in zip(drawn, signatures, strict=True) if p.split == "rl" and sig in sft_seen
    }
    return [p for p in problems if p.split != "rl" or p.index not in dropped]


def sft_pairs(problem: Problem, scaffold: Scaffold | None = None) -> list[dict[str, str]]:
    """The end-to-end pair, plus the infilling pair when `scaffold` (the split of
    `problem.infill_answer`) is given."""
    pairs = [{"prompt": e2e_prompt(problem.reference), "response": fenced(problem.solution)}]
    if scaffold is not None:
        pairs.append(
            {
                "prompt": infill_prompt(problem.reference, scaffold.prefix, scaffold.suffix),
                "response": fenced(problem.infill_answer),
            }
        )
    return pairs


def rl_records(problem: Problem, idx: int, scaffold: Scaffold) -> tuple[dict[str, Any], dict[str, Any]]:
    e2e = {"idx": idx, "level": problem.spec.level, "pytorch_code": problem.reference}
    infill = {
        "idx": idx,
        "level": problem.spec.level,
        "pytorch_code": problem.reference,
        "cuda_code": problem.infill_answer,
        "prefix": scaffold.prefix,
        "middle": scaffold.middle,
        "suffix": scaffold.suffix,
    }
    return e2e, infill


def _three_way(comps: Sequence[Composition], rl_source: str) -> tuple[list[Composition], ...]:
    """(train, rl, heldout) compositions; no RL pool unless `rl_source` is "rl"."""
    if rl_source == "rl":
        return split_rl_pool(comps)
    trained, held = split_compositions(comps)
    return trained, [], held


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows), encoding="utf-8")


def build_corpus(
    out_dir: str | Path,
    seed: int = 0,
    train_per_family: int = 3000,
    heldout_per_family: int = 24,
    heldout_sizes: str = "timed",
    timed_share: float = TIMED_SHARE,
    naming: str = "generic",
    infill_naming: str = VARIED,
    op_comments: bool = OP_COMMENTS,
    families: tuple[str, ...] = (),
    infill_every: int = INFILL_EVERY,
    rl_source: str = "rl",
    op_pairs_every: int = 0,
) -> dict[str, Any]:
    """Write the corpus to `out_dir` (created; existing corpus files are overwritten); return the
    manifest. `naming`: the identifiers of the solutions and end-to-end answers; `infill_naming`:
    those of the infilling pairs and RL infilling tasks (families.NAMINGS); `op_comments`,
    `families` and `infill_every` (one training problem in this many gets the infilling pair):
    see `draw_problems`. `rl_source` (RL_SOURCES): "rl" writes the RL task records of every
    RL-pool problem, "train" those of the training problems with an infilling pair (the files
    of a build without an RL pool). `op_pairs_every` N > 0: one training problem in N (by draw
    number) also gets its op pair (`op_pair`; needs `op_comments`); 0, none."""
    if op_pairs_every < 0 or (op_pairs_every and not op_comments):
        raise ValueError(
            f"op_pairs_every={op_pairs_every} needs op_comments and must be >= 0 (0: no op pairs): "
            "the op pairs are made of the op notes"
        )
    if train_per_family < 1 or heldout_per_family < 0:
        raise ValueError(
            f"train_per_family={train_per_family} must be >= 1 and heldout_per_family="
            f"{heldout_per_family} >= 0"
        )
    out = Path(out_dir)
    problems = draw_problems(
        seed,
        train_per_family,
        heldout_per_family,
        heldout_sizes,
        timed_share,
        naming,
        infill_naming,
        op_comments,
        families,
        infill_every,
        rl_source,
    )
    for split in SPLITS:
        for sub in ("problems", "solutions"):
            folder = out / sub / split
            if split != "rl" or rl_source == "rl":  # rl_source="train": the old folders only
                folder.mkdir(parents=True, exist_ok=True)
            for stale in folder.glob("*.py"):
                stale.unlink()
    sft: list[dict[str, Any]] = []
    rl_e2e: list[dict[str, Any]] = []
    rl_infill: list[dict[str, Any]] = []
    num_op_pairs = 0
    for p in problems:
        (out / "problems" / p.split / p.file_name).write_text(p.reference, encoding="utf-8")
        (out / "solutions" / p.split / p.file_name).write_text(p.solution, encoding="utf-8")
        if p.split == "heldout":
            continue
        if p.split == "train" and op_pairs_every and p.index % op_pairs_every == 0:
            pair = op_pair(p)
            if pair is not None:
                sft.append(pair)
                num_op_pairs += 1
        if p.split == "train" and p.index % infill_every:
            sft += sft_pairs(p)
            continue
        # an RL problem, or one training problem in `infill_every` (its infilling pair; with
        # rl_source="train" its RL task records too): the split into prefix/middle/suffix is the
        # editor's, and costs milliseconds a file
        scaffold = split_scaffold(p.infill_answer, p.file_name)
        if p.split == "train":
            sft += sft_pairs(p, scaffold)
        if p.split == "rl" or rl_source == "train":
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
        name: dict(
            zip(
                SPLITS,
                (sorted(c.key for c in part) for part in _three_way(f.compositions(), rl_source)),
                strict=True,
            )
        )
        for name, f in FAMILIES.items()
        if not families or name in families
    }
    manifest = {
        "seed": seed,
        "train_per_family": train_per_family,
        "heldout_per_family": heldout_per_family,
        "heldout_sizes": heldout_sizes,
        "timed_share": timed_share,
        "names": naming,
        "infill_names": infill_naming,
        "infill_every": infill_every,
        "rl_source": rl_source,
        "op_comments": op_comments,
        "op_pairs_every": op_pairs_every,
        "num_op_pairs": num_op_pairs,
        "families": sorted(splits),
        "num_problems": {s: sum(p.split == s for p in problems) for s in SPLITS},
        "num_rl_problems": {f: sum(p.split == "rl" and p.spec.family == f for p in problems) for f in splits},
        "num_sft_pairs": len(sft),
        "num_rl_tasks": len(rl_e2e),
        "num_compositions": {s: sum(len(c[s]) for c in splits.values()) for s in SPLITS},
        "kernelbench_leaks": 0,
        "compositions": splits,
        "problems": [
            {
                "file": p.file_name,
                "split": p.split,
                "family": p.spec.family,
                "composition": p.spec.composition,
                "level": p.spec.level,
                "dtype": p.spec.dtype,
                "style": p.spec.style,
                "sizes": "timed" if p.timed else "small",
                "variant": "fast" if p.fast else "plain",
            }
            for p in problems
        ],
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return manifest
