"""BiC-RL mechanics with scripted rollouts and rewards on a tiny real Qwen3."""

from __future__ import annotations

import json
from collections.abc import Sequence
from types import SimpleNamespace

import pytest
import torch
from cudice.model.train.config import RLConfig
from cudice.model.train.data import RLTask, schedule
from cudice.model.train.objective import replay_rows, token_logprobs
from cudice.model.train.reward import reward_from_result
from cudice.model.train.rl import run_bic_rl, run_stage
from cudice.model.train.types import Rollout
from train_helpers import MASK_ID, PAD_ID, tiny_model

GOOD, BAD = [20, 21, 22, 23, 24, 25], [60, 61, 62, 63, 64, 65]
STEPS = [0, 1, 0, 1, 2, 0]
COMMON = {"block_size": 4, "mask_token_id": MASK_ID, "pad_token_id": PAD_ID, "cpu": True}


def _tasks(levels: Sequence[int], kind: str = "e2e") -> list[RLTask]:
    return [
        RLTask(kind=kind, level=lv, pytorch_code=f"# task {i}", task_id=str(i)) for i, lv in enumerate(levels)
    ]


def _rollouts(seen: list[str]):
    """Scripted rollouts (GOOD, BAD, GOOD, ...) per task; records each task as "kind:id" in `seen`."""

    def rollout(tasks: Sequence[RLTask], n: int, cfg: RLConfig) -> list[Rollout]:
        out = []
        for task in tasks:
            seen.append(f"{task.kind}:{task.task_id}")
            for k in range(n):
                resp = GOOD if k % 2 == 0 else BAD
                out.append(Rollout(task, [1, 2, 3], resp, STEPS, "good" if resp is GOOD else "bad"))
        return out

    return rollout


def _reward(rollouts: Sequence[Rollout], cfg: RLConfig) -> list[float]:
    return [1.0 if r.text == "good" else 0.0 for r in rollouts]


def _logp(model: torch.nn.Module, resp: list[int]) -> float:
    rows = replay_rows([1, 2, 3], resp, STEPS, block_size=4, mask_token_id=MASK_ID, pad_token_id=PAD_ID)
    with torch.no_grad():
        return float(token_logprobs(model, rows, 4)[rows.targets].sum())


def test_rl_raises_rewarded_answers_and_lowers_the_others() -> None:
    model = tiny_model()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    good0, bad0 = _logp(model, GOOD), _logp(model, BAD)
    cfg = RLConfig(stage="e2e", num_steps=4, tasks_per_step=2, samples_per_task=4, learning_rate=3e-3)
    seen: list[str] = []
    history = run_stage(
        model,
        _tasks([1, 1, 2]),
        cfg,
        rollout_fn=_rollouts(seen),
        reward_fn=_reward,
        **COMMON,
    )
    assert [h.num_kept_groups for h in history] == [2, 2, 2, 2]
    assert all(h.mean_reward == 0.5 for h in history)
    assert _logp(model, GOOD) > good0 and _logp(model, BAD) < bad0
    unchanged = [n for n, p in model.named_parameters() if torch.equal(p, before[n])]
    assert unchanged == []


def test_flat_groups_are_dropped_and_change_nothing() -> None:
    model = tiny_model()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    cfg = RLConfig(stage="e2e", num_steps=1, tasks_per_step=1, samples_per_task=2)
    history = run_stage(
        model,
        _tasks([1]),
        cfg,
        rollout_fn=_rollouts([]),
        reward_fn=lambda rs, c: [1.0] * len(rs),
        **COMMON,
    )
    assert history[0].num_kept_groups == 0 and history[0].num_rows == 0
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())


def test_task_files_load_easy_to_hard_and_the_schedule_wraps(tmp_path) -> None:
    from cudice.model.train.data import load_rl_tasks

    path = tmp_path / "e2e.jsonl"
    path.write_text(
        "".join(
            json.dumps({"idx": i, "level": lv, "pytorch_code": f"# {i}"}) + "\n"
            for i, lv in enumerate([3, 1, 2, 1])
        )
    )
    tasks = load_rl_tasks(path, "e2e")
    assert [(t.task_id, t.level) for t in tasks] == [("1", 1), ("3", 1), ("2", 2), ("0", 3)]  # stable
    assert [t.task_id for t in schedule(tasks, 0, 3)] == ["1", "3", "2"]
    assert [t.task_id for t in schedule(tasks, 1, 3)] == ["0", "1", "3"]


def test_bic_rl_runs_infill_then_e2e_and_saves_both(tmp_path) -> None:
    from cudice.model.tiny import make_tiny
    from cudice.model.train.checkpoint import read_marker
    from cudice.model.train.monitor import Monitor

    src = make_tiny(tmp_path / "src", sdar_layout=True)
    model = tiny_model()
    seen: list[str] = []
    markers: list[dict | None] = []
    records: list[dict] = []
    infill = RLConfig(stage="infill", num_steps=1, tasks_per_step=1, samples_per_task=2)
    e2e = RLConfig(stage="e2e", num_steps=3, tasks_per_step=1, samples_per_task=2, save_every_steps=2)
    out = run_bic_rl(
        model,
        _tasks([1], "infill"),
        _tasks([1, 2], "e2e"),
        infill,
        e2e,
        rollout_fn=_rollouts(seen),
        reward_fn=_reward,
        **COMMON,
        source_dir=src,
        out_dir=tmp_path / "out",
        on_step=lambda stats: markers.append(read_marker(tmp_path / "out" / "stage-e2e")),
        monitor=Monitor(4, emit=records.append),
    )
    # the JSON lines count the run's steps over both stages, as SFT's do; each stage's own index apart
    assert [(r["step"], r["stage"], r["stage_step"]) for r in records] == [
        (1, "infill", 0),
        (2, "e2e", 0),
        (3, "e2e", 1),
        (4, "e2e", 2),
    ]
    # stage 2's periodic checkpoint (every 2 steps) is there before step 3 runs; the final one after
    assert [m and m["step"] for m in markers] == [None, None, None, 2]
    assert read_marker(tmp_path / "out" / "stage-e2e")["step"] == 3
    assert [len(out["infill"]), len(out["e2e"])] == [1, 3]
    assert seen == ["infill:0", "e2e:0", "e2e:1", "e2e:0"]  # stage 1 first; stage 2 easy -> hard, wrapping
    assert [h.step for h in out["e2e"]] == [0, 1, 2]
    for stage in ("infill", "e2e"):
        marker = read_marker(tmp_path / "out" / f"stage-{stage}")
        assert marker is not None and marker["metrics"]["stage"] == stage
        assert (tmp_path / "out" / f"stage-{stage}" / "config.json").read_text() == (
            src / "config.json"
        ).read_text()
    with pytest.raises(ValueError, match="stage='infill' then one with stage='e2e'"):
        run_bic_rl(
            model,
            [],
            [],
            e2e,
            infill,
            rollout_fn=_rollouts([]),
            reward_fn=_reward,
            **COMMON,
        )


def test_reward_reads_the_verifier_record() -> None:
    from cudice.verifier.source.result import Stage, Verdict, VerifyResult

    fast = VerifyResult(Verdict.CORRECT, Stage.TIMING, "c.py", speedup=2.0, speedup_min=1.8)
    slow = VerifyResult(Verdict.CORRECT, Stage.TIMING, "c.py", speedup=0.9, speedup_min=0.8)
    wrong = VerifyResult(Verdict.INCORRECT, Stage.CORRECTNESS, "c.py")
    assert [reward_from_result(r, 1.0) for r in (fast, slow, wrong)] == [1.0, 0.5, 0.0]
    assert [reward_from_result(r, None) for r in (fast, slow, wrong)] == [1.0, 1.0, 0.0]
    assert reward_from_result(SimpleNamespace(is_correct=False), None) == 0.0


def test_config_errors_name_the_value_and_the_rule() -> None:
    with pytest.raises(ValueError, match="samples_per_task=1 must be >= 2"):
        RLConfig(samples_per_task=1)
    with pytest.raises(ValueError, match="stage='sft'"):
        RLConfig(stage="sft")  # type: ignore[arg-type]


class _Crash(Exception):
    pass


@pytest.mark.parametrize("crash_at", [("infill", 1), ("e2e", 0), ("e2e", 2)])
def test_a_resumed_bic_rl_run_repeats_the_uninterrupted_steps(tmp_path, crash_at) -> None:
    """Killed during a step, resumed from the last state (every step here, and each stage's end):
    the remaining steps log the figures of an uninterrupted run and end on its weights. ("e2e", 0)
    resumes from stage 1's final state and starts stage 2 with a fresh optimizer."""
    from cudice.model.tiny import make_tiny

    src = make_tiny(tmp_path / "src", sdar_layout=True)
    ppo = {"tasks_per_step": 1, "samples_per_task": 4, "learning_rate": 3e-3, "ppo_epochs": 2}
    infill = RLConfig(stage="infill", num_steps=2, save_every_steps=1, num_minibatches=2, **ppo)
    e2e = RLConfig(stage="e2e", num_steps=3, save_every_steps=1, num_minibatches=2, **ppo)

    def run(model, out, on_step=None, resume=False):  # type: ignore[no-untyped-def]
        stats = run_bic_rl(
            model,
            _tasks([1, 2], "infill"),
            _tasks([1, 2, 3]),
            infill,
            e2e,
            rollout_fn=_rollouts([]),
            reward_fn=_reward,
            source_dir=src,
            out_dir=out,
            on_step=on_step,
            resume=resume,
            **COMMON,
        )
        return [(s.stage, s.step, s.loss, s.kl, s.clip_fraction) for s in stats["infill"] + stats["e2e"]]

    whole_model = tiny_model()
    whole = run(whole_model, tmp_path / "whole")
    logged: list[tuple] = []

    def crash(s):  # type: ignore[no-untyped-def]
        logged.append((s.stage, s.step, s.loss, s.kl, s.clip_fraction))
        if (s.stage, s.step) == crash_at:
            raise _Crash

    with pytest.raises(_Crash):
        run(tiny_model(), tmp_path / "cut", crash)
    resumed_model = tiny_model(seed=7)  # other weights: everything must come from the saved state
    rest = run(resumed_model, tmp_path / "cut", resume=True)
    assert [s[:2] for s in logged[:-1] + rest] == [s[:2] for s in whole]
    figures = [x for s in logged[:-1] + rest for x in s[2:]]  # loss, kl, clip fraction per step
    assert figures == pytest.approx([x for s in whole for x in s[2:]], rel=1e-5, abs=1e-9)
    for p, q in zip(whole_model.parameters(), resumed_model.parameters(), strict=True):
        assert torch.allclose(p, q, atol=1e-6)
    # a fresh run into the same folder drops the old states: a resume continues the new run
    with pytest.raises(_Crash):
        run(tiny_model(), tmp_path / "whole", lambda s: (_ for _ in ()).throw(_Crash()))
    assert not (tmp_path / "whole" / "stage-e2e" / "train_state").exists()


def test_rl_refuses_fsdp_and_deepspeed_and_says_what_to_use() -> None:
    """RL ranks run different numbers of forwards; FSDP's forwards are collectives and would hang."""
    from accelerate.utils import DistributedType
    from cudice.model.train.rl import _check_backend

    for backend in (DistributedType.FSDP, DistributedType.DEEPSPEED):
        with pytest.raises(ValueError, match="DDP with --lora-rank"):
            _check_backend(SimpleNamespace(distributed_type=backend))
    _check_backend(SimpleNamespace(distributed_type=DistributedType.MULTI_GPU))  # DDP runs
