"""The answers' identifiers: generic per kernel template by default, so two compositions' answers
differ only where their computations do; the composition naming on request; the split keeps
compositions with byte-identical answers on one side."""

from __future__ import annotations

import difflib
import json
import random
import re
from pathlib import Path

import pytest
from cudice.model.scaffold import split_scaffold
from cudice.model.train.corpus.build import INFILL_EVERY, build_corpus, draw_problems, fenced
from cudice.model.train.corpus.families import FAMILIES, GENERIC_NAMES, Composition
from cudice.model.train.corpus.files import solution_file
from cudice.model.train.corpus.kernels import NOTE, without_notes
from cudice.model.train.corpus.split import answer_class, split_compositions

# what the answer names: `{stem}_source`, `{stem}_cpp_source`, `{stem}_ext`, `{stem}_kernel`, ...
_STEMMED = re.compile(
    r"\b([A-Za-z0-9_]+?)_(source|cpp_source|ext|kernel|vec4_kernel|cuda|op|partial|final)\b"
)


def _composition(key: str) -> Composition:
    family = FAMILIES[key.split(":")[0]]
    return next(c for c in family.compositions() if c.key == key)


def _answer(key: str | Composition, seed: int, naming: str = "generic", notes: bool = True) -> str:
    comp = _composition(key) if isinstance(key, str) else key
    spec, kernel = FAMILIES[comp.family].build(comp, random.Random(seed), False, naming)
    return solution_file(spec, kernel if notes else without_notes(kernel))


def test_generic_names_are_the_same_for_every_composition_of_a_family() -> None:
    rng = random.Random(0)
    for name, family in FAMILIES.items():
        stem = GENERIC_NAMES[name]
        for comp in rng.sample(family.compositions(), min(12, len(family.compositions()))):
            spec, kernel = family.build(comp, rng)
            text = solution_file(spec, kernel)
            assert spec.answer_name == stem and kernel.function == f"{stem}_cuda", comp.key
            assert f'{stem}_source = """' in text and f'    name="{stem}",' in text, comp.key
            assert {m.group(1) for m in _STEMMED.finditer(text)} == {stem}, comp.key


def test_the_composition_naming_is_the_same_answer_with_the_old_identifiers() -> None:
    """Same rng state, either naming: the answers are equal up to the identifiers' stem, and the
    composition naming spells the composition as the first corpus did (`relu_sigmoid_source`)."""
    rng = random.Random(1)
    for name, family in FAMILIES.items():
        for comp in rng.sample(family.compositions(), min(6, len(family.compositions()))):
            seed = rng.randrange(1 << 30)
            spec, kernel = family.build(comp, random.Random(seed), False, "composition")
            old = solution_file(spec, kernel)
            assert spec.answer_name == spec.name != GENERIC_NAMES[name]
            assert f'{spec.name}_source = """' in old and f'    name="{spec.name}",' in old
            assert f"self.{spec.name}_ext.{spec.name}_cuda(" in old
            new = _answer(comp.key, seed)
            renamed = re.sub(rf'\b{GENERIC_NAMES[name]}(?=_|")', spec.name, new)
            assert renamed == old, comp.key
    with pytest.raises(ValueError, match="naming"):
        FAMILIES["unary"].build(_composition("unary:relu"), random.Random(0), False, "fancy")


# two compositions of one structure (so one seed draws the same instance) and the CUDA text of the
# ops only the first, or only the second, has
OP_SWAPS = [
    (
        "unary:sigmoid>relu>hardtanh",
        "unary:tanh>gelu>hardtanh",
        ("1.0f / (1.0f + expf(-v))", "fmaxf(v, 0.0f)"),
        ("tanhf(v)", "erff(v * 0.70710678f)"),
    ),
    ("binary:add>relu", "binary:mul>relu", ("x + y",), ("x * y",)),
    (
        "reduce:pre=abs>sum>post=relu",
        "reduce:pre=square>sum>post=tanh",
        ("fabsf(v)", "fmaxf(v, 0.0f)"),
        ("v * v", "tanhf(v)"),
    ),
    ("argreduce:pre=abs>argmax", "argreduce:pre=neg>argmax", ("fabsf(v)",), ("v = -v;",)),
    ("softmax:pre=tanh>softmax", "softmax:pre=neg>softmax", ("tanhf(v)",), ("v = -v;",)),
    ("norm:layer_norm>gelu", "norm:layer_norm>silu", ("erff(",), ("v / (1.0f + expf(-v))",)),
    ("matmul:mm>bias>relu", "matmul:mm>bias>tanh", ("fmaxf(v, 0.0f)",), ("tanhf(v)",)),
    (
        "loss:huber_loss1p0>mean",
        "loss:smooth_l1_loss1p0>mean",
        ("1.0f * (d - 0.5f * 1.0f)",),
        ("d * d / 1.0f",),
    ),
]


@pytest.mark.parametrize("first,second,ops_a,ops_b", OP_SWAPS, ids=[s[0].split(":")[0] for s in OP_SWAPS])
def test_answers_of_two_compositions_differ_only_in_the_op_lines(
    first: str, second: str, ops_a: tuple[str, ...], ops_b: tuple[str, ...]
) -> None:
    for seed in range(8):  # plain and fast variants, several argument names and dims
        for notes in (False, True):  # with notes, a differing line is an op's or its note
            diff = list(
                difflib.unified_diff(
                    _answer(first, seed, notes=notes).splitlines(),
                    _answer(second, seed, notes=notes).splitlines(),
                    lineterm="",
                    n=0,
                )
            )
            removed = [ln[1:] for ln in diff if ln.startswith("-") and not ln.startswith("---")]
            added = [ln[1:] for ln in diff if ln.startswith("+") and not ln.startswith("+++")]
            assert removed and added, (first, second, seed)
            code_removed = [ln for ln in removed if not ln.lstrip().startswith("// ")]
            code_added = [ln for ln in added if not ln.lstrip().startswith("// ")]
            assert notes or (code_removed == removed and code_added == added), (seed, removed, added)
            assert all(any(op in ln for op in ops_a) for ln in code_removed), (seed, removed)
            assert all(any(op in ln for op in ops_b) for ln in code_added), (seed, added)


def test_compositions_with_byte_identical_answers_share_a_side_and_all_others_differ() -> None:
    rng = random.Random(5)
    for name, family in FAMILIES.items():
        comps = family.compositions()
        twins = [c for c in comps if answer_class(c.key) != c.key or "clamp1p0" in c.key]
        texts: dict[str, set[str]] = {}
        for comp in comps if len(comps) <= 400 else twins + rng.sample(comps, 300):
            texts.setdefault(_answer(comp, 7, notes=False), set()).add(answer_class(comp.key))
        assert all(len(classes) == 1 for classes in texts.values()), name  # other class, other bytes
        train, held = split_compositions(comps)
        assert {answer_class(c.key) for c in train}.isdisjoint(answer_class(c.key) for c in held), name
    # hardtanh and clamp1p0 write the same line: their chains are twins, on one side
    assert answer_class("unary:sigmoid>hardtanh") == answer_class("unary:sigmoid>clamp1p0")
    assert _answer("unary:sigmoid>hardtanh", 3, notes=False) == _answer(
        "unary:sigmoid>clamp1p0", 3, notes=False
    )
    assert _answer("unary:sigmoid>hardtanh", 3, "composition") != _answer(
        "unary:sigmoid>clamp1p0", 3, "composition"
    )


def test_no_held_out_answer_is_byte_identical_to_a_training_answer_with_generic_names() -> None:
    problems = draw_problems(seed=2, train_per_family=150, heldout_per_family=4)
    train = {NOTE.sub("", p.solution) for p in problems if p.split == "train"}
    held = [p for p in problems if p.split == "heldout"]
    assert len(held) == 4 * len(FAMILIES)
    assert not any(NOTE.sub("", p.solution) in train for p in held)  # not even without the notes
    held_classes = {answer_class(p.spec.composition) for p in held}
    assert held_classes.isdisjoint(answer_class(p.spec.composition) for p in problems if p.split == "train")


def test_infilling_pairs_keep_the_composition_names_of_their_scaffold(tmp_path: Path) -> None:
    """The infilling prompt states the names (the scaffold's prefix and suffix, the user's own in
    the editor), so its answer keeps them; the end-to-end answer is generic."""
    manifest = build_corpus(
        tmp_path,
        seed=1,
        train_per_family=4,
        heldout_per_family=1,
        infill_naming="composition",
        rl_source="train",
    )
    assert (manifest["names"], manifest["infill_names"]) == ("generic", "composition")
    sft = [json.loads(line) for line in (tmp_path / "sft.jsonl").read_text().splitlines()]
    infill = [json.loads(line) for line in (tmp_path / "rl_infill.jsonl").read_text().splitlines()]
    train = [p for p in manifest["problems"] if p["split"] == "train"]
    assert len(infill) == -(-len(train) // INFILL_EVERY)
    for k, record in enumerate(infill):
        row = train[k * INFILL_EVERY]
        generic = (tmp_path / "solutions" / "train" / row["file"]).read_text()
        stem = GENERIC_NAMES[row["family"]]
        name = row["file"].split("_", 1)[1].removesuffix(".py")
        assert record["cuda_code"] == re.sub(rf'\b{stem}(?=_|")', name, generic)
        assert f"{name}_cpp_source" in record["suffix"]
        scaffold = split_scaffold(record["cuda_code"])
        assert (scaffold.prefix, scaffold.suffix) == (record["prefix"], record["suffix"])
        responses = {p["response"] for p in sft}
        assert fenced(generic) in responses and fenced(record["cuda_code"]) in responses


def test_cli_names_option_is_recorded_and_composition_gives_the_old_identifiers(tmp_path: Path) -> None:
    from click.testing import CliRunner
    from cudice.model.train.cli import train_group

    args = ["corpus", "build", "--train-per-family", "2", "--heldout-per-family", "0"]
    result = CliRunner().invoke(train_group, [*args, str(tmp_path / "c"), "--names", "composition"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["names"] == "composition"
    manifest = json.loads((tmp_path / "c" / "manifest.json").read_text())
    assert (manifest["names"], manifest["infill_names"]) == ("composition", "varied")  # the default
    for row in manifest["problems"]:
        name = row["file"].split("_", 1)[1].removesuffix(".py")
        text = (tmp_path / "c" / "solutions" / row["split"] / row["file"]).read_text()
        assert f'{name}_source = """' in text and f'name="{name}"' in text
    result = CliRunner().invoke(train_group, [*args, str(tmp_path / "g")])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "g" / "manifest.json").read_text())["names"] == "generic"
    bad = CliRunner().invoke(train_group, [*args, str(tmp_path / "x"), "--names", "fancy"])
    assert bad.exit_code != 0
