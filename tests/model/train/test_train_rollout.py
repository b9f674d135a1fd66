"""BiC-RL with the real block-diffusion sampler on a tiny checkpoint (reward scripted)."""

from __future__ import annotations

import json

import torch
from click.testing import CliRunner
from cudice.model.engine import load_engine
from cudice.model.tiny import make_tiny
from cudice.model.train.config import RLConfig
from cudice.model.train.data import RLTask
from cudice.model.train.objective import pack_replay, packed_token_logprobs, replay_rows
from cudice.model.train.ppo import sampled_logprobs
from cudice.model.train.reward import candidate_code
from cudice.model.train.rl import run_stage
from cudice.model.train.rollout import engine_rollout_fn, task_prompt


def test_real_rollouts_replay_and_train(tmp_path) -> None:
    engine = load_engine(str(make_tiny(tmp_path / "tiny", sdar_layout=True)), device="cpu")
    loaded = engine.loaded
    tasks = [
        RLTask("e2e", 1, "class Model: pass", task_id="a"),
        RLTask(
            "infill",
            1,
            "class Model: pass",
            prefix="import torch\n",
            suffix="class ModelNew: pass\n",
            task_id="b",
        ),
    ]
    cfg = RLConfig(
        stage="e2e", num_steps=1, tasks_per_step=2, samples_per_task=2, max_new_tokens=12, learning_rate=1e-3
    )
    rollouts = engine_rollout_fn(engine)(tasks, 2, cfg)
    assert [r.task.task_id for r in rollouts] == ["a", "a", "b", "b"]
    assert "Prefix:" in task_prompt(tasks[1]) and "ModelNew" in task_prompt(tasks[0])
    for r in rollouts:
        assert r.prompt_ids == engine.encode(task_prompt(r.task))
        assert len(r.step_map) == len(r.response_ids) > 0
        rows = replay_rows(
            r.prompt_ids,
            r.response_ids,
            r.step_map,
            block_size=loaded.block_size,
            mask_token_id=loaded.ids.mask,
            pad_token_id=loaded.ids.pad,
        )
        assert int(rows.targets.sum()) == len(r.response_ids)  # every sampled token replayed once

    before = {n: p.detach().clone() for n, p in loaded.model.named_parameters()}
    # Scripted reward: the first sample of each task wins, so every group has spread.
    history = run_stage(
        loaded.model,
        tasks,
        cfg,
        rollout_fn=engine_rollout_fn(engine),
        cpu=True,
        reward_fn=lambda rs, c: [1.0, 0.0] * (len(rs) // 2),
        block_size=loaded.block_size,
        mask_token_id=loaded.ids.mask,
        pad_token_id=loaded.ids.pad,
    )
    assert history[0].num_kept_groups == 2 and history[0].num_rows > 0
    assert any(not torch.equal(p, before[n]) for n, p in loaded.model.named_parameters())


def test_rollouts_carry_the_log_probabilities_the_replay_computes(tmp_path) -> None:
    """The probability each token was drawn with (the sampler's confidence at its reveal step) is,
    at temperature 1 and at temperature 0, the replay's log-probability of the token in the state
    the replay rebuilds: PPO's `logp_old` needs no pass of its own. A reshaped draw (temperature
    0.5) records none, so the update scores those rollouts itself."""
    engine = load_engine(str(make_tiny(tmp_path / "tiny", sdar_layout=True)), device="cpu")
    loaded = engine.loaded
    tasks = [RLTask("e2e", 1, "class Model: pass", task_id="a")]
    model = loaded.model.eval()
    for temperature in (1.0, 0.0):
        cfg = RLConfig(stage="e2e", samples_per_task=3, max_new_tokens=16, temperature=temperature)
        rollouts = engine_rollout_fn(engine)(tasks, 3, cfg)
        for r in rollouts:
            assert len(r.logprobs) == len(r.response_ids) > 0
            assert all(lp <= 0.0 for lp in r.logprobs)
            rows = replay_rows(
                r.prompt_ids,
                r.response_ids,
                r.step_map,
                block_size=loaded.block_size,
                mask_token_id=loaded.ids.mask,
                pad_token_id=loaded.ids.pad,
            )
            with torch.no_grad():
                replayed = packed_token_logprobs(model, pack_replay(rows, loaded.block_size))  # (R, L)
            recorded = sampled_logprobs(r, rows)
            assert recorded is not None and recorded.shape == replayed.shape
            assert not recorded[~rows.targets].any()
            torch.testing.assert_close(recorded, replayed, atol=1e-5, rtol=1e-5)
    cool = RLConfig(stage="e2e", samples_per_task=2, max_new_tokens=8, temperature=0.5)
    assert all(r.logprobs == [] for r in engine_rollout_fn(engine)(tasks, 2, cool))


def test_candidate_code_takes_the_first_fenced_block() -> None:
    from cudice.model.train.types import Rollout

    task = RLTask("e2e", 1, "")
    fenced = Rollout(task, [], [], [], "Here:\n```python\nclass ModelNew: pass\n```\ntrailing")
    assert candidate_code(fenced) == "class ModelNew: pass\n"
    assert candidate_code(Rollout(task, [], [], [], "no fence")) == "no fence"


def _rl_cli(tmp_path, infill, e2e, *extra):  # type: ignore[no-untyped-def]
    """`cudice train rl` with these task files (the model folder is never reached by these tests)."""
    from cudice.model.train.cli import train_group

    args = ["--model", str(tmp_path), "--infill-data", str(infill), "--e2e-data", str(e2e), *extra]
    return CliRunner().invoke(train_group, ["rl", *args, "--out", str(tmp_path / "o")])


def test_rl_cli_rejects_bad_task_files(tmp_path) -> None:
    bad = tmp_path / "infill.jsonl"
    bad.write_text(json.dumps({"pytorch_code": "x"}) + "\n")
    good = tmp_path / "e2e.jsonl"
    good.write_text(json.dumps({"idx": 1, "level": 1, "pytorch_code": "x"}) + "\n")
    result = _rl_cli(tmp_path, bad, good)
    assert result.exit_code != 0
    assert "line 1" in result.output and "prefix" in result.output


def test_rl_cli_without_a_gpu_says_rewards_need_one(tmp_path) -> None:
    from cudice.verifier.pool import count_gpus

    if count_gpus():
        import pytest

        pytest.skip("this machine has a GPU")
    infill = tmp_path / "infill.jsonl"
    infill.write_text(json.dumps({"pytorch_code": "x", "prefix": "a", "middle": "b", "suffix": "c"}) + "\n")
    e2e = tmp_path / "e2e.jsonl"
    e2e.write_text(json.dumps({"idx": 1, "level": 1, "pytorch_code": "x"}) + "\n")
    # an empty folder is no checkpoint of cudice's: its default prompt style would need templates
    result = _rl_cli(tmp_path, infill, e2e, "--prompt-style", "cudice")
    assert result.exit_code != 0
    assert "RL rewards need a GPU" in result.output and "--verify-gpus" in result.output


def test_rl_cli_takes_the_replay_attention_and_names_its_choices(tmp_path, monkeypatch) -> None:
    """`--replay-attention` and `--no-compile-replay` reach both stages' `ModelSetup` and
    `--old-logprobs` their `RLConfig`; a bad choice is named with the good ones."""
    from cudice.model.train import config as config_module
    from cudice.model.train.cli import train_group

    seen: list[str] = []

    class Recording(config_module.RLConfig):
        def __post_init__(self) -> None:
            seen.append(f"{self.setup.replay_attention}/{self.old_logprobs}/{self.setup.compile_replay}")
            super().__post_init__()

    monkeypatch.setattr(config_module, "RLConfig", Recording)
    infill = tmp_path / "infill.jsonl"
    infill.write_text(json.dumps({"pytorch_code": "x", "prefix": "a", "middle": "b", "suffix": "c"}) + "\n")
    e2e = tmp_path / "e2e.jsonl"
    e2e.write_text(json.dumps({"idx": 1, "level": 1, "pytorch_code": "x"}) + "\n")
    _rl_cli(tmp_path, infill, e2e, "--prompt-style", "cudice", "--replay-attention", "sparse")
    assert seen == [
        "sparse/sampler/True",
        "sparse/sampler/True",
    ]  # the infilling stage's, the end-to-end stage's
    seen.clear()
    _rl_cli(
        tmp_path, infill, e2e, "--prompt-style", "cudice", "--old-logprobs", "replay", "--no-compile-replay"
    )
    assert seen == ["auto/replay/False", "auto/replay/False"]

    result = _rl_cli(tmp_path, tmp_path / "i.jsonl", tmp_path / "e.jsonl", "--replay-attention", "flash")
    assert result.exit_code == 2
    assert "--replay-attention" in result.output and "'dense', 'sparse', 'auto'" in result.output
    help_text = CliRunner().invoke(train_group, ["rl", "--help"]).output
    assert "--replay-attention" in help_text and "[default: auto]" in help_text
