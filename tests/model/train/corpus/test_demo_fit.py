"""The demo recipe's pieces: the time-based schedule, length batches, held-out scoring, the
line-level tokenizer and the checkpoint parts — each on tiny stand-ins."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from cudice.model.train.corpus.fit import (
    FitConfig,
    encode_all,
    focus_spans,
    length_batches,
    lr_factor,
    train_seconds,
)
from cudice.model.train.corpus.heldout import defines_model_new, names_agree, score, summarise, wilson
from cudice.model.train.corpus.recipe_fit import join_parts, split_file

SOLUTION = (
    "import torch\nimport torch.nn as nn\n\nrelu_source = '''v = fmaxf(v, 0.0f);'''\n\n\n"
    "class ModelNew(nn.Module):\n    def forward(self, x):\n        return relu_ext.relu_cuda(x, 1e-5)\n"
)


def test_schedule_warms_up_then_decays_to_the_floor_exactly_at_the_budget() -> None:
    config = FitConfig(seconds=100.0, warmup_seconds=10.0, min_lr_ratio=0.1)
    assert lr_factor(1.0, config) == pytest.approx(0.1)
    assert lr_factor(10.0, config) == pytest.approx(1.0)
    mid = lr_factor(55.0, config)
    assert 0.1 < mid < 1.0 and mid == pytest.approx(0.55)
    assert lr_factor(100.0, config) == pytest.approx(0.1)
    assert lr_factor(1000.0, config) == pytest.approx(0.1)
    with pytest.raises(ValueError, match="tokens_per_batch"):
        FitConfig(seconds=1.0, tokens_per_batch=10, max_length=100)


def test_the_budget_includes_loading_and_encoding_and_the_schedule_ends_with_it() -> None:
    # A 10x corpus took 108 s of a 445 s budget to encode; the steps then ran the full 445 s
    # and the held-out scoring after them found its deadline gone.
    config = FitConfig(seconds=445.0, warmup_seconds=15.0, min_lr_ratio=0.1)
    left = train_seconds(config, 108.0)
    assert left.seconds == pytest.approx(337.0)
    assert left.warmup_seconds == 15.0 and left.learning_rate == config.learning_rate
    assert lr_factor(337.0, left) == pytest.approx(0.1)  # the floor when the whole budget is spent
    assert lr_factor(229.0, left) > 0.1
    assert train_seconds(FitConfig(seconds=20.0, warmup_seconds=15.0), 4.0).warmup_seconds == 8.0
    with pytest.raises(ValueError, match="loading and encoding took 430 s of the 445 s"):
        train_seconds(config, 430.0)


def test_the_focus_weight_marks_the_answer_tokens_of_the_lines_that_compute() -> None:
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast.from_pretrained(
        str(Path(__file__).parents[4] / "model" / "assets" / "demo")
    )
    answer = (
        'k = """\n__global__ void f(const float* x, float* out, int n) {\n'
        "    float v = static_cast<float>(x[i]);\n    v = fmaxf(v, 0.0f);\n    v = v * 0.5f;  // scale\n"
        '    out[i] = v;\n}"""\n'
    )
    spans = focus_spans(answer)
    assert [answer[a:b].strip() for a, b in spans] == ["v = fmaxf(v, 0.0f);", "v = v * 0.5f;  // scale"]
    records = [{"prompt": "class Model: relu then scale", "response": answer}]
    [(ids, num_prompt, marked)] = encode_all(tok, records, 4, 0, focus=True)
    assert marked and min(marked) >= num_prompt and len(ids) % 4 == 0
    text = tok.decode([ids[i] for i in marked])
    assert "fmaxf(v, 0.0f);" in text and "v * 0.5f;" in text
    assert "static_cast" not in text and "out[i]" not in text and "__global__" not in text
    assert encode_all(tok, records, 4, 0) == [(ids, num_prompt, ())]
    noted = answer.replace("    v = fmaxf", "    // torch.relu(v)\n    v = fmaxf").replace(
        "    out[i]", "    // store\n    out[i]"
    )
    assert [noted[a:b].strip() for a, b in focus_spans(noted)] == [
        "// torch.relu(v)",
        "v = fmaxf(v, 0.0f);",
        "v = v * 0.5f;  // scale",
    ]
    with pytest.raises(ValueError, match="focus_weight"):
        FitConfig(seconds=1.0, focus_weight=0.5)


def test_encoding_line_by_line_gives_the_whole_texts_ids_and_focus_marks(tmp_path: Path) -> None:
    import json

    from cudice.model.prompts import chat_prompt
    from cudice.model.train.corpus.build import build_corpus
    from cudice.model.train.corpus.fit import cuts_at_newlines, encode_by_lines, encode_whole
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast.from_pretrained(
        str(Path(__file__).parents[4] / "model" / "assets" / "demo")
    )
    assert cuts_at_newlines(tok)
    build_corpus(tmp_path, seed=5, train_per_family=3, heldout_per_family=1, op_comments=True)
    records = [json.loads(line) for line in (tmp_path / "sft.jsonl").read_text().splitlines()]
    texts = [chat_prompt(r["prompt"]) for r in records] + [r["response"] + "<|im_end|>" for r in records]
    texts += [
        "",
        "\n",
        "a\n\nb\n",
        "\n    v = fmaxf(v, 0.0f);\n\n",
        "x\r\n    v = -v;\r\n",
        "é\n  v = v * 2.0f;<|im_end|>",
        "    // torch.relu(v)\n    v = fmaxf(v, 0.0f);\n    // F.gelu(v)\n\n    v = -v;\n",
        "// a\n// b\n    float v = x + y;\n    // after\n",
    ]
    whole, by_lines = encode_whole(tok, texts, True), encode_by_lines(tok, texts, True)
    assert by_lines == whole
    assert sum(len(marks) for _, marks in whole) > len(records) // 2  # answers do mark their op lines
    # the op notes above the op lines are marked with them; a comment above no op line is not
    noted = [tok.decode([ids[j] for j in marks]) for ids, marks in by_lines[-2:]]
    assert "torch.relu(v)" in noted[0] and "F.gelu" not in noted[0] and "-v" in noted[0]
    assert "// b" in noted[1] and "// a" not in noted[1] and "after" not in noted[1]
    # a tokenizer that does not cut at newlines first keeps the whole-text path
    spec = tok.backend_tokenizer.to_str().replace('"behavior":"MergedWithNext"', '"behavior":"Isolated"')
    plain = PreTrainedTokenizerFast(tokenizer_object=type(tok.backend_tokenizer).from_str(spec))
    assert not cuts_at_newlines(plain)


def test_length_batches_cover_every_sample_once_within_the_token_budget() -> None:
    rng = random.Random(0)
    lengths = [rng.randrange(8, 400) for _ in range(500)]
    batches = length_batches(lengths, 2000, random.Random(1))
    flat = sorted(i for b in batches for i in b)
    assert flat == list(range(500))
    for b in batches:
        assert len(b) * max(lengths[i] for i in b) <= 2000 or len(b) == 1


def test_wilson_interval_matches_known_values() -> None:
    lo, hi = wilson(8, 16)
    assert lo == pytest.approx(0.280, abs=1e-3) and hi == pytest.approx(0.720, abs=1e-3)
    assert wilson(0, 0) == (0.0, 1.0)
    assert wilson(150, 150)[1] == pytest.approx(1.0)


def test_scoring_parses_exact_and_same_kernel_up_to_names_and_constants() -> None:
    assert defines_model_new(SOLUTION) and not defines_model_new("class Model:\n  pass\n")
    assert not defines_model_new("def (:")
    row = score(SOLUTION, SOLUTION, "relu", ["x"])
    assert (row["answered"], row["parses"], row["exact"], row["same_kernel"]) == (True, True, True, True)
    renamed = SOLUTION.replace("(self, x)", "(self, inp)").replace("(x, 1e-5)", "(inp, 1e-6)")
    row = score(renamed, SOLUTION, "relu", ["x", "inp"])
    assert row["parses"] and not row["exact"] and row["same_kernel"]
    other = score(SOLUTION.replace("fmaxf(v, 0.0f)", "tanhf(v)"), SOLUTION, "relu", ["x"])
    assert other["parses"] and not other["same_kernel"]
    assert score(None, SOLUTION, "relu", ["x"])["parses"] is False
    rows = [
        {"family": "unary", "style": "bare", **score(SOLUTION, SOLUTION, "relu", ["x"])},
        {"family": "loss", "style": "bare", **score("x = (", SOLUTION, "relu", ["x"])},
    ]
    summary = summarise(rows)
    assert summary["all"]["parses"]["k"] == 1 and summary["family"]["unary"]["exact"]["rate"] == 1.0


WIRED = """from torch.utils.cpp_extension import load_inline
k_source = \"\"\"
__global__ void k_kernel(float* x) {}
torch::Tensor k_cuda(torch::Tensor x) { k_kernel<<<1, 1>>>(x); return x; }
\"\"\"
k_cpp_source = "torch::Tensor k_cuda(torch::Tensor x);"
k_ext = load_inline(name="k", cpp_sources=k_cpp_source, cuda_sources=k_source, functions=["k_cuda"])


class ModelNew:
    def forward(self, x):
        return k_ext.k_cuda(x)
"""


def test_names_agree_only_when_the_extension_is_wired_up() -> None:
    assert names_agree(WIRED)
    assert not names_agree(WIRED.replace('functions=["k_cuda"]', 'functions=["j_cuda"]'))
    assert not names_agree(WIRED.replace("k_kernel<<<", "j_kernel<<<"))
    assert not names_agree(WIRED.replace("cuda_sources=k_source", "cuda_sources=j_source"))
    assert not names_agree(WIRED.replace("return k_ext.k_cuda(x)", "return k_ext.j_cuda(x)"))


def test_line_tokenizer_round_trips_and_keeps_names_apart_from_their_line() -> None:
    pytest.importorskip("tokenizers")
    from cudice.model.train.corpus.init_model import line_bpe_tokenizer

    lines = [
        f"\n{name}_source = load(x)\n    v = fmaxf(v, 0.0f);\n    out[i] = v;\n"
        for name in ("relu", "abs_tanh", "sum_reduce", "gelu_clamp1p0") * 30
    ]
    tok = line_bpe_tokenizer(iter(lines), 400)
    text = "\nnew_kernel_name_source = load(x)\n    v = fmaxf(v, 0.0f);\n"
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids) == text
    pieces = [tok.decode([i]) for i in ids]
    assert "\n    v = fmaxf(v, 0.0f);" in pieces, pieces  # a recurring line is one token
    assert not any("new" in p and "load" in p for p in pieces), pieces  # the name is cut out


def test_checkpoint_parts_join_back_byte_identical(tmp_path: Path) -> None:
    blob = bytes(random.Random(0).randrange(256) for _ in range(10_000))
    path = tmp_path / "demo.tar"
    path.write_bytes(blob)
    parts = split_file(path, part_bytes=3000)
    assert [p.name for p in parts] == [f"demo.tar.part{k:02d}" for k in range(4)]
    assert not path.exists()
    assert join_parts(parts[0], tmp_path / "joined.tar").read_bytes() == blob


def test_an_eval_row_is_fast_only_when_correct_and_its_pessimistic_speedup_clears_the_bar() -> None:
    from cudice.model.train.corpus.evaluate import is_fast_row

    assert is_fast_row({"verdict": "correct", "speedup": 2.0, "speedup_min": 1.5})
    assert not is_fast_row({"verdict": "correct", "speedup": 2.0, "speedup_min": 0.9})  # within its spread
    assert not is_fast_row({"verdict": "correct", "speedup": None, "speedup_min": None})  # unresolved
    assert not is_fast_row({"verdict": "incorrect", "speedup": 3.0, "speedup_min": 2.0})
    assert is_fast_row({"verdict": "correct", "speedup": 3.0}, 2.0) and not is_fast_row(
        {"verdict": "correct", "speedup": 1.5}, 2.0
    )


def test_first_per_family_takes_the_first_problems_of_each_family_in_order() -> None:
    from cudice.model.train.corpus.recipe_fit import first_per_family

    rows = [{"family": f} for f in ("a", "b", "a", "a", "c", "b", "b")]
    assert first_per_family(rows, 2) == [0, 1, 2, 4, 5]
    assert first_per_family(rows, 0) == []


def test_infill_answers_are_the_editors_infill_of_each_scaffold(tiny_sdar_dir: Path) -> None:
    """`generate_infill` in one batch gives, per scaffold, the file `Engine.infill` writes for it
    alone: the wrapper kept byte for byte around the model's middle."""
    import time

    from cudice.model.config import SamplerConfig
    from cudice.model.engine import load_engine
    from cudice.model.scaffold import split_scaffold
    from cudice.model.train.corpus.heldout import generate_infill

    examples = Path(__file__).resolve().parents[4] / "examples"
    tasks = []
    for name in ("relu", "softmax"):
        scaffold = split_scaffold((examples / f"{name}_cuda.py").read_text())
        tasks.append(((examples / f"{name}.py").read_text(), scaffold.prefix, scaffold.suffix))
    said: list[str] = []
    answers, speed = generate_infill(str(tiny_sdar_dir), tasks, 24, time.monotonic() + 600, said.append)
    engine = load_engine(str(tiny_sdar_dir), fast=False, freeze=True)
    for (ref, prefix, suffix), answer in zip(tasks, answers, strict=True):
        alone = engine.infill(prefix, suffix, ref, SamplerConfig(max_new_tokens=24, temperature=0.0))
        assert answer == alone.text
        assert answer is not None and answer.startswith(prefix) and answer.endswith(suffix)
    assert speed["tokens"] > 0 and len(said) == 1 and said[0].startswith("infill: 2/2 answers, ")
    late, _ = generate_infill(str(tiny_sdar_dir), tasks, 24, time.monotonic() - 1, said.append)
    assert late == [None, None] and said[-1] == "infill: deadline reached after 0 of 2 answers"


def test_external_problems_are_answered_end_to_end_and_become_verification_items(
    tiny_sdar_dir: Path, tmp_path: Path
) -> None:
    """`recipe_fit --problems DIR`: one answer per reference of DIR (sorted), the `ModelNew` count
    in the results, every answer in external_answers.jsonl, and an item per file for step 7."""
    import json
    import time

    from cudice.model.train.corpus.heldout import generate
    from cudice.model.train.corpus.recipe_fit import Clock, external_items

    examples = Path(__file__).resolve().parents[4] / "examples"
    folder = tmp_path / "kb"
    folder.mkdir()
    for name in ("softmax", "relu"):
        (folder / f"{name}.py").write_text((examples / f"{name}.py").read_text())
    (folder / "notes.txt").write_text("not a reference")
    clock, results = Clock(tmp_path / "out", 10.0), {}
    items = external_items(folder, str(tiny_sdar_dir), 16, clock, 0.0, results, tmp_path / "out")
    assert [i["file"] for i in items] == ["ext_relu.py", "ext_softmax.py"]
    assert {i["kind"] for i in items} == {"external"} and [i["family"] for i in items] == ["relu", "softmax"]
    assert items[0]["reference"] == (examples / "relu.py").read_text()
    alone, _ = generate(
        str(tiny_sdar_dir), [(examples / "relu.py").read_text()], 16, time.monotonic() + 600, print
    )
    assert items[0]["answer"] == alone[0]  # the same greedy answer as generating it alone
    assert results["external"]["n"] == 2 and 0 <= results["external"]["model_new"] <= 2
    written = [
        json.loads(ln) for ln in (tmp_path / "out" / "external_answers.jsonl").read_text().splitlines()
    ]
    assert [(w["file"], w["answer"]) for w in written] == [
        ("relu.py", items[0]["answer"]),
        ("softmax.py", items[1]["answer"]),
    ]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert external_items(empty, str(tiny_sdar_dir), 16, clock, 0.0, results, tmp_path / "out") == []
    assert "no *.py reference there" in (tmp_path / "out" / "fit.log").read_text()


def test_reached_verdicts_read_back_what_a_stopped_eval_wrote(tmp_path: Path) -> None:
    from cudice.model.train.corpus.evaluate import is_fast_row
    from cudice.model.train.corpus.recipe_fit import reached_verdicts
    from cudice.verifier.eval.report import write_problem
    from cudice.verifier.source.result import Stage, Verdict, VerifyResult

    assert reached_verdicts(tmp_path / "never_written") == {}
    write_problem(
        tmp_path,
        "1_fast.py",
        VerifyResult(Verdict.CORRECT, Stage.TIMING, "c.py", speedup=2.0, speedup_min=1.5),
    )
    write_problem(tmp_path, "2_wrong.py", VerifyResult(Verdict.INCORRECT, Stage.CORRECTNESS, "c.py"))
    write_problem(tmp_path, "3_none.py", None)
    (tmp_path / "problems" / ".4_half.json.part").write_text(
        '{"problem": "4_half.py", "verd'
    )  # a write cut short
    rows = reached_verdicts(tmp_path)
    assert sorted(rows) == ["1_fast.py", "2_wrong.py", "3_none.py"]
    assert rows["1_fast.py"]["speedup"] == 2.0 and is_fast_row(rows["1_fast.py"])
    assert rows["2_wrong.py"]["verdict"] == "incorrect" and not is_fast_row(rows["2_wrong.py"])
    assert rows["3_none.py"] == {
        "problem": "3_none.py",
        "verdict": "missing",
        "speedup": None,
        "speedup_min": None,
    }


def test_verification_files_take_turns_by_kind_so_an_early_stop_samples_every_kind() -> None:
    from cudice.model.train.corpus.recipe_fit import interleaved_names

    items = [{"file": f"e{i}.py", "kind": "e2e"} for i in range(3)] + [
        {"file": "i0.py", "kind": "infill"},
        {"file": "h0.py", "kind": "hand"},
        {"file": "h1.py", "kind": "hand"},
    ]
    names = interleaved_names(items)
    assert [n.split("_", 1)[1] for n in names] == [it["file"] for it in items]  # same order, files kept
    assert [n.split("_", 1)[1] for n in sorted(names)] == [
        "e0.py",
        "i0.py",
        "h0.py",
        "e1.py",
        "h1.py",
        "e2.py",
    ]


def test_verify_items_runs_cudice_eval_and_keeps_what_a_stopped_run_reached(
    tmp_path: Path, examples_dir: Path
) -> None:
    import time

    from cudice.model.train.corpus.recipe_fit import verify_items

    reference = (examples_dir / "relu.py").read_text()
    items = [
        {"file": f"{kind}_{i}.py", "kind": kind, "family": "unary", "style": "cudice", "reference": reference,
         "answer": "def broken(:\n" if i else None}
        for kind in ("e2e", "hand") for i in range(2)
    ]  # fmt: skip
    said: list[str] = []
    done = verify_items(items, tmp_path / "a", time.monotonic() + 600, said.append)
    assert done["problems"] == 4 and done["verified"] == 4
    assert [r["verdict"] for r in done["rows"]] == ["missing", "invalid_input"] * 2
    assert done["e2e"]["all"]["n"] == done["hand"]["all"]["n"] == 2 and done["hand"]["all"]["correct"] == 0
    assert not any("budget ended" in s for s in said)
    stopped = verify_items(items, tmp_path / "b", time.monotonic() - 1, said.append)
    assert any("budget ended" in s for s in said) and stopped["problems"] == 4
    assert all(r["verdict"] in (None, "missing", "invalid_input") for r in stopped["rows"])


def test_no_train_scores_a_checkpoint_folder_given_as_start(tiny_sdar_dir: Path, tmp_path: Path) -> None:
    """`recipe_fit --start DIR --no-train`: a checkpoint folder (not only returned tar parts) is
    copied in as it is and scored on the corpus's held-out problems."""
    import json
    import tarfile

    from click.testing import CliRunner
    from cudice.model.train.corpus.build import build_corpus
    from cudice.model.train.corpus.recipe_fit import main

    corpus = tmp_path / "corpus"
    build_corpus(corpus, train_per_family=2, heldout_per_family=2, families=("unary",))
    with tarfile.open(tmp_path / "corpus.tar.gz", "w:gz") as tar:
        for name in ("sft.jsonl", "manifest.json", "problems", "solutions"):
            tar.add(corpus / name, arcname=name)
    out = tmp_path / "out"
    args = ["--work", str(tmp_path / "work"), "--out", str(out), "--minutes", "5", "--corpus-tar",
            str(tmp_path / "corpus.tar.gz"), "--tokenizer", str(tiny_sdar_dir), "--start", str(tiny_sdar_dir),
            "--no-train", "--smoke", "--skip-old", "--verify-per-family", "0"]  # fmt: skip
    inside = list(args)
    inside[inside.index("--start") + 1] = str(tmp_path / "work" / "fit")
    (tmp_path / "work" / "fit").mkdir(parents=True)
    refused = CliRunner().invoke(main, inside)
    assert refused.exit_code == 2 and "lies inside --work" in refused.output
    assert (tmp_path / "work" / "fit").is_dir()  # nothing cleared
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    log = (out / "fit.log").read_text()
    assert f"resuming from the checkpoint folder {tiny_sdar_dir}" in log
    scored = json.loads((out / "results.json").read_text())
    assert (
        scored["training"]["scored"] == str(tiny_sdar_dir)
        and scored["new"]["summary"]["all"]["n"] == scored["num_heldout"] == 2
    )


def test_a_new_model_s_shape_is_changed_only_where_asked_and_must_fit_the_package() -> None:
    from cudice.model.train.corpus.init_model import DEMO_DIMS, num_parameters, shape_overrides

    assert shape_overrides("", DEMO_DIMS) == DEMO_DIMS
    wider = shape_overrides(" hidden_size=448, num_hidden_layers=12 ,intermediate_size=1344", DEMO_DIMS)
    assert {k: v for k, v in wider.items() if DEMO_DIMS[k] != v} == {
        "hidden_size": 448,
        "num_hidden_layers": 12,
        "intermediate_size": 1344,
    }
    assert 30e6 < num_parameters(wider) and num_parameters(wider) * 2 / 2**20 < 60
    for bad, said in [
        ("hidden=448", "not KEY=INT"),
        ("rope_theta=3", "not KEY=INT"),  # a float setting
        ("tie_word_embeddings=1", "not KEY=INT"),  # a flag
        ("hidden_size", "not KEY=INT"),
        ("hidden_size=4.5", "must be an integer"),
        ("num_hidden_layers=0", "must be positive"),
        ("num_key_value_heads=4", "not a multiple"),
        ("num_hidden_layers=40", "MiB in bf16"),
    ]:
        with pytest.raises(ValueError, match=said):
            shape_overrides(bad, DEMO_DIMS)


def test_a_changed_shape_is_the_initial_checkpoint_s_shape(tiny_sdar_dir: Path, tmp_path: Path) -> None:
    from cudice.model.train.corpus.init_model import (
        SMOKE_DIMS,
        init_checkpoint,
        num_parameters,
        shape_overrides,
    )

    (tmp_path / "sft.jsonl").write_text("")
    dims = shape_overrides("hidden_size=96,num_hidden_layers=3", SMOKE_DIMS)
    info = init_checkpoint(tmp_path / "init", tmp_path / "sft.jsonl", dims, tokenizer_dir=tiny_sdar_dir)
    assert info["num_parameters"] == num_parameters({**dims, "vocab_size": info["vocab_size"]})
    import json

    config = json.loads((tmp_path / "init" / "config.json").read_text())
    assert config["hidden_size"] == 96 and config["num_hidden_layers"] == 3


def test_a_shape_is_refused_before_anything_is_cleared(tiny_sdar_dir: Path, tmp_path: Path) -> None:
    from click.testing import CliRunner
    from cudice.model.train.corpus.recipe_fit import main

    work = tmp_path / "work"
    (work / "keep").mkdir(parents=True)
    base = ["--work", str(work), "--out", str(tmp_path / "out"), "--corpus-tar", str(tmp_path / "c.tar.gz"),
            "--tokenizer", str(tiny_sdar_dir)]  # fmt: skip
    bad = CliRunner().invoke(main, [*base, "--dims", "num_hidden_layers=400"])
    assert bad.exit_code == 2 and "--dims" in bad.output and "MiB in bf16" in bad.output, bad.output
    both = CliRunner().invoke(main, [*base, "--dims", "hidden_size=448", "--start", str(tiny_sdar_dir)])
    assert both.exit_code == 2 and "keeps its own shape" in both.output, both.output
    assert (work / "keep").is_dir()  # the work folder was not cleared
