"""The RL pool: compositions whose problems reach only the RL task files (never `sft.jsonl`, never
held-out), apart from SFT and held-out by composition and by answer text; the held-out split is
the one a build without the pool makes; `--rl-source train` gives the RL files of SFT problems."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from cudice.model.train.corpus.build import (
    INFILL_EVERY,
    Problem,
    _signature,
    build_corpus,
    composition_sampler,
    draw_problems,
    make_problem,
)
from cudice.model.train.corpus.families import FAMILIES, twin_parts
from cudice.model.train.corpus.leak import check_corpus
from cudice.model.train.corpus.split import (
    RL_PERCENT,
    answer_class,
    constant_class,
    key_parts,
    split_compositions,
    split_rl_pool,
)
from cudice.model.train.data import load_rl_tasks, load_sft

SMALL = {"seed": 3, "train_per_family": 40, "heldout_per_family": 4}


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = {}
    for source in ("rl", "train"):
        out[source] = tmp_path_factory.mktemp(f"corpus_{source}")
        build_corpus(out[source], rl_source=source, **SMALL)
    return out


def _rows(corpus: Path, split: str) -> list[dict]:
    manifest = json.loads((corpus / "manifest.json").read_text())
    return [p for p in manifest["problems"] if p["split"] == split]


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_rl_pool_is_a_share_of_new_combinations_of_trained_parts_and_held_out_is_unchanged() -> None:
    twins = twin_parts()
    for name, family in FAMILIES.items():
        comps = family.compositions()
        train, rl, held = split_rl_pool(comps)
        assert held == split_compositions(comps)[1], f"{name}: the held-out split moved"
        assert rl, f"{name}: no RL composition"
        keys = [{c.key for c in part} for part in (train, rl, held)]
        assert sum(map(len, keys)) == len(comps) and len(set().union(*keys)) == len(comps)
        assert not any(c.protected for c in rl)
        known = set().union(*(key_parts(c.key) for c in train))
        for c in (*rl, *held):
            assert key_parts(c.key) <= known, f"{c.key} uses a part SFT never trains on"
        classes = [{answer_class(c.key, twins) for c in part} for part in (train, rl, held)]
        assert classes[0].isdisjoint(classes[1]) and classes[1].isdisjoint(classes[2])
        # no SFT composition differs from an RL one only by a constant (all its answers would drop)
        assert {constant_class(c.key, twins) for c in train}.isdisjoint(
            constant_class(c.key, twins) for c in rl
        )
        unprotected = sum(not c.protected for c in comps)
        if unprotected >= 100:  # the share is a hash's: close to RL_PERCENT where there are many
            assert 0.5 * RL_PERCENT <= 100 * len(rl) / unprotected <= 1.5 * RL_PERCENT, name


def test_sft_rl_and_held_out_problems_are_disjoint_by_composition_and_by_answer_signature() -> None:
    problems = draw_problems(seed=5, train_per_family=60, heldout_per_family=6)
    by_split = {s: [p for p in problems if p.split == s] for s in ("train", "rl", "heldout")}
    assert len(by_split["heldout"]) == 6 * len(FAMILIES)
    assert {p.spec.family for p in by_split["rl"]} == set(FAMILIES)  # every family has RL tasks
    comps = {s: {p.spec.composition for p in ps} for s, ps in by_split.items()}
    sigs = {s: {_signature(p) for p in ps} for s, ps in by_split.items()}
    texts = {s: {p.solution.strip() for p in ps} for s, ps in by_split.items()}
    for a, b in (("train", "rl"), ("train", "heldout"), ("rl", "heldout")):
        assert comps[a].isdisjoint(comps[b]), (a, b)
        assert sigs[a].isdisjoint(sigs[b]), (a, b)
        assert texts[a].isdisjoint(texts[b]), (a, b)
    assert all(p.infill_solution for p in by_split["rl"])  # every RL problem has its infilling task


def test_no_rl_problems_reference_or_answer_is_in_sft_and_every_one_is_an_rl_task(
    builds: dict[str, Path],
) -> None:
    corpus = builds["rl"]
    rows = _rows(corpus, "rl")
    assert rows and not list((corpus / "problems" / "train").glob(rows[0]["file"]))
    sft = (corpus / "sft.jsonl").read_text()
    e2e, infill = _jsonl(corpus / "rl_e2e.jsonl"), _jsonl(corpus / "rl_infill.jsonl")
    assert len(e2e) == len(infill) == len(rows)
    refs = [(corpus / "problems" / "rl" / r["file"]).read_text() for r in rows]
    # records in draw order, as the manifest's rows
    assert [t["pytorch_code"] for t in e2e] == [t["pytorch_code"] for t in infill] == refs
    for row, ref, task in zip(rows, refs, infill, strict=True):
        answer = (corpus / "solutions" / "rl" / row["file"]).read_text()
        for text in (ref, answer, task["cuda_code"], task["middle"]):
            assert json.dumps(text)[1:-1] not in sft
    held = {(corpus / "problems" / "heldout" / r["file"]).read_text() for r in _rows(corpus, "heldout")}
    assert held.isdisjoint(refs)
    assert check_corpus(corpus) == []


def _drawn_without_a_pool(seed: int, train_per_family: int, heldout_per_family: int) -> list[Problem]:
    """`build.draw_problems` as it was before the RL pool (every draw trains), the slow reference."""
    rng = random.Random(seed)
    train: list[Problem] = []
    held_comps = []
    for family in FAMILIES.values():
        trained, held = split_compositions(family.compositions())
        held_comps.append(held)
        comps, weights = composition_sampler(trained)
        for _ in range(train_per_family):
            comp = rng.choices(comps, weights=weights)[0]
            timed = rng.random() < 1 / 3
            infill = "varied" if len(train) % INFILL_EVERY == 0 else None
            train.append(make_problem(comp, rng, len(train), "train", timed, "generic", infill))
    seen = {_signature(p) for p in train}
    problems = list(train)
    for held in held_comps:
        order = rng.sample(held, len(held))
        kept, tries = 0, 0
        while held and kept < heldout_per_family and tries < 20 * heldout_per_family:
            p = make_problem(order[tries % len(order)], rng, len(problems), "heldout", True, "generic")
            tries += 1
            if _signature(p) not in seen:
                problems.append(p)
                kept += 1
    return problems


def test_the_held_out_problems_of_a_default_build_are_those_a_build_without_the_pool_draws(
    builds: dict[str, Path],
) -> None:
    # default held-out count and sizes; fewer training draws (the stream does not depend on N)
    before = [p for p in _drawn_without_a_pool(7, 25, 24) if p.split == "heldout"]
    now = [
        p for p in draw_problems(seed=7, train_per_family=25, heldout_per_family=24) if p.split == "heldout"
    ]
    assert len(now) == 24 * len(FAMILIES)
    assert [(p.file_name, p.reference, p.solution) for p in now] == [
        (p.file_name, p.reference, p.solution) for p in before
    ]
    rl, train = builds["rl"], builds["train"]
    for folder in ("problems/heldout", "solutions/heldout"):
        names = sorted(f.name for f in (rl / folder).iterdir())
        assert names == sorted(f.name for f in (train / folder).iterdir())
        assert all((rl / folder / n).read_bytes() == (train / folder / n).read_bytes() for n in names)
    held = [
        {f: c["heldout"] for f, c in json.loads((b / "manifest.json").read_text())["compositions"].items()}
        for b in (rl, train)
    ]
    assert held[0] == held[1]


def test_rl_files_load_with_the_rl_trainers_reader(builds: dict[str, Path]) -> None:
    corpus = builds["rl"]
    e2e = load_rl_tasks(corpus / "rl_e2e.jsonl", "e2e")
    infill = load_rl_tasks(corpus / "rl_infill.jsonl", "infill")
    manifest = json.loads((corpus / "manifest.json").read_text())
    assert len(e2e) == len(infill) == manifest["num_problems"]["rl"] == manifest["num_rl_tasks"] > 0
    assert sum(manifest["num_rl_problems"].values()) == manifest["num_problems"]["rl"]
    assert manifest["num_compositions"]["rl"] == sum(len(c["rl"]) for c in manifest["compositions"].values())
    assert all(t.prefix and t.suffix and t.reference_middle for t in infill)
    assert [t.level for t in e2e] == sorted(t.level for t in e2e)
    rl_keys = {k for c in manifest["compositions"].values() for k in c["rl"]}
    assert {r["composition"] for r in _rows(corpus, "rl")} <= rl_keys


def test_rl_source_train_gives_the_rl_files_of_sft_problems_and_sft_is_a_superset(
    builds: dict[str, Path],
) -> None:
    corpus = builds["train"]
    manifest = json.loads((corpus / "manifest.json").read_text())
    assert manifest["rl_source"] == "train" and manifest["num_problems"]["rl"] == 0
    assert not (corpus / "problems" / "rl").exists() and not (corpus / "solutions" / "rl").exists()
    train = _rows(corpus, "train")
    assert len(train) == SMALL["train_per_family"] * len(FAMILIES)
    e2e = _jsonl(corpus / "rl_e2e.jsonl")
    every = [(corpus / "problems" / "train" / r["file"]).read_text() for r in train[::INFILL_EVERY]]
    assert [t["pytorch_code"] for t in e2e] == every
    prompts = {p["prompt"] for p in load_sft(corpus / "sft.jsonl")}
    assert all(any(t["pytorch_code"] in p for p in prompts) for t in e2e)
    # the pool only takes pairs away: every SFT pair of the RL-pool build is one of this build's
    with_pool = (builds["rl"] / "sft.jsonl").read_text().splitlines()
    assert set(with_pool) <= set((corpus / "sft.jsonl").read_text().splitlines())
    assert len(with_pool) < len((corpus / "sft.jsonl").read_text().splitlines())


def test_the_cli_option_is_recorded_and_a_wrong_source_is_refused(tmp_path: Path) -> None:
    from click.testing import CliRunner
    from cudice.model.train.cli import train_group

    args = ["corpus", "build", "--train-per-family", "3", "--heldout-per-family", "0", "--families", "unary"]
    for source in ("rl", "train"):
        result = CliRunner().invoke(train_group, [*args, str(tmp_path / source), "--rl-source", source])
        assert result.exit_code == 0, result.output
        assert json.loads((tmp_path / source / "manifest.json").read_text())["rl_source"] == source
    default = CliRunner().invoke(train_group, [*args, str(tmp_path / "d")])
    assert json.loads((tmp_path / "d" / "manifest.json").read_text())["rl_source"] == "rl"
    assert json.loads(default.output)["rl_compositions"]["unary"] > 0
    bad = CliRunner().invoke(train_group, [*args, str(tmp_path / "x"), "--rl-source", "heldout"])
    assert bad.exit_code != 0
    with pytest.raises(ValueError, match="rl_source='heldout' must be one of rl, train"):
        build_corpus(tmp_path / "y", train_per_family=1, rl_source="heldout")
    assert not (tmp_path / "y").exists()


def test_a_constant_class_blanks_constants_and_twins_but_keeps_op_names() -> None:
    assert constant_class("unary:scale2p0>relu") == constant_class("unary:scale0p5>relu")
    assert constant_class("unary:shiftm0p5>tanh") == constant_class("unary:shift1p0>tanh")
    assert constant_class("unary:hardtanh>gelu") == constant_class("unary:clamp0p5>gelu")
    for a, b in (
        ("binary:add3>relu", "binary:add>relu"),
        ("unary:relu6", "unary:relu"),
        ("loss:l1_loss>mean", "loss:mse_loss>mean"),
    ):
        assert constant_class(a) != constant_class(b)
