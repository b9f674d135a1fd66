"""`cudice generate --samples N` and `cudice.model.best_of`: ranking, dedup, the CLI with a stubbed
verifier on the tiny checkpoint, and (slow) the real compile-only verifier on the demo model."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from cudice.model import best_of
from cudice.model.cli import generate_command, with_reference_comment
from cudice.model.config import SamplerConfig
from cudice.verifier.source.result import Diagnostic, Severity, Stage, Verdict, VerifyResult

ROOT = Path(__file__).resolve().parents[2]


def result(verdict: Verdict, speedup: float | None = None, *, suspicious: bool = False) -> VerifyResult:
    diags: tuple[Diagnostic, ...] = ()
    if verdict is Verdict.COMPILE_ERROR:
        diags = (
            Diagnostic(Severity.WARNING, "a warning first", "compile.warning", Stage.COMPILE),
            Diagnostic(Severity.ERROR, "expected an expression", "compile.error", Stage.COMPILE),
        )
    return VerifyResult(verdict, Stage.COMPILE, "x_cuda.py", diags, speedup=speedup, is_suspicious=suspicious)


# --- pure functions ----------------------------------------------------------------------------


def test_distinct_points_each_repeat_at_its_first_occurrence() -> None:
    assert best_of.distinct([]) == []
    assert best_of.distinct(["a", "b", "a", "c", "b", "a"]) == [None, None, 0, None, 1, 0]


def test_choose_ranks_verdict_then_speedup_then_the_earliest_sample() -> None:
    C, K, E = Verdict.CORRECT, Verdict.COMPILED, Verdict.COMPILE_ERROR
    # correct beats compiled beats everything else, wherever it stands
    assert best_of.choose([result(E), result(K), result(Verdict.STATIC_VIOLATION)]) == 1
    assert best_of.choose([result(K), result(E), result(C, 0.5)]) == 2
    # `checked` (compile-only, headers unavailable) sits between compiled and the failures
    assert best_of.choose([result(E), result(Verdict.CHECKED), result(Verdict.INVALID_INPUT)]) == 1
    assert best_of.choose([result(Verdict.CHECKED), result(K)]) == 1
    # among correct ones the faster, a suspicious speedup counting as none
    assert best_of.choose([result(C, 1.2), result(C, 3.0), result(C, 2.0)]) == 1
    assert best_of.choose([result(C, 1.2), result(C, 40.0, suspicious=True)]) == 0
    assert best_of.choose([result(C), result(C, 0.9)]) == 1
    # ties go to the earliest sample; None (an unverified duplicate) never wins
    assert best_of.choose([result(K), result(K), result(K)]) == 0
    assert best_of.choose([result(E), None, result(E)]) == 0
    assert best_of.choose([None, result(E)]) == 1
    with pytest.raises(ValueError):
        best_of.choose([None])


def test_first_error_is_the_first_error_diagnostic_else_the_error_text() -> None:
    assert best_of.first_error(result(Verdict.COMPILE_ERROR)) == "expected an expression"
    assert best_of.first_error(result(Verdict.COMPILED)) is None
    crash = VerifyResult(Verdict.CRASH, Stage.LOAD, "x.py", error="Segmentation fault")
    assert best_of.first_error(crash) == "Segmentation fault"


def test_sample_configs_keep_row_zero_greedy_and_seed_each_sampled_row() -> None:
    rows = best_of.sample_configs(SamplerConfig(seed=7, max_new_tokens=16), 3)
    assert [r.temperature for r in rows] == [0.0, best_of.DEFAULT_TEMPERATURE, best_of.DEFAULT_TEMPERATURE]
    assert [r.seed for r in rows[1:]] == [8, 9] and all(r.max_new_tokens == 16 for r in rows)
    given = best_of.sample_configs(SamplerConfig(temperature=0.5), 2)
    assert [r.temperature for r in given] == [0.0, 0.5] and given[1].seed is None
    assert len(best_of.sample_configs(SamplerConfig(), 1)) == 1
    with pytest.raises(ValueError):
        best_of.sample_configs(SamplerConfig(), 0)


# --- the CLI on the tiny checkpoint, verifier stubbed -------------------------------------------


class StubVerify:
    """Stands in for `cudice.verifier.api.verify`: `compiled` for the greedy answer, otherwise
    `correct` with a speedup drawn from the text's digest (so the best sample is a sampled one)."""

    def __init__(self, greedy_file: str | None) -> None:
        self.greedy_file = greedy_file
        self.calls: list[dict[str, Any]] = []
        self.by_text: dict[str, VerifyResult] = {}
        self.lock = threading.Lock()

    def __call__(self, path: Any, **kwargs: Any) -> VerifyResult:
        text = kwargs["source"]
        if self.greedy_file is not None and text.rstrip("\n") == self.greedy_file.rstrip("\n"):
            found = result(Verdict.COMPILED)
        else:
            found = result(Verdict.CORRECT, 1.0 + hashlib.sha256(text.encode()).digest()[0] / 64)
        with self.lock:
            self.calls.append({"path": path, **kwargs})
            self.by_text[text] = found
        return found


def run_generate(tiny: Path, file: Path, *extra: str) -> Any:
    args = [str(file), "--model", str(tiny), "--device", "cpu", "--max-new-tokens", "12", *extra]
    out = CliRunner().invoke(generate_command, args)
    assert out.exit_code == 0, out.output
    return out


def test_samples_choose_the_best_ranked_and_samples_1_is_the_greedy_answer(
    examples_dir: Path, tiny_sdar_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    relu = examples_dir / "relu.py"
    plain = run_generate(tiny_sdar_dir, relu)
    one = run_generate(tiny_sdar_dir, relu, "--samples", "1")
    assert one.stdout == plain.stdout  # the default path: no verification, same answer
    assert "sample" not in one.stderr
    stub = StubVerify(greedy_file=plain.stdout)  # what is verified is the printed file (newline aside)
    monkeypatch.setattr(best_of, "verify", stub)
    out = run_generate(tiny_sdar_dir, relu, "--samples", "3", "--seed", "1", "--json")
    data = json.loads(out.stdout)
    samples, chosen = data["samples"], data["chosen"]
    assert [s["index"] for s in samples] == [0, 1, 2]
    assert samples[0]["temperature"] == 0 and samples[0]["verdict"] == "compiled"
    # every distinct text was verified once, against the reference file, as an unsaved candidate
    originals = [s for s in samples if s["duplicate_of"] is None]
    assert len(stub.calls) == len(originals) == len(stub.by_text)
    assert all(c["reference"] == relu.resolve() and c["path"].name == "relu_cuda.py" for c in stub.calls)
    # the chosen sample is the best-ranked: the fastest correct one if any, else the greedy one
    correct = [s for s in originals if s["verdict"] == "correct"]
    if correct:
        best = max(correct, key=lambda s: (s["speedup"], -s["index"]))
        assert chosen == best["index"] and samples[chosen]["speedup"] == max(s["speedup"] for s in correct)
    else:
        assert chosen == 0
    # the JSON's answer is the chosen sample's, and its verdict is the one the verifier gave that file
    printed = with_reference_comment(data["text"], relu.resolve())
    assert stub.by_text[printed].verdict.value == samples[chosen]["verdict"]
    # stderr: one line per sample, then the choice
    lines = out.stderr.splitlines()
    for s in samples:
        assert any(line.startswith(f"sample {s['index']} (") for line in lines), out.stderr
    assert f"chose sample {chosen} ({samples[chosen]['verdict']})" in out.stderr
    # sample 0 of the batch is exactly the --samples 1 answer, and the text mode prints the chosen file
    text = run_generate(tiny_sdar_dir, relu, "--samples", "3", "--seed", "1")
    assert text.stdout.rstrip("\n") == printed.rstrip("\n")
    if chosen != 0:
        assert text.stdout != plain.stdout


def test_samples_that_all_fail_still_print_the_best_and_say_why(
    examples_dir: Path, tiny_sdar_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []

    def failing(path: Any, **kwargs: Any) -> VerifyResult:
        calls.append(kwargs["source"])
        return result(Verdict.COMPILE_ERROR)

    monkeypatch.setattr(best_of, "verify", failing)
    out = run_generate(tiny_sdar_dir, examples_dir / "relu.py", "--samples", "2", "--seed", "3")
    assert out.stdout.rstrip("\n") == calls[0].rstrip("\n")  # all tie: the earliest, greedy one
    assert "none of the 2 samples passed" in out.stderr and "expected an expression" in out.stderr


def test_infill_samples_verify_the_spliced_file_in_place(
    examples_dir: Path, tiny_sdar_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stub = StubVerify(greedy_file=None)
    monkeypatch.setattr(best_of, "verify", stub)
    scaffold = examples_dir / "relu_cuda.py"
    source = scaffold.read_text()
    out = run_generate(tiny_sdar_dir, scaffold, "--mode", "infill", "--samples", "2", "--json")
    data = json.loads(out.stdout)
    assert stub.calls and all(c["path"] == scaffold and c["reference"] is None for c in stub.calls)
    head = source.split('relu_source = """', 1)[0]
    assert all(c["source"].startswith(head) for c in stub.calls)
    assert data["text"] in stub.by_text and len(data["samples"]) == 2


def test_a_seeded_sample_does_not_depend_on_the_batch_size(tiny_engine: Any) -> None:
    reference = (ROOT / "examples" / "relu.py").read_text()
    config = SamplerConfig(max_new_tokens=12, seed=5)
    three, _, _ = best_of.generate_samples(tiny_engine, reference, best_of.sample_configs(config, 3))
    two, _, _ = best_of.generate_samples(tiny_engine, reference, best_of.sample_configs(config, 2))
    greedy = tiny_engine.generate_kernel(reference, config)
    assert three[0].text == two[0].text == greedy.text
    assert three[1].text == two[1].text


# --- the real compile-only verifier on the bundled demo model ------------------------------------


@pytest.mark.slow
def test_demo_model_best_of_two_on_relu_with_the_real_compile_only_verifier(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from cudice.model.bundled import DEMO_MAX_NEW_TOKENS, DISABLE_ENV, demo_card, resolve_model_path

    monkeypatch.delenv(DISABLE_ENV, raising=False)
    if not demo_card()["trained"]:
        pytest.skip("the bundled weights are the random stand-in (demo_card.json: trained false)")
    monkeypatch.setenv("CUDICE_GPU", "0")  # compile-only wherever it runs
    monkeypatch.setenv("CUDICE_CACHE_DIR", os.environ["CUDICE_TEST_BUILD_CACHE"])  # the run's shared cache
    from cudice.model.engine import load_engine

    model, _ = resolve_model_path(None)
    assert model is not None
    engine = load_engine(model, device="cpu", freeze=True)
    relu = ROOT / "examples" / "relu.py"
    found = best_of.best_of(
        engine,
        relu.read_text(),
        SamplerConfig(max_new_tokens=DEMO_MAX_NEW_TOKENS, seed=0),
        2,
        path=relu.with_name("relu_cuda.py"),
        reference=relu,
        finish=lambda text: f"# cudice: reference={relu}\n{text}",
    )
    assert len(found.samples) == 2 and found.samples[0].temperature == 0
    for s in found.samples:
        assert s.result is not None and s.result.compile_only, s.result
    assert found.chosen == best_of.choose(
        [s.result if s.duplicate_of is None else None for s in found.samples]
    )
    # the greedy answer (an abs kernel: docs/model.md) compiles, so the choice is a compiled one
    assert found.samples[0].verdict == "compiled" and found.passed, [s.to_dict() for s in found.samples]
