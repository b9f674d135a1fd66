"""Rollouts sample from a copy of the master weights (bf16 in training) that follows the master
after every update; the replay stays on the master. Tiny real checkpoint, real sampler, CPU."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from cudice.model.engine import Engine, load_engine
from cudice.model.tiny import make_tiny
from cudice.model.train.config import RLConfig
from cudice.model.train.data import RLTask
from cudice.model.train.rl import run_stage
from cudice.model.train.rollout import RolloutWeights, engine_rollout_fn

TASKS = [RLTask("e2e", 1, "class Model: pass", task_id="a"), RLTask("e2e", 1, "x = 1", task_id="b")]


def _engine(tmp_path: Path) -> Engine:
    return load_engine(str(make_tiny(tmp_path / "tiny", sdar_layout=True)), device="cpu")


def test_an_fp32_copy_samples_the_masters_greedy_tokens(tmp_path: Path) -> None:
    master = _engine(tmp_path)
    weights = RolloutWeights(master.loaded.model, torch.float32)
    copied = Engine(weights.loaded(master.loaded))
    assert copied.loaded.model is weights.module and weights.module is not master.loaded.model
    cfg = RLConfig(stage="e2e", samples_per_task=2, max_new_tokens=12, temperature=0.0)
    want = engine_rollout_fn(master)(TASKS, 2, cfg)
    got = engine_rollout_fn(copied)(TASKS, 2, cfg)
    assert [r.response_ids for r in got] == [r.response_ids for r in want]
    assert [r.step_map for r in got] == [r.step_map for r in want]
    assert all(len(r.response_ids) > 0 for r in got)


def test_the_bf16_copy_follows_the_master_after_each_update(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    loaded = engine.loaded
    master = loaded.model
    weights = RolloutWeights(master)  # bf16
    initial = {n: p.clone() for n, p in weights.module.named_parameters()}
    assert all(p.dtype == torch.bfloat16 and not p.requires_grad for p in initial.values())
    assert all(p.dtype == torch.float32 for p in master.parameters())  # the master stays fp32
    sampler = Engine(weights.loaded(loaded))
    assert sampler.runner.dtype == torch.bfloat16
    cfg = RLConfig(
        stage="e2e", num_steps=2, tasks_per_step=2, samples_per_task=2, max_new_tokens=8, learning_rate=1e-2
    )
    seen_refreshes: list[int] = []
    rollout = engine_rollout_fn(sampler)

    def rollout_fn(tasks, n, c):  # type: ignore[no-untyped-def]
        seen_refreshes.append(weights.refreshes)
        # the copy the sampler reads holds the master's current values, in bf16
        for name, p in master.named_parameters():
            assert torch.equal(dict(weights.module.named_parameters())[name], p.detach().to(torch.bfloat16))
        return rollout(tasks, n, c)

    history = run_stage(
        master,
        TASKS,
        cfg,
        rollout_fn=rollout_fn,
        reward_fn=lambda rs, c: [1.0, 0.0] * (len(rs) // 2),
        block_size=loaded.block_size,
        mask_token_id=loaded.ids.mask,
        pad_token_id=loaded.ids.pad,
        cpu=True,
        rollout_weights=weights,
    )
    assert [h.num_updates > 0 for h in history] == [True, True]
    assert seen_refreshes == [1, 2] and weights.refreshes == 3  # the start, then after each update
    own = dict(weights.module.named_parameters())
    for name, p in master.named_parameters():
        assert torch.equal(own[name], p.detach().to(torch.bfloat16)), name
    assert any(not torch.equal(own[n], initial[n]) for n in own)  # the updates reached the copy


def test_lora_parameters_outside_a_peft_layer_are_refused() -> None:
    """peft LoRA models are copied merged (test_train_rollout_lora.py); an adapter the copy does
    not know is refused rather than silently dropped."""

    class Lora(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lora_A = torch.nn.Linear(2, 2)

    with pytest.raises(ValueError, match="not a peft LoRA layer"):
        RolloutWeights(Lora())
