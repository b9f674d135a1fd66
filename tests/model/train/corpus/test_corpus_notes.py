"""The answers' notes: before each fused op's CUDA statement, a comment naming the op as the
reference spells it (`// F.elu(v)`), one per stage; a build option recorded in the manifest that
changes only the answers; the held-out text metric that ignores them."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
from cudice.model.train.corpus.build import build_corpus
from cudice.model.train.corpus.families import FAMILIES, NOTE_OPERAND, chain_pool
from cudice.model.train.corpus.files import solution_file
from cudice.model.train.corpus.heldout import compute_lines, score
from cudice.model.train.corpus.kernels import NOTE, without_notes
from cudice.model.train.corpus.ops import all_unary_ops, unary_op

POINT_OPS = [*all_unary_ops(), *chain_pool(), unary_op("sqrt"), unary_op("scale", 0.1)]
POINT_STATEMENTS = {op.cuda for op in POINT_OPS}
# stages with one note each besides the point ops: the line the note precedes (a loss: its first)
CORE_LINES = (
    "float v = ",
    "float d = ",
    "float h = ",
    "float acc = ",
    "float best = ",
    "float m = -INFINITY;",
)


def _forward(reference: str) -> str:
    """The statements of `Model.forward` (its indented lines; docstring lines left out)."""
    lines = reference.split("def forward", 1)[1].splitlines()[1:]
    body = []
    for line in lines:
        if line and not line.startswith(" "):
            break
        body.append(line)
    code = "\n".join(body).split('"""')
    return "\n".join(code[::2])  # outside docstrings


def _as_pattern(note: str) -> str:
    """The note as a regex over the reference: the operand `v` may be any expression there."""
    parts = re.split(rf"\b{NOTE_OPERAND}\b", note)
    return ".+".join(re.escape(p) for p in parts)


def _instances(per_family: int = 25) -> list[tuple[str, str, str, str]]:
    """(family, key, reference forward, answer) of random instances of every family."""
    from cudice.model.train.corpus.files import reference_file

    rng = random.Random(11)
    out = []
    for name, family in FAMILIES.items():
        comps = family.compositions()
        for k in range(per_family):
            comp = rng.choice(comps)
            spec, kernel = family.build(comp, random.Random(k), k % 3 == 0)
            out.append((name, comp.key, _forward(reference_file(spec)), solution_file(spec, kernel)))
    return out


def test_every_op_statement_follows_its_note_and_every_note_is_the_references_spelling() -> None:
    noted_cores = set()
    for family, key, forward, answer in _instances():
        lines = answer.splitlines()
        for i, line in enumerate(lines):
            text = line.strip()
            if text in POINT_STATEMENTS:
                assert lines[i - 1].strip().startswith("// "), (key, text)
            if text.startswith("// "):
                note = text[3:]
                after = lines[i + 1].strip()
                assert not after.startswith("//") and after, (key, note)  # a note names the next statement
                assert re.search(_as_pattern(note), forward), (key, note, forward)  # copied from the prompt
                if after not in POINT_STATEMENTS:
                    assert after.startswith(CORE_LINES), (key, after)
                    noted_cores.add(family)
    # the combining op, the reduction, argmax/argmin, softmax, the product and the loss are named too
    assert noted_cores == set(FAMILIES) - {"unary", "norm"}


def test_a_chains_notes_follow_the_reference_order_nested_or_not() -> None:
    comp = next(c for c in FAMILIES["unary"].compositions() if c.key == "unary:tanh>leaky_relu0p1>elu")
    forms = set()
    for seed in range(12):
        spec, kernel = FAMILIES["unary"].build(comp, random.Random(seed))
        notes = [n.strip()[3:] for n in NOTE.findall(kernel.source)]
        assert len(notes) == 3, notes
        assert "tanh" in notes[0] and "leaky_relu" in notes[1] and "elu" in notes[2], notes
        forms.add(len(spec.body))  # 1: nested in one return, 3: one statement per op
    assert forms == {1, 3}


def test_without_notes_only_the_note_lines_go_and_the_compute_is_the_same() -> None:
    for _, key, _, _ in _instances(6):
        family = FAMILIES[key.split(":")[0]]
        comp = next(c for c in family.compositions() if c.key == key)
        spec, kernel = family.build(comp, random.Random(3))
        bare = solution_file(spec, without_notes(kernel))
        noted = solution_file(spec, kernel)
        assert "//" not in bare
        assert [ln for ln in noted.splitlines() if not ln.strip().startswith("// ")] == bare.splitlines()
        assert compute_lines(bare) == compute_lines(noted)


def test_the_option_changes_only_the_answers_and_is_recorded(tmp_path: Path) -> None:
    from click.testing import CliRunner
    from cudice.model.train.cli import train_group

    common = ["--train-per-family", "6", "--heldout-per-family", "2", "--families", "unary,binary,reduce"]
    for arm, flag in (("on", "--op-comments"), ("off", "--no-op-comments")):
        result = CliRunner().invoke(train_group, ["corpus", "build", str(tmp_path / arm), *common, flag])
        assert result.exit_code == 0, result.output
    on, off = (json.loads((tmp_path / a / "manifest.json").read_text()) for a in ("on", "off"))
    assert (on["op_comments"], off["op_comments"]) == (True, False)
    assert on["families"] == off["families"] == ["binary", "reduce", "unary"]
    assert on["problems"] == off["problems"]
    default = CliRunner().invoke(train_group, ["corpus", "build", str(tmp_path / "default"), *common])
    assert json.loads(default.output)["op_comments"] is False  # off unless asked for
    for split in ("train", "heldout"):
        names = sorted(p.name for p in (tmp_path / "on" / "problems" / split).iterdir())
        assert names and names == sorted(p.name for p in (tmp_path / "off" / "problems" / split).iterdir())
        for name in names:
            ref = (tmp_path / "on" / "problems" / split / name).read_text()
            assert ref == (tmp_path / "off" / "problems" / split / name).read_text()
            with_notes = (tmp_path / "on" / "solutions" / split / name).read_text()
            plain = (tmp_path / "off" / "solutions" / split / name).read_text()
            assert "//" not in plain and NOTE.sub("", with_notes) == plain
    sft_on = [json.loads(x) for x in (tmp_path / "on" / "sft.jsonl").read_text().splitlines()]
    sft_off = [json.loads(x) for x in (tmp_path / "off" / "sft.jsonl").read_text().splitlines()]
    assert [r["prompt"] for r in sft_on] == [r["prompt"] for r in sft_off]
    assert all("\n        // " in r["response"] or "\n    // " in r["response"] for r in sft_on)
    with pytest.raises(ValueError, match="unknown families"):
        build_corpus(tmp_path / "x", train_per_family=1, families=("unary", "convolution"))


def test_noted_answers_pass_the_static_anti_cheat_stage(tmp_path: Path) -> None:
    from cudice.model.train.corpus.verify_templates import _static_verdict

    build_corpus(
        tmp_path, seed=5, train_per_family=10, heldout_per_family=1, heldout_sizes="small", op_comments=True
    )
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    seen: set[tuple[str, str]] = set()
    for p in manifest["problems"]:
        if (p["family"], p["variant"]) in seen:
            continue
        seen.add((p["family"], p["variant"]))
        answer = tmp_path / "solutions" / p["split"] / p["file"]
        bare_norm = p["family"] == "norm" and ">" not in p["composition"]  # no op to name
        assert bare_norm or "// " in answer.read_text(), p["file"]
        v = _static_verdict(answer, tmp_path / "problems" / p["split"] / p["file"])
        assert v["verdict"] == "static_ok", (p["file"], v)
    assert {f for f, _ in seen} == set(FAMILIES)


def test_same_compute_ignores_variant_names_and_notes_but_not_an_op() -> None:
    comp = next(c for c in FAMILIES["binary"].compositions() if c.key == "binary:add>relu")
    other = next(c for c in FAMILIES["binary"].compositions() if c.key == "binary:add>tanh")
    answers = {}
    for seed in range(10):
        spec, kernel = FAMILIES["binary"].build(comp, random.Random(seed))
        answers["fast" if "float4" in kernel.source else "plain"] = (spec, kernel)
    (spec, fast), (_, plain) = answers["fast"], answers["plain"]
    solution = solution_file(spec, fast)
    assert compute_lines(solution) == ["x + y;", "fmaxf(v, 0.0f);"]
    names = list(spec.params)
    assert score(solution_file(spec, without_notes(plain)), solution, "fused", names)["same_compute"]
    wrong = solution_file(*FAMILIES["binary"].build(other, random.Random(0)))
    assert not score(wrong, solution, "fused", names)["same_compute"]
    assert not score(None, solution, "fused", names)["same_compute"]


def test_the_ablations_guided_head_is_the_same_in_both_arms_and_its_region_is_the_templates() -> None:
    from cudice.model.train.corpus.ablate import compute_region, region_lines, region_span

    for family in ("unary", "binary"):
        for comp in random.Random(2).sample(FAMILIES[family].compositions(), 6):
            for seed in range(4):  # plain and fast variants
                spec, kernel = FAMILIES[family].build(comp, random.Random(seed))
                noted, bare = solution_file(spec, kernel), solution_file(spec, without_notes(kernel))
                head, want = compute_region(noted)
                assert (head, want) == compute_region(bare) and want == compute_lines(bare)
                assert region_lines(noted[len(head) :]) == want == region_lines(bare[len(head) :])
                assert region_lines(bare[len(head) :].replace(want[-1], "v * 3.0f;", 1)) != want
                for text in (noted, bare):  # the span the likelihood is read on: the region's lines
                    lo, hi = region_span(text)
                    assert lo == len(head) and compute_lines(text[lo:hi]) == want
                    assert text[hi:].startswith("\n") and not compute_lines(text[hi:].split("\n")[1])
                    assert text[lo:hi].count("// ") == (text is noted) * len(NOTE.findall(kernel.source))


def test_the_ablation_trains_on_end_to_end_pairs_only(tmp_path: Path) -> None:
    from cudice.model.train.corpus.ablate import e2e_pairs

    build_corpus(tmp_path, train_per_family=4, heldout_per_family=0, families=("unary",))
    n = e2e_pairs(tmp_path / "sft.jsonl", tmp_path / "e2e.jsonl")
    rows = [json.loads(x) for x in (tmp_path / "e2e.jsonl").read_text().splitlines()]
    assert n == len(rows) == 4 and all("(prefix)" not in r["prompt"] for r in rows)


def test_op_pairs_answer_a_training_reference_with_its_notes_and_statements_once(tmp_path: Path) -> None:
    from click.testing import CliRunner
    from cudice.model.train.cli import train_group
    from cudice.model.train.corpus.build import OPS_INSTRUCTION, op_program

    common = ["--train-per-family", "8", "--heldout-per-family", "2", "--families", "unary,binary,reduce"]
    args = ["corpus", "build", str(tmp_path / "c"), *common, "--op-comments", "--op-pairs-every", "2"]
    result = CliRunner().invoke(train_group, args)
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "c" / "manifest.json").read_text())
    rows = [json.loads(line) for line in (tmp_path / "c" / "sft.jsonl").read_text().splitlines()]
    op_rows = [r for r in rows if r["prompt"].startswith(OPS_INSTRUCTION)]
    assert manifest["op_pairs_every"] == 2 and manifest["num_op_pairs"] == len(op_rows) > 0
    assert manifest["num_sft_pairs"] == len(rows)
    by_reference: dict[str, str] = {}
    for split in ("train", "heldout"):
        for ref in sorted((tmp_path / "c" / "problems" / split).iterdir()):
            by_reference[ref.read_text().rstrip()] = f"{split}/{ref.name}"
    with_statements = 0
    for row in op_rows:
        reference = row["prompt"].split("```python\n", 1)[1].rsplit("\n```", 1)[0]
        where = by_reference[reference.rstrip()]
        split, name = where.split("/")
        assert split == "train" and int(name.split("_")[0]) % 2 == 0  # one training draw in 2
        solution = (tmp_path / "c" / "solutions" / split / name).read_text()
        body = row["response"].removeprefix("```cpp\n").removesuffix("```")
        lines = [line.strip() for line in body.splitlines()]
        assert lines[0].startswith("// ") and all(
            body_line.startswith("    ") for body_line in body.splitlines()
        )
        # every note of the answer and every statement that computes the value, in order, once
        notes = [ln.strip() for ln in solution.splitlines() if NOTE.match(ln + "\n")]
        assert [ln for ln in lines if ln.startswith("//")] == list(dict.fromkeys(notes))
        statements = [ln for ln in lines if not ln.startswith("//")]
        assert all(compute_lines(s) for s in statements)  # a reduction's note may stand alone
        with_statements += bool(statements)
        assert len(compute_lines(body)) == len(set(compute_lines(body)))
        assert set(compute_lines(body)) == set(compute_lines(solution))
    assert with_statements > len(op_rows) // 2
    # a noted solution that writes its sequence twice (plain and vectorised kernels) is read once
    twice = "    // F.relu(v)\n    v = fmaxf(v, 0.0f);\n" * 2
    assert op_program(twice) == "    // F.relu(v)\n    v = fmaxf(v, 0.0f);\n"
    assert op_program("    v = fmaxf(v, 0.0f);\n") == ""  # no notes: no op pair
    # the op pairs are made of notes; without them the build refuses, and they are off by default
    refused = CliRunner().invoke(
        train_group, ["corpus", "build", str(tmp_path / "x"), *common, "--op-pairs-every", "2"]
    )
    assert refused.exit_code != 0 and "needs op_comments" in refused.output
    plain = CliRunner().invoke(
        train_group, ["corpus", "build", str(tmp_path / "p"), *common, "--op-comments"]
    )
    assert json.loads(plain.output)["num_op_pairs"] == 0
