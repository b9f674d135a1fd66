"""The demo corpus: determinism, the split by composition and by answer text, variety, runnable
references, honest templates, no KernelBench text."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import pytest
from cudice.model.prompts import e2e_prompt, infill_prompt
from cudice.model.scaffold import split_scaffold
from cudice.model.train.corpus.build import INFILL_EVERY, build_corpus, fenced
from cudice.model.train.corpus.families import FAMILIES, Composition
from cudice.model.train.corpus.files import reference_file
from cudice.model.train.corpus.leak import check_corpus, find_leaks
from cudice.model.train.corpus.split import answer_signature, key_parts, split_compositions
from cudice.model.train.data import load_rl_tasks, load_sft

ROOT = Path(__file__).resolve().parents[4]


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
    "unary": {"relu", "sigmoid", "tanh", "gelu", "silu", "clamp1p0", "scale2p0"},
    "binary": {"add", "mul", "sub", "mul_add"},
    "reduce": {"sum", "mean", "amax", "amin", "pre=abs", "pre=square", "post=sqrt"},
    "argreduce": {"argmax", "argmin", "pre=abs"},
    "softmax": {"softmax", "log_softmax", "pre=scale0p5"},
    "norm": {"layer_norm", "rms_norm", "gelu"},
    "matmul": {"mm", "tA", "tB", "bias", "relu"},
    "loss": {"mse_loss", "huber_loss1p0", "hinge_loss", "bce_logits_loss", "log_cosh_loss", "sum"},
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
    assert {p.spec.style for p in problems} == {"cudice", "kernelbench", "bare"}
    assert len({p.spec.params[0] for p in problems}) >= 8, "argument names do not vary"
    assert any(p.spec.init_args for p in problems), "no constant is ever an __init__ argument"


def test_reductions_cover_ranks_one_to_four_and_every_dim_position() -> None:
    torch = pytest.importorskip("torch")
    seen: set[tuple[int, int]] = set()
    comps = FAMILIES["reduce"].compositions()
    rng = random.Random(1)
    for _ in range(300):
        spec, _ = FAMILIES["reduce"].build(rng.choice(comps), rng)
        scope: dict[str, object] = {}
        text = (
            reference_file(spec)
            .replace("torch.rand(", "torch.empty(")
            .replace("torch.randn(", "torch.empty(")
        )
        exec(compile(text, "reference.py", "exec"), scope)
        init = scope["get_init_inputs"]()  # type: ignore[operator]
        x = scope["get_inputs"]()[0]  # type: ignore[operator]
        dim = init[0] if init else int(spec.extra_args[0])
        seen.add((x.dim(), dim % x.dim()))
        assert isinstance(x, torch.Tensor)
    assert {r for r, _ in seen} == {1, 2, 3, 4}
    assert {(4, d) for d in range(4)} <= seen and {(3, d) for d in range(3)} <= seen


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


def test_no_held_out_answer_equals_a_training_answer_up_to_names_and_constants() -> None:
    from cudice.model.train.corpus.build import _signature, draw_problems

    problems = draw_problems(seed=5, train_per_family=40, heldout_per_family=6)
    train = [p for p in problems if p.split == "train"]
    held = [p for p in problems if p.split == "heldout"]
    assert len(held) == 6 * len(FAMILIES)
    texts = {p.solution.strip() for p in train}
    signatures = {_signature(p) for p in train}
    for p in held:
        assert p.solution.strip() not in texts
        assert _signature(p) not in signatures, p.file_name


def test_answer_signature_ignores_names_and_constants_but_not_ops() -> None:
    base = "k_ext.k_cuda(x, 1, 1e-5)\n    v = fmaxf(v, 0.0f);"
    assert answer_signature(base, "k", ["x"]) == answer_signature(
        base.replace("x,", "inp,").replace("1e-5", "1e-6").replace("(x", "(inp"), "k", ["inp"]
    )
    assert answer_signature(base, "k", ["x"]) != answer_signature(
        base.replace("fmaxf(v, 0.0f)", "tanhf(v)"), "k", ["x"]
    )


def test_the_kernelbench_leak_check_finds_markers_and_copied_files(corpus: Path, tmp_path: Path) -> None:
    assert check_corpus(corpus) == []
    kb = tmp_path / "KernelBench" / "level1"
    kb.mkdir(parents=True)
    copied = json.loads((corpus / "rl_e2e.jsonl").read_text().splitlines()[0])["pytorch_code"]
    (kb / "1_copied.py").write_text(copied)
    (kb / "2_other.py").write_text(
        "import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
        "        return torch.cumsum(x.flip(1), dim=1).flip(1)\n\nsizes_of_this_problem = (128, 4000)\n"
    )
    leaks = check_corpus(corpus, tmp_path / "KernelBench")
    assert leaks and {Path(leak.what).name for leak in leaks} == {"1_copied.py"}
    marked = find_leaks([("t", '"""\n    Simple model that performs a cumulative sum.\n    """')])
    assert [leak.what for leak in marked] == ["Simple model that performs"]


def test_training_files_load_with_the_trainers_readers_and_use_the_runtime_prompts(tmp_path: Path) -> None:
    # RL tasks from the SFT problems (`--rl-source train`), whose prompts SFT uses too; the RL pool's
    # files: tests/model/train/corpus/test_corpus_rl_pool.py
    corpus = tmp_path
    build_corpus(corpus, seed=3, train_per_family=12, heldout_per_family=2, rl_source="train")
    pairs = load_sft(corpus / "sft.jsonl")
    e2e = load_rl_tasks(corpus / "rl_e2e.jsonl", "e2e")
    infill = load_rl_tasks(corpus / "rl_infill.jsonl", "infill")
    num_train = 12 * len(FAMILIES)
    assert len(e2e) == len(infill) == -(-num_train // INFILL_EVERY)
    assert len(pairs) == num_train + len(infill)
    assert [t.level for t in e2e] == sorted(t.level for t in e2e)
    first = json.loads((corpus / "rl_infill.jsonl").read_text().splitlines()[0])
    assert first["prefix"] + first["middle"] + first["suffix"] == first["cuda_code"]
    scaffold = split_scaffold(first["cuda_code"])
    assert (scaffold.prefix, scaffold.middle) == (first["prefix"], first["middle"])
    by_prompt = {p["prompt"]: p["response"] for p in pairs}
    # the end-to-end answer is the solution file (generic names); the infilling answer is the
    # same file in the scaffold's names (tests/model/train/corpus/test_corpus_names.py)
    row = json.loads((corpus / "manifest.json").read_text())["problems"][0]
    solution = (corpus / "solutions" / "train" / row["file"]).read_text()
    assert by_prompt[e2e_prompt(first["pytorch_code"])] == fenced(solution)
    assert by_prompt[infill_prompt(first["pytorch_code"], first["prefix"], first["suffix"])] == fenced(
        first["cuda_code"]
    )


def _one_per_kernel(corpus: Path, by_variant: bool = False) -> list[dict[str, str]]:
    manifest = json.loads((corpus / "manifest.json").read_text())
    seen, rows = set(), []
    for p in manifest["problems"]:
        kind = (p["family"], p["composition"].split(":")[1].split(">")[0], by_variant and p["variant"])
        if kind not in seen:
            seen.add(kind)
            rows.append(p)
    return rows


def _run_reference(path: Path, device: str = "cpu") -> tuple[list[object], object]:
    """(inputs, output) of a reference file; on "meta" only shapes and dtypes are computed."""
    torch = pytest.importorskip("torch")
    scope: dict[str, object] = {}
    exec(compile(path.read_text(), path.name, "exec"), scope)
    with torch.device(device):
        inputs = scope["get_inputs"]()  # type: ignore[operator]
        model = scope["Model"](*scope["get_init_inputs"]())  # type: ignore[operator]
        return inputs, model(*inputs)


def test_references_run_on_cpu_and_match_their_stated_dtype(corpus: Path) -> None:
    torch = pytest.importorskip("torch")
    rows = _one_per_kernel(corpus)
    assert {"timed", "small"} <= {p["sizes"] for p in rows}
    for p in rows:
        # timed references (up to 256 MiB of inputs) run on the meta device: shapes and dtypes only
        timed = p["sizes"] == "timed"
        inputs, out = _run_reference(corpus / "problems" / p["split"] / p["file"], "meta" if timed else "cpu")
        assert isinstance(out, torch.Tensor), p["file"]
        assert timed or torch.isfinite(out.float()).all(), p["file"]
        assert str(inputs[0].dtype) == f"torch.{p['dtype']}", p["file"]  # type: ignore[attr-defined]


def test_timed_sizes_take_16m_elements_or_2_to_the_32_multiply_adds_and_at_most_256_mib() -> None:
    torch = pytest.importorskip("torch")
    from cudice.model.train.corpus.families import TIMED_MAX_BYTES, TIMED_MIN_NUMEL

    rng = random.Random(2)
    for name, family in FAMILIES.items():
        comps = family.compositions()
        for _ in range(12):
            spec, _ = family.build(rng.choice(comps), rng, True)
            scope: dict[str, object] = {}
            exec(compile(reference_file(spec), "reference.py", "exec"), scope)
            with torch.device("meta"):
                inputs = scope["get_inputs"]()  # type: ignore[operator]
            total = sum(t.numel() * t.element_size() for t in inputs)
            assert total <= TIMED_MAX_BYTES, (name, spec.sizes)
            if name == "matmul":
                m, k, n = (int(v) for _, v in spec.sizes)
                assert min(m, k, n) >= 1024 and m * k * n >= 1 << 32, spec.sizes
            else:
                assert inputs[0].numel() >= TIMED_MIN_NUMEL, (name, spec.sizes)
                assert min(inputs[0].shape) >= 16, (name, spec.sizes)


def test_held_out_problems_are_timed_by_default_and_small_on_request(tmp_path: Path) -> None:
    from cudice.model.train.corpus.build import draw_problems

    timed = draw_problems(seed=1, train_per_family=30, heldout_per_family=1)
    assert all(p.timed for p in timed if p.split == "heldout")
    share = sum(p.timed for p in timed if p.split == "train") / (30 * len(FAMILIES))
    assert 0.2 < share < 0.5, share
    small = draw_problems(seed=1, train_per_family=2, heldout_per_family=1, heldout_sizes="small")
    assert not any(p.timed for p in small if p.split == "heldout")
    with pytest.raises(ValueError, match="heldout_sizes"):
        draw_problems(seed=1, train_per_family=1, heldout_per_family=1, heldout_sizes="huge")


def test_single_ops_and_two_op_chains_are_well_represented_with_varied_size_names() -> None:
    from cudice.model.train.corpus.build import draw_problems

    per_family = 300
    problems = draw_problems(seed=0, train_per_family=per_family, heldout_per_family=0)
    lengths = {c.key: c.length for f in FAMILIES.values() for c in f.compositions()}
    for family in FAMILIES:
        mine = [lengths[p.spec.composition] for p in problems if p.spec.family == family]
        assert sum(n == 1 for n in mine) >= 0.05 * per_family, family
        if any(n == 2 for n in lengths.values()) and family != "loss":
            assert sum(n == 2 for n in mine) >= 0.2 * per_family, family
    relu = [p for p in problems if p.spec.composition == "unary:relu"]
    softmax = [p for p in problems if p.spec.composition == "softmax:pre=none>softmax"]
    assert len(relu) >= 5 and len(softmax) >= 20
    assert any(
        [n for n, _ in p.spec.sizes] == ["batch_size", "dim"] and p.spec.extra_args[0] in ("1", "-1")
        for p in softmax
    ), "no softmax over dim 1 of a (batch_size, dim) tensor"
    names_2d = {
        tuple(n for n, _ in p.spec.sizes)
        for p in problems
        if len(p.spec.sizes) == 2 and p.spec.family != "matmul"
    }
    assert len(names_2d) >= 8, names_2d


def test_the_corpus_holds_plain_and_fast_answers_and_the_fast_ones_say_how() -> None:
    from cudice.model.train.corpus.build import draw_problems

    problems = draw_problems(seed=4, train_per_family=40, heldout_per_family=0)
    for family in ("unary", "binary", "reduce", "softmax", "norm", "loss"):
        variants = {p.fast for p in problems if p.spec.family == family}
        assert variants == {True, False}, family
    for p in problems:
        if p.fast and p.spec.family in ("unary", "binary"):
            src = p.solution
            assert "float4" in src and "n % 4 == 0" in src and "aligned16(" in src
            assert "torch::kFloat32" in src and "AT_DISPATCH_FLOATING_TYPES_AND2" in src  # the fallback
        elif p.fast:
            assert "__shfl_down_sync" in p.solution and "sh[threadIdx.x + s]" not in p.solution
        else:
            assert "__shfl_down_sync" not in p.solution and "float4" not in p.solution


def test_template_solutions_pass_the_static_anti_cheat_stage(corpus: Path) -> None:
    from cudice.model.train.corpus.verify_templates import _static_verdict

    rows = _one_per_kernel(corpus, by_variant=True)
    assert {r["family"] for r in rows} == set(FAMILIES)
    assert {r["variant"] for r in rows} == {"plain", "fast"}
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


@pytest.mark.parametrize(
    "example,family,key",
    [("relu.py", "unary", "unary:relu"), ("softmax.py", "softmax", "softmax:pre=none>softmax")],
)
def test_bundled_examples_compositions_are_trained_and_their_layout_is_a_style(
    example: str, family: str, key: str
) -> None:
    train, _ = split_compositions(FAMILIES[family].compositions())
    assert key in {c.key for c in train}
    comp: Composition = next(c for c in train if c.key == key)
    text = (ROOT / "examples" / example).read_text()
    for seed in range(400):
        spec, _ = FAMILIES[family].build(comp, random.Random(seed))
        if spec.style == "cudice" and spec.params == ("x",):
            mine = reference_file(spec)
            shared = ("class Model(nn.Module):", "def get_init_inputs():", "super().__init__()")
            assert all(line in mine and line in text for line in shared)
            assert mine.startswith('"""KernelBench-format reference: ') and text.startswith(
                '"""KernelBench-format reference: '
            )
            return
    raise AssertionError(f"no cudice-style instance of {key}")


def test_cudice_train_corpus_build_writes_the_files_sft_reads(tmp_path: Path) -> None:
    from click.testing import CliRunner
    from cudice.model.train.cli import train_group

    result = CliRunner().invoke(
        train_group,
        ["corpus", "build", str(tmp_path), "--train-per-family", "1", "--heldout-per-family", "0"],
    )
    assert result.exit_code == 0, result.output
    expected = len(FAMILIES) + -(-len(FAMILIES) // INFILL_EVERY)
    assert json.loads(result.output)["num_sft_pairs"] == expected
    assert len(load_sft(tmp_path / "sft.jsonl")) == expected


def test_infill_every_sets_the_share_of_training_problems_with_an_infilling_pair(tmp_path: Path) -> None:
    two = ("unary", "binary")
    manifest = build_corpus(
        tmp_path / "c",
        train_per_family=5,
        heldout_per_family=0,
        families=two,
        infill_every=2,
        rl_source="train",
    )
    num_train = manifest["num_problems"]["train"]
    infill = (tmp_path / "c" / "rl_infill.jsonl").read_text().splitlines()
    assert manifest["infill_every"] == 2 and num_train == 10
    assert len(infill) == 5 and manifest["num_sft_pairs"] == num_train + 5
    with pytest.raises(ValueError, match="infill_every=0 must be >= 1"):
        build_corpus(tmp_path / "d", train_per_family=5, heldout_per_family=0, infill_every=0)
    assert not (tmp_path / "d").exists()  # refused before anything was written
