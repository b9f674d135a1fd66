"""The bundled default model: found, loadable on CPU, used when no model is set, described honestly."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from cudice.model.bundled import (
    DEMO_DIR,
    DEMO_MAX_NEW_TOKENS,
    DISABLE_ENV,
    default_model_dir,
    demo_card,
    resolve_model_path,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def bundled_model_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """tests/conftest.py hides the bundled model from every other test; these are about it."""
    monkeypatch.delenv(DISABLE_ENV, raising=False)


def test_the_package_ships_a_complete_checkpoint_and_the_rule_prefers_an_explicit_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert default_model_dir() == DEMO_DIR
    assert resolve_model_path(None) == (str(DEMO_DIR), True)
    assert resolve_model_path("/some/dice") == ("/some/dice", False)
    assert (DEMO_DIR / "model.safetensors").stat().st_size <= 64 * 2**20
    monkeypatch.setenv(DISABLE_ENV, "1")
    assert default_model_dir() is None and resolve_model_path("") == (None, False)


def test_card_states_what_it_cannot_do() -> None:
    card = demo_card()
    assert isinstance(card["trained"], bool)
    assert "DICE checkpoint" in card["limitations"] and "softmax" in card["limitations"]


def test_bundled_model_loads_on_cpu_as_a_block_diffusion_checkpoint() -> None:
    from cudice.model.config import SamplerConfig
    from cudice.model.engine import load_engine

    engine = load_engine(str(DEMO_DIR), device="cpu")
    assert engine.loaded.model_type == "sdar" and engine.loaded.block_size == 4
    assert engine.loaded.ids.mask is not None
    gen = engine.generate_kernel((ROOT / "examples" / "relu.py").read_text(), SamplerConfig(max_new_tokens=8))
    assert 0 < gen.num_tokens <= 8 + 4 and gen.num_forwards > 0


@pytest.mark.slow
def test_trained_bundled_model_writes_a_parsable_candidate_for_the_example() -> None:
    """No particular text is asserted: only that the answer is a KernelBench candidate file."""
    if not demo_card()["trained"]:
        pytest.skip("the bundled weights are the random stand-in (demo_card.json: trained false)")
    from cudice.model.config import SamplerConfig
    from cudice.model.engine import load_engine
    from cudice.verifier.source.document import parse_document

    engine = load_engine(str(DEMO_DIR), device="cpu")
    gen = engine.generate_kernel(
        (ROOT / "examples" / "relu.py").read_text(), SamplerConfig(max_new_tokens=DEMO_MAX_NEW_TOKENS)
    )
    doc = parse_document(gen.text, "relu_cuda.py", require_candidate=True)
    # The answer stands alone (its reference is examples/relu.py, passed to verify separately), so
    # the only finding allowed at parse time is the missing reference.
    invalid = doc.invalid_result()
    codes = {d.code for d in invalid.diagnostics} if invalid is not None else set()
    assert codes <= {"parse.no_reference"}, (codes, gen.text)
    assert "class ModelNew" in gen.text and "load_inline" in gen.text, gen.text
    assert doc.load_inline_calls, gen.text


def test_generate_and_model_info_default_to_the_bundled_model(monkeypatch: pytest.MonkeyPatch) -> None:
    from cudice.server.cli import cli

    monkeypatch.delenv("CUDICE_MODEL", raising=False)
    runner = CliRunner()
    info = runner.invoke(cli, ["model", "info", "--json", "--device", "cpu"])
    assert info.exit_code == 0, info.output
    data = json.loads(info.stdout)
    assert data["bundled"] is True and data["model_type"] == "sdar" and "limitations" in data["card"]
    gen = runner.invoke(
        cli, ["generate", str(ROOT / "examples" / "relu.py"), "--device", "cpu", "--max-new-tokens", "8"]
    )
    assert gen.exit_code == 0, gen.output
    assert "bundled demo model" in gen.stderr
    # the candidate names its reference: `cudice verify` needs no --reference
    assert gen.stdout.startswith(f"# cudice: reference={(ROOT / 'examples' / 'relu.py').resolve()}\n")
    monkeypatch.setenv(DISABLE_ENV, "1")
    none = runner.invoke(cli, ["generate", str(ROOT / "examples" / "relu.py"), "--device", "cpu"])
    assert none.exit_code == 1 and "no model" in none.output


def test_install_demo_writes_the_weights_and_a_card_with_the_heldout_scores(tmp_path: Path) -> None:
    from cudice.model.train.corpus.install import install_demo

    tar_path = tmp_path / "demo.tar"
    with tarfile.open(tar_path, "w") as tar:
        for item in DEMO_DIR.iterdir():
            if item.name != "demo_card.json":
                tar.add(item, arcname=item.name)
    results = {
        "sft": {
            "num_problems": 16,
            "samples_per_problem": 1,
            "correct": 0.25,
            "fast_1": 0.0,
            "per_family": {},
            "verdicts": {"correct": 4},
            "speed_batch1": {"default": {"tokens_per_forward": 1.5}},
        }
    }
    (tmp_path / "results.json").write_text(json.dumps(results))
    target = tmp_path / "demo"
    (target / "stale").mkdir(parents=True)
    card = install_demo(tar_path, into=target, results=tmp_path / "results.json")
    assert not (target / "stale").exists()
    assert card["trained"] is True and card["heldout"]["sft"]["correct"] == 0.25
    assert card["heldout"]["sft"]["tokens_per_forward"] == 1.5
    assert json.loads((target / "demo_card.json").read_text()) == card
    assert default_model_dir() == DEMO_DIR  # installing elsewhere leaves the package's model alone


def test_infilling_is_tokenised_as_training_tokenised_the_pair() -> None:
    """The infill prompt's ids are the first ids of its training pair (`sft.encode_pair`: the chat
    turn and the answer tokenised apart): the bundled tokenizer makes one token of "\\n```python"
    when the two are tokenised together, a sequence training never showed the model."""
    from cudice.model.engine import load_engine
    from cudice.model.prompts import infill_prompt
    from cudice.model.scaffold import split_scaffold
    from cudice.model.train.corpus.build import fenced
    from cudice.model.train.sft import encode_pair

    engine = load_engine(str(DEMO_DIR), device="cpu", fast=False, freeze=True)
    reference = (ROOT / "examples" / "relu.py").read_text()
    solution = (ROOT / "examples" / "relu_cuda.py").read_text()
    scaffold = split_scaffold(solution)
    trained = encode_pair(
        engine.tokenizer,
        infill_prompt(reference, scaffold.prefix, scaffold.suffix),
        fenced(solution),
        block_size=4,
        pad_token_id=0,
    ).input_ids
    ids = engine.infill_ids(scaffold.prefix, scaffold.suffix, reference)
    assert ids == trained[: len(ids)] and len(trained) > len(ids)
    assert engine.decode(ids) == engine.infill_prompt(scaffold.prefix, scaffold.suffix, reference)
    joined = engine.encode(engine.infill_prompt(scaffold.prefix, scaffold.suffix, reference))
    assert joined != ids  # what the editor sent before: tokenised together, it differs at the seam
