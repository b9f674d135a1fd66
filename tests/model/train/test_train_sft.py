"""`cudice train sft` end to end on a tiny SDAR-layout checkpoint built by the test."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import ClassVar

import pytest
import torch
from click.testing import CliRunner
from cudice.model.loader import load_checkpoint
from cudice.model.tiny import make_tiny
from cudice.model.train.checkpoint import read_marker
from cudice.model.train.cli import train_group
from cudice.model.train.sft import encode_pair


@pytest.fixture
def tiny_dir(tmp_path):
    return make_tiny(tmp_path / "tiny", sdar_layout=True)


def test_encode_pair_pads_to_blocks_and_starts_the_answer_after_the_chat_header(tiny_dir) -> None:
    loaded = load_checkpoint(str(tiny_dir), device="cpu")
    s = encode_pair(
        loaded.tokenizer, "write relu", "out = max(x, 0)", block_size=4, pad_token_id=loaded.ids.pad
    )
    assert len(s.input_ids) % 4 == 0
    prompt_text = loaded.tokenizer.decode(s.input_ids[: s.num_prompt])
    assert prompt_text.endswith("<|im_start|>assistant\n") and "write relu" in prompt_text
    answer = loaded.tokenizer.decode(s.input_ids[s.num_prompt :])
    assert answer.startswith("out = max(x, 0)<|im_end|>")


def test_collate_states_the_first_answer_position_the_loss_may_start_at() -> None:
    from cudice.model.train.sft import Collate, EncodedSample

    samples = [EncodedSample([5] * 12, 6), EncodedSample([5] * 16, 9), EncodedSample([5] * 8, 3)]
    collate = Collate(samples, pad_token_id=0, mask_token_id=1, seed=0, min_rate=0.1)
    batch = collate([0, 1])
    first = [int(row.nonzero()[0]) for row in batch.loss_mask]
    assert batch.answer_start == min(first) == 6
    assert collate([1, 2]).answer_start == 3 and collate([1]).answer_start == 9


def _cuke(tmp_path: Path) -> Path:
    """Four CuKe pairs as a JSONL file."""
    data = tmp_path / "cuke.jsonl"
    data.write_text(
        "\n".join(json.dumps({"prompt": f"task {i}", "response": "__global__ void k() {}"}) for i in range(4))
    )
    return data


def _sft_args(model: Path, data: Path, out: Path, *extra: str) -> list[str]:
    """`cudice train sft` on CPU: 2 epochs of batch 2 at lr 1e-3, plus `extra`."""
    return [
        "sft",
        *("--model", str(model), "--data", str(data), "--out", str(out)),
        *("--epochs", "2", "--lr", "1e-3", "--batch-size", "2", "--device", "cpu"),
        *extra,
    ]


def _steps(output: str) -> list[dict]:
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]


def test_sft_cli_trains_and_writes_a_loadable_checkpoint(tiny_dir, tmp_path) -> None:
    out = tmp_path / "out"
    result = CliRunner().invoke(train_group, _sft_args(tiny_dir, _cuke(tmp_path), out))
    assert result.exit_code == 0, result.output
    steps = _steps(result.output)
    assert len(steps) == 4 and all(s["loss"] > 0 for s in steps)
    assert read_marker(out)["step"] == 4
    before, after = load_checkpoint(str(tiny_dir), device="cpu"), load_checkpoint(str(out), device="cpu")
    assert after.model_type == "sdar" and after.block_size == 4  # layout kept
    changed = [
        n
        for n, p in after.model.named_parameters()
        if not torch.equal(p, dict(before.model.named_parameters())[n])
    ]
    assert len(changed) == len(list(after.model.parameters()))


def test_sft_cli_reports_bad_data_clearly(tiny_dir, tmp_path) -> None:
    data = tmp_path / "bad.jsonl"
    data.write_text('{"prompt": "x"}\n')
    result = CliRunner().invoke(
        train_group, ["sft", "--model", str(tiny_dir), "--data", str(data), "--out", str(tmp_path / "o")]
    )
    assert result.exit_code != 0
    assert "line 1" in result.output and "response" in result.output


class _Writer:
    """Stands in for `torch.utils.tensorboard.SummaryWriter` (tensorboard is optional): records scalars."""

    scalars: ClassVar[list[tuple[str, str, float, int]]] = []  # (log_dir, tag, value, step)

    def __init__(self, log_dir: str) -> None:
        self.log_dir = log_dir

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        self.scalars.append((self.log_dir, tag, value, step))

    def close(self) -> None:
        pass


def test_sft_cli_resumes_where_it_stopped_and_logs_to_tensorboard(tiny_dir, tmp_path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", SimpleNamespace(SummaryWriter=_Writer))
    monkeypatch.setattr(_Writer, "scalars", [])
    data, out, tb = _cuke(tmp_path), tmp_path / "out", tmp_path / "tb"
    args = _sft_args(tiny_dir, data, out, "--precision", "bf16-autocast", "--save-every", "1")
    first = CliRunner().invoke(train_group, [*args, "--max-steps", "2", "--tensorboard", str(tb)])
    assert first.exit_code == 0, first.output
    assert [s["step"] for s in _steps(first.output)] == [1, 2]
    assert (out / "train_state" / "position.json").is_file() and read_marker(out)["step"] == 2
    losses = {
        (step, value) for d, tag, value, step in _Writer.scalars if tag == "train/loss" and d == str(tb)
    }
    assert losses == {(s["step"], s["loss"]) for s in _steps(first.output)}
    signature = _watch_signature(out)
    rest = CliRunner().invoke(train_group, [*args, "--resume"])
    assert rest.exit_code == 0, rest.output
    assert [s["step"] for s in _steps(rest.output)] == [3, 4]
    assert read_marker(out)["step"] == 4
    # the server's hot-reload sees each periodic checkpoint as complete and new (train_state/ aside)
    assert signature is not None and _watch_signature(out) not in (None, signature)
    # the uninterrupted run logs the same losses
    whole = CliRunner().invoke(
        train_group, _sft_args(tiny_dir, data, tmp_path / "whole", "--precision", "bf16-autocast")
    )
    assert whole.exit_code == 0, whole.output
    assert [s["loss"] for s in _steps(first.output + rest.output)] == pytest.approx(
        [s["loss"] for s in _steps(whole.output)], rel=1e-6
    )
    again = CliRunner().invoke(train_group, [*args, "--resume"])
    assert again.exit_code == 0 and _steps(again.output) == []
    assert "already" in again.output and read_marker(out)["step"] == 4


def _watch_signature(directory):  # type: ignore[no-untyped-def]
    watch = pytest.importorskip("cudice.server.watch")
    return watch.checkpoint_signature(directory)


def test_monitor_draws_a_progress_bar_with_loss_and_tokens_per_second(capsys) -> None:
    from cudice.model.train.monitor import Monitor

    lines: list[dict] = []
    monitor = Monitor(2, emit=lines.append, progress=True, description="sft")
    monitor.log(1, {"loss": 2.5, "tokens_per_s": 1234.0})
    monitor.log(2, {"loss": 1.25, "tokens_per_s": 2000.0})
    monitor.close()
    assert lines == [
        {"step": 1, "loss": 2.5, "tokens_per_s": 1234.0},
        {"step": 2, "loss": 1.25, "tokens_per_s": 2000.0},
    ]
    err = capsys.readouterr().err
    assert "loss 1.25" in err and "tokens_per_s 2000" in err and "2/2" in err
    silent = Monitor(1, emit=lines.append, enabled=False)
    silent.log(1, {"loss": 0.0})
    assert len(lines) == 2  # other ranks log nothing


def test_monitor_shows_rl_reward_and_files_scalars_under_the_stage(capsys, monkeypatch) -> None:
    from cudice.model.train.monitor import Monitor

    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", SimpleNamespace(SummaryWriter=_Writer))
    monkeypatch.setattr(_Writer, "scalars", [])
    monitor = Monitor(3, emit=lambda r: None, tensorboard_dir="tb", progress=True, description="bic-rl")
    monitor.log(3, {"stage": "e2e", "step": 0, "mean_reward": 0.25, "loss": 0.5, "tokens_per_s": 80.0})
    monitor.close()
    assert "mean_reward 0.25" in capsys.readouterr().err
    assert sorted(_Writer.scalars) == [
        ("tb", "e2e/loss", 0.5, 3),
        ("tb", "e2e/mean_reward", 0.25, 3),
        ("tb", "e2e/step", 0, 3),
        ("tb", "e2e/tokens_per_s", 80.0, 3),
    ]


def test_fp32_master_weights_are_saved_in_the_sources_bf16(tiny_dir, tmp_path) -> None:
    from cudice.model.train.checkpoint import save_checkpoint
    from safetensors.torch import load_file

    config = json.loads((tiny_dir / "config.json").read_text())
    source = tmp_path / "bf16src"
    source.mkdir()
    for item in tiny_dir.iterdir():
        (source / item.name).write_bytes(item.read_bytes())
    (source / "config.json").write_text(json.dumps({**config, "torch_dtype": "bfloat16"}))
    model = load_checkpoint(str(tiny_dir), device="cpu", dtype="float32").model
    save_checkpoint(model, source, tmp_path / "a", step=1)
    assert {t.dtype for t in load_file(tmp_path / "a" / "model.safetensors").values()} == {torch.bfloat16}
    half = load_checkpoint(str(tiny_dir), device="cpu", dtype="bfloat16").model
    save_checkpoint(half, tiny_dir, tmp_path / "b", step=1)  # a float32 source never widens bf16 weights
    assert {t.dtype for t in load_file(tmp_path / "b" / "model.safetensors").values()} == {torch.bfloat16}
