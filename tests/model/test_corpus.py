"""The demo corpus: determinism, the split by composition, runnable references, honest templates."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import pytest
from cudice.model.prompts import e2e_prompt, infill_prompt
from cudice.model.scaffold import split_scaffold
from cudice.model.train.corpus.build import build_corpus, fenced
from cudice.model.train.corpus.families import FAMILIES, Composition
from cudice.model.train.corpus.files import reference_file
from cudice.model.train.corpus.split import key_parts, split_compositions
from cudice.model.train.data import load_rl_tasks, load_sft

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("corpus")
    build_corpus(out, seed=3, train_per_family=12, heldout_per_family=2)
    return out


def _digest(folder: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(folder.rglob("*")):
        if f.is_file():
            h.update(f.relative_to(folder).as_posix().encode() + f.read_bytes())
    return h.hexdigest()


def test_same_seed_same_bytes_other_seed_other_instances(tmp_path: Path, corpus: Path) -> None:
    build_corpus(tmp_path / "again", seed=3, train_per_family=12, heldout_per_family=2)
    assert _digest(tmp_path / "again") == _digest(corpus)
    build_corpus(tmp_path / "other", seed=4, train_per_family=12, heldout_per_family=2)
    assert (tmp_path / "other" / "sft.jsonl").read_bytes() != (corpus / "sft.jsonl").read_bytes()


def test_at_least_eight_families_each_with_held_out_compositions() -> None:
    assert len(FAMILIES) >= 8
    for name, family in FAMILIES.items():
        train, held = split_compositions(family.compositions())
        assert held, f"{name} holds nothing out"
        assert {c.key for c in train}.isdisjoint(c.key for c in held)
        known = set().union(*(key_parts(c.key) for c in train))
        for c in held:
            assert not c.protected
            assert key_parts(c.key) <= known, f"{c.key} uses a part never trained on"


# What the corpus must cover: family -> parts at least one of its compositions combines
REQUIRED_PARTS = {
    "unary": {"relu", "sigmoid", "tanh", "gelu", "silu"},
    "binary": {"add", "mul", "sub"},
    "reduce": {"sum", "mean", "max"},
    "argreduce": {"argmax"},
    "softmax": {"softmax", "log_softmax"},
    "norm": {"layer_norm", "rms_norm"},
    "matmul": {"plain", "bias", "relu"},
    "loss": {"mse_loss", "huber_loss1p0", "hinge_loss"},
}


def test_families_cover_the_named_operators_with_varied_shapes_and_dtypes() -> None:
    from cudice.model.train.corpus.build import draw_problems

    for family, parts in REQUIRED_PARTS.items():
        have = set().union(*(key_parts(c.key) for c in FAMILIES[family].compositions()))
        assert parts <= have, f"{family} lacks {sorted(parts - have)}"
    problems = draw_problems(seed=0, train_per_family=40, heldout_per_family=0)
    for family in FAMILIES:
        shapes = {p.spec.sizes for p in problems if p.spec.family == family}
        assert len(shapes) > 1, f"{family}: one shape only"
    dtypes = {p.spec.dtype for p in problems}
    assert {"float32", "float16", "bfloat16"} <= dtypes


def test_split_ignores_the_seed_and_held_out_never_reaches_training_files(
    corpus: Path, tmp_path: Path
) -> None:
    manifest = json.loads((corpus / "manifest.json").read_text())
    other = build_corpus(tmp_path / "o", seed=11, train_per_family=2, heldout_per_family=1)
    assert other["compositions"] == manifest["compositions"]
    held_keys = {p["composition"] for p in manifest["problems"] if p["split"] == "heldout"}
    train_keys = {p["composition"] for p in manifest["problems"] if p["split"] == "train"}
    assert held_keys and held_keys.isdisjoint(train_keys)
    held_refs = [
        (corpus / "problems" / "heldout" / p["file"]).read_text()
        for p in manifest["problems"]
        if p["split"] == "heldout"
    ]
    sft = (corpus / "sft.jsonl").read_text()
    rl = (corpus / "rl_e2e.jsonl").read_text() + (corpus / "rl_infill.jsonl").read_text()
    for ref in held_refs:
        assert json.dumps(ref)[1:-1] not in sft and json.dumps(ref)[1:-1] not in rl


def test_training_files_load_with_the_trainers_readers_and_use_the_runtime_prompts(corpus: Path) -> None:
    pairs = load_sft(corpus / "sft.jsonl")
    e2e = load_rl_tasks(corpus / "rl_e2e.jsonl", "e2e")
    infill = load_rl_tasks(corpus / "rl_infill.jsonl", "infill")
    assert len(pairs) == 2 * len(e2e) == 2 * len(infill) == 2 * 12 * len(FAMILIES)
    assert [t.level for t in e2e] == sorted(t.level for t in e2e)
    first = json.loads((corpus / "rl_infill.jsonl").read_text().splitlines()[0])
    assert first["prefix"] + first["middle"] + first["suffix"] == first["cuda_code"]
    scaffold = split_scaffold(first["cuda_code"])
    assert (scaffold.prefix, scaffold.middle) == (first["prefix"], first["middle"])
    by_prompt = {p["prompt"]: p["response"] for p in pairs}
    assert by_prompt[e2e_prompt(first["pytorch_code"])] == fenced(first["cuda_code"])
    assert by_prompt[infill_prompt(first["pytorch_code"], first["prefix"], first["suffix"])] == fenced(
        first["cuda_code"]
    )


def _one_per_kernel(corpus: Path) -> list[dict[str, str]]:
    manifest = json.loads((corpus / "manifest.json").read_text())
    seen, rows = set(), []
    for p in manifest["problems"]:
        kind = (p["family"], p["composition"].split(":")[1].split(">")[0])
        if kind not in seen:
            seen.add(kind)
            rows.append(p)
    return rows


def test_references_run_on_cpu_and_match_their_stated_dtype(corpus: Path) -> None:
    torch = pytest.importorskip("torch")
    for p in _one_per_kernel(corpus):
        scope: dict[str, object] = {}
        exec(compile((corpus / "problems" / p["split"] / p["file"]).read_text(), p["file"], "exec"), scope)
        inputs = scope["get_inputs"]()  # type: ignore[operator]
        model = scope["Model"](*scope["get_init_inputs"]())  # type: ignore[operator]
        out = model(*inputs)
        assert isinstance(out, torch.Tensor) and torch.isfinite(out.float()).all(), p["file"]
        assert str(inputs[0].dtype) == f"torch.{p['dtype']}", p["file"]


def test_template_solutions_pass_the_static_anti_cheat_stage(corpus: Path) -> None:
    from cudice.model.train.corpus.verify_templates import _static_verdict

    rows = _one_per_kernel(corpus)
    assert {r["family"] for r in rows} == set(FAMILIES)
    for p in rows:
        v = _static_verdict(
            corpus / "solutions" / p["split"] / p["file"], corpus / "problems" / p["split"] / p["file"]
        )
        assert v["verdict"] == "static_ok", (p["file"], v)


def test_a_pytorch_fallback_in_a_template_would_be_caught(corpus: Path, tmp_path: Path) -> None:
    """The static check above can fail: the same file with torch doing the work is a violation."""
    from cudice.model.train.corpus.verify_templates import _static_verdict

    p = _one_per_kernel(corpus)[0]
    text = (corpus / "solutions" / p["split"] / p["file"]).read_text()
    body = text.rsplit("        return ", 1)
    cheat = tmp_path / p["file"]
    cheat.write_text(body[0] + "        return torch.relu(x)\n")
    assert (
        _static_verdict(cheat, corpus / "problems" / p["split"] / p["file"])["verdict"] == "static_violation"
    )


def _find_instance(family: str, key: str, sizes: tuple[tuple[str, int], ...]) -> str:
    comp: Composition = next(c for c in FAMILIES[family].compositions() if c.key == key)
    for seed in range(20000):
        spec, _ = FAMILIES[family].build(comp, random.Random(seed))
        if spec.sizes == sizes and spec.dtype == "float32":
            return reference_file(spec)
    raise AssertionError(f"no instance of {key} with {sizes}")


@pytest.mark.parametrize(
    "example,family,key",
    [("relu.py", "unary", "unary:relu"), ("softmax.py", "softmax", "softmax:softmax:r2d1")],
)
def test_bundled_examples_are_in_the_training_distribution(example: str, family: str, key: str) -> None:
    train, _ = split_compositions(FAMILIES[family].compositions())
    assert key in {c.key for c in train}
    text = _find_instance(family, key, (("batch_size", 16), ("dim", 16384)))
    assert text == (ROOT / "examples" / example).read_text()


def test_cudice_train_corpus_build_writes_the_files_sft_reads(tmp_path: Path) -> None:
    from click.testing import CliRunner
    from cudice.model.train.cli import train_group

    result = CliRunner().invoke(
        train_group,
        ["corpus", "build", str(tmp_path), "--train-per-family", "1", "--heldout-per-family", "0"],
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["num_sft_pairs"] == 2 * len(FAMILIES)
    assert len(load_sft(tmp_path / "sft.jsonl")) == 2 * len(FAMILIES)
