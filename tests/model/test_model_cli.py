"""`cudice generate` and `cudice model` from the command line (in-process via click's runner)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner
from cudice.model.cli import generate_command, model_group


def test_generate_without_model_is_a_clear_error(examples_dir: Path, monkeypatch) -> None:
    monkeypatch.delenv("CUDICE_MODEL", raising=False)
    out = CliRunner().invoke(generate_command, [str(examples_dir / "relu.py")])
    assert out.exit_code == 1
    assert "no model: pass --model PATH" in out.output and "Traceback" not in out.output


def test_generate_json_has_the_documented_fields(examples_dir: Path, tiny_sdar_dir: Path) -> None:
    out = CliRunner().invoke(
        generate_command,
        [
            str(examples_dir / "relu.py"),
            "--model",
            str(tiny_sdar_dir),
            "--json",
            "--max-new-tokens",
            "8",
            "--device",
            "cpu",
        ],
    )
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    for key in ("text", "num_tokens", "num_forwards", "tokens_per_forward", "seconds", "step_map"):
        assert key in data
    assert 0 < data["num_tokens"] <= 8 and data["middle"] is None
    # The summary line goes to stderr (stdout is the JSON): tokens, forwards and the rate.
    summary = out.stderr.strip().splitlines()[-1]
    assert summary.startswith(f"{data['num_tokens']} tokens, {data['num_forwards']} forwards")
    assert "tok/s)" in summary and "finished by" in summary


def test_generate_infill_keeps_the_scaffold(examples_dir: Path, tiny_sdar_dir: Path) -> None:
    source = (examples_dir / "relu_cuda.py").read_text()
    out = CliRunner().invoke(
        generate_command,
        [
            str(examples_dir / "relu_cuda.py"),
            "--model",
            str(tiny_sdar_dir),
            "--mode",
            "infill",
            "--json",
            "--max-new-tokens",
            "8",
        ],
    )
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    head, tail = source.split('relu_source = """', 1)[0], source.split('"""\n\nrelu_cpp_source', 1)[1]
    assert data["text"].startswith(head + 'relu_source = """' + data["middle"])
    assert data["text"].endswith('"""\n\nrelu_cpp_source' + tail)


def test_generate_errors_are_messages_not_tracebacks(
    examples_dir: Path, tiny_sdar_dir: Path, tmp_path: Path
) -> None:
    runner = CliRunner()
    bad_steps = runner.invoke(
        generate_command, [str(examples_dir / "relu.py"), "--model", str(tiny_sdar_dir), "--steps", "0"]
    )
    assert bad_steps.exit_code == 1 and "SamplerConfig.denoising_steps=0" in bad_steps.output
    no_scaffold = runner.invoke(
        generate_command, [str(examples_dir / "relu.py"), "--model", str(tiny_sdar_dir), "--mode", "infill"]
    )
    assert no_scaffold.exit_code == 1 and "no `load_inline" in no_scaffold.output
    missing = runner.invoke(
        generate_command, [str(examples_dir / "relu.py"), "--model", str(tmp_path / "nope")]
    )
    assert missing.exit_code == 1 and "looked in" in missing.output
    for out in (bad_steps, no_scaffold, missing):
        assert "Traceback" not in out.output


def test_make_tiny_writes_a_small_sdar_checkpoint(tmp_path: Path) -> None:
    runner = CliRunner()
    out = runner.invoke(model_group, ["make-tiny", str(tmp_path / "t"), "--sdar-layout"])
    assert out.exit_code == 0, out.output
    config = json.loads((tmp_path / "t" / "config.json").read_text())
    assert config["model_type"] == "sdar" and config["block_size"] == 4
    assert sum(f.stat().st_size for f in (tmp_path / "t").iterdir()) < 5_000_000
    again = runner.invoke(model_group, ["make-tiny", str(tmp_path / "t")])
    assert again.exit_code == 1 and "not empty" in again.output


def test_model_info_reports_what_was_read_from_the_checkpoint(tiny_sdar_dir: Path) -> None:
    out = CliRunner().invoke(model_group, ["info", str(tiny_sdar_dir), "--json", "--device", "cpu"])
    assert out.exit_code == 0, out.output
    info = json.loads(out.stdout)
    config = json.loads((tiny_sdar_dir / "config.json").read_text())
    assert info["model_type"] == "sdar" and info["block_size"] == config["block_size"]
    assert info["mask_token_id"] == config["mask_token_id"] and info["device"] == "cpu"
    assert 100_000 < info["num_parameters"] < 1_000_000


def test_model_info_text_is_read_from_the_files_without_torch(tiny_sdar_dir: Path) -> None:
    import subprocess
    import sys

    # a fresh interpreter: the default output must not import torch (13 s on a small CPU)
    code = (
        "import sys; from click.testing import CliRunner; from cudice.model.cli import model_group; "
        f"r = CliRunner().invoke(model_group, ['info', {str(tiny_sdar_dir)!r}]); "
        "print(r.output); print('TORCH' if 'torch' in sys.modules else 'NO-TORCH')"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    loaded = json.loads(
        CliRunner().invoke(model_group, ["info", str(tiny_sdar_dir), "--json", "--device", "cpu"]).stdout
    )
    assert f"{loaded['num_parameters'] / 1e6:.1f}M parameters" in done.stdout, done.stdout
    assert "type: sdar, block size" in done.stdout and done.stdout.strip().endswith("NO-TORCH"), done.stdout
