"""BiC-RL as TraceRL describes it: PPO minibatch updates, the sampler's exact last block, budgets,
seeds, prompt limits and the reward backend — on a tiny real Qwen3 or a scripted-logit runner."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from cudice.model.train.config import RLConfig
from cudice.model.train.data import RLTask
from cudice.model.train.objective import replay_rows
from cudice.model.train.rl import run_stage
from cudice.model.train.types import Rollout
from train_helpers import MASK_ID, PAD_ID, tiny_model

sys.path.insert(0, str(Path(__file__).parents[1]))  # tests/model: the scripted-logit runner
from model_stub import StubRunner

GOOD, BAD = [20, 21, 22, 23, 24, 25], [60, 61, 62, 63, 64, 65]
STEPS = [0, 1, 0, 1, 2, 0]
COMMON = {"block_size": 4, "mask_token_id": MASK_ID, "pad_token_id": PAD_ID, "cpu": True}


def _tasks(n: int, kind: str = "e2e") -> list[RLTask]:
    return [RLTask(kind=kind, level=1, pytorch_code=f"# task {i}", task_id=str(i)) for i in range(n)]


def _scripted(seen_seeds: list[int] | None = None):
    def rollout(tasks: Sequence[RLTask], n: int, cfg: RLConfig) -> list[Rollout]:
        if seen_seeds is not None:
            seen_seeds.append(cfg.seed)
        return [
            Rollout(t, [1, 2, 3], GOOD if k % 2 == 0 else BAD, STEPS, "good" if k % 2 == 0 else "bad")
            for t in tasks
            for k in range(n)
        ]

    return rollout


def _reward(rollouts: Sequence[Rollout], cfg: RLConfig) -> list[float]:
    return [1.0 if r.text == "good" else 0.0 for r in rollouts]


def _one_step(model: torch.nn.Module, **config: Any) -> Any:
    """One scripted e2e step (2 tasks x 4 samples, lr 1e-2) of `model`; its history entry."""
    cfg = RLConfig(
        stage="e2e", num_steps=1, tasks_per_step=2, samples_per_task=4, learning_rate=1e-2, **config
    )
    return run_stage(model, _tasks(2), cfg, rollout_fn=_scripted(), reward_fn=_reward, **COMMON)[0]


def test_ppo_minibatch_epochs_make_the_clip_and_kl_act() -> None:
    """One update per batch is REINFORCE (ratio 1: clip and KL exactly 0); several are PPO."""

    def one_step(ppo_epochs: int, num_minibatches: int):  # type: ignore[no-untyped-def]
        return _one_step(tiny_model(), ppo_epochs=ppo_epochs, num_minibatches=num_minibatches)

    h1 = one_step(ppo_epochs=1, num_minibatches=1)
    assert (h1.num_updates, h1.clip_fraction, h1.kl) == (1, 0.0, 0.0)
    h2 = one_step(ppo_epochs=2, num_minibatches=2)
    assert h2.num_updates == 4
    assert h2.clip_fraction > 0.0 and h2.kl > 0.0
    assert h2.num_rows == h1.num_rows  # rows of the batch, counted once per pass


@pytest.mark.parametrize(("num_minibatches", "no_grad"), [(1, 0), (2, 4), (4, 6)])
def test_the_first_minibatch_needs_no_pass_of_its_own(
    num_minibatches: int, no_grad: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The no-grad pass that gives `logp_old` skips the first minibatch's rollouts (their grad
    forward comes before any optimizer step): 8 rollouts, 2 epochs — no-grad forwards 8 - 8/M,
    grad forwards 16 — and the step's figures are those of the full no-grad pass, bit for bit. Taking
    a later minibatch's `logp_old` that way (after an optimizer step) would change them."""
    from cudice.model.train import ppo

    def one_step(fresh: Any = None) -> tuple[Any, dict[bool, int]]:
        if fresh is not None:
            monkeypatch.setattr(ppo, "_fresh", fresh)
        model = tiny_model()
        calls = {True: 0, False: 0}

        def count(mod: Any, args: Any, out: Any) -> None:
            calls[torch.is_grad_enabled()] += 1

        model.get_decoder().register_forward_hook(count)
        step = _one_step(model, ppo_epochs=2, num_minibatches=num_minibatches)
        monkeypatch.undo()
        return step, calls

    figures = ("loss", "kl", "clip_fraction", "grad_norm")
    step, calls = one_step()
    assert calls == {False: no_grad, True: 16}
    assert step.num_updates == 2 * num_minibatches
    assert step.kl > 0.0  # the second epoch sees the updated policy against the old one
    full, full_calls = one_step(lambda plan: set())  # every logp_old from the no-grad pass
    assert full_calls == {False: 8, True: 16}
    assert [getattr(step, f) for f in figures] == [getattr(full, f) for f in figures]
    if num_minibatches > 1:  # the control: a minibatch after an optimizer step differs
        late, _ = one_step(lambda plan: set(plan[1]))
        assert [getattr(late, f) for f in figures] != [getattr(full, f) for f in figures]


def test_the_sampler_s_log_probabilities_replace_the_no_grad_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """With `old_logprobs` "sampler", rollouts that carry the log-probabilities they were drawn
    with need no forward before the update, and the step equals the "replay" step where those are
    the master's own (here: computed from the same weights). A rollout whose record is missing or
    of the wrong length is scored by the no-grad pass instead."""
    from cudice.model.train.objective import pack_replay, packed_token_logprobs

    def recorded(model: torch.nn.Module, response: list[int]) -> list[float]:
        rows = replay_rows(
            [1, 2, 3], response, STEPS, block_size=4, mask_token_id=MASK_ID, pad_token_id=PAD_ID
        )
        with torch.no_grad():
            logp = packed_token_logprobs(model, pack_replay(rows, 4))  # (R, L)
        return logp.sum(dim=0)[3 : 3 + len(response)].tolist()

    def step(mode: str, broken: bool = False) -> tuple[Any, dict[bool, int]]:
        model = tiny_model()
        good, bad = recorded(model, GOOD), recorded(model, BAD)

        def rollout(tasks: Sequence[RLTask], n: int, cfg: RLConfig) -> list[Rollout]:
            out = []
            for t in tasks:
                for k in range(n):
                    logp = good if k % 2 == 0 else bad
                    if broken and k == 1:
                        logp = logp[:-1]  # not one per response id: the no-grad pass scores it
                    out.append(
                        Rollout(
                            t,
                            [1, 2, 3],
                            GOOD if k % 2 == 0 else BAD,
                            STEPS,
                            "good" if k % 2 == 0 else "bad",
                            "",
                            logp,
                        )
                    )
            return out

        calls = {True: 0, False: 0}
        model.get_decoder().register_forward_hook(
            lambda m, a, o: calls.__setitem__(torch.is_grad_enabled(), calls[torch.is_grad_enabled()] + 1)
        )
        cfg = RLConfig(
            stage="e2e",
            num_steps=1,
            tasks_per_step=2,
            samples_per_task=4,
            learning_rate=1e-2,
            ppo_epochs=2,
            num_minibatches=4,
            old_logprobs=mode,  # type: ignore[arg-type]
        )
        return run_stage(model, _tasks(2), cfg, rollout_fn=rollout, reward_fn=_reward, **COMMON)[0], calls

    figures = ("loss", "kl", "clip_fraction", "grad_norm")
    sampled, sampled_calls = step("sampler")
    replayed, replayed_calls = step("replay")
    assert sampled_calls == {False: 0, True: 16}
    assert replayed_calls == {False: 6, True: 16}
    assert sampled.kl > 0.0
    assert [getattr(sampled, f) for f in figures] == pytest.approx(
        [getattr(replayed, f) for f in figures], rel=1e-5, abs=1e-7
    )
    _, broken_calls = step("sampler", broken=True)
    assert broken_calls[False] in (1, 2)  # each task's second sample, unless its minibatch is the first
    with pytest.raises(ValueError, match="old_logprobs"):
        RLConfig(old_logprobs="master")  # type: ignore[arg-type]


def test_the_sparse_replay_updates_like_the_dense_one_and_auto_is_dense_on_a_cpu() -> None:
    """`replay_attention="sparse"` switches the trained model to the BlockMask replay and the
    step's figures stay the dense replay's (on a CPU the BlockMask's rule runs dense through SDPA);
    "auto" on a CPU and "dense" leave the model as it was."""
    from cudice.model.train.config import ModelSetup
    from cudice.model.train.objective import block_sparse_replay

    def one_step(attention: str) -> tuple[Any, torch.nn.Module]:
        model = tiny_model()
        step = _one_step(model, ppo_epochs=2, num_minibatches=2, setup=ModelSetup(replay_attention=attention))
        return step, model

    (dense, dense_model), (sparse, sparse_model), (_, auto_model) = map(one_step, ("dense", "sparse", "auto"))
    assert block_sparse_replay(sparse_model) and not block_sparse_replay(dense_model)
    assert not block_sparse_replay(auto_model)
    assert sparse.num_updates == dense.num_updates == 4 and sparse.kl > 0.0
    for field in ("loss", "kl", "clip_fraction", "grad_norm"):
        assert getattr(sparse, field) == pytest.approx(getattr(dense, field), rel=1e-4, abs=1e-7), field


def test_the_step_seed_reaches_the_rollouts_and_long_prompts_are_dropped() -> None:
    seeds: list[int] = []
    tasks = _tasks(3)
    cfg = RLConfig(
        stage="e2e", num_steps=3, tasks_per_step=2, samples_per_task=2, seed=11, max_prompt_tokens=5
    )
    seen: list[str] = []

    def rollout(batch: Sequence[RLTask], n: int, c: RLConfig) -> list[Rollout]:
        seen.extend(t.task_id for t in batch)
        return _scripted(seeds)(batch, n, c)

    def run(prompt_tokens: Callable[[RLTask], int]) -> None:
        run_stage(
            tiny_model(),
            tasks,
            cfg,
            rollout_fn=rollout,
            reward_fn=_reward,
            count_prompt_tokens=prompt_tokens,
            **COMMON,
        )

    run(lambda t: 9 if t.task_id == "1" else 3)
    assert seeds == [11, 12, 13]
    assert "1" not in seen and set(seen) == {"0", "2"}
    with pytest.raises(ValueError, match="max_prompt_tokens=5"):
        run(lambda t: 9)  # every prompt too long


def _stub_engine(tmp_path: Path):
    """An Engine over the tiny checkpoint whose forwards are a scripted-logit runner.

    The runner writes `script["answer"]` after a prompt of `script["prompt"]` tokens (both set
    by the test once it can tokenise).
    """
    from cudice.model.engine import Engine
    from cudice.model.loader import load_checkpoint
    from cudice.model.tiny import make_tiny

    loaded = load_checkpoint(str(make_tiny(tmp_path / "tiny", sdar_layout=True)), device="cpu")
    script: dict[str, Any] = {}

    def target(p: int) -> int:
        answer, k = script["answer"], p - script["prompt"]
        return answer[k] if 0 <= k < len(answer) else answer[-1]

    # varied confidence: some tokens clear the 0.9 threshold together, the others come one per step
    runner = StubRunner(
        vocab_size=len(loaded.tokenizer),
        target=target,
        confidence=lambda p: 0.97 if p % 3 == 0 else 0.5 + 0.01 * (p % 7),
    )
    return Engine(loaded, runner=runner), script, runner


def test_the_replayed_last_block_is_the_one_the_sampler_saw_eos_included(tmp_path) -> None:
    from cudice.model.train.rollout import engine_rollout_fn, task_prompt

    engine, script, runner = _stub_engine(tmp_path)
    ids = engine.loaded.ids
    eos = ids.stop[0]
    word = engine.encode("abc")
    task = _tasks(1)[0]
    script["prompt"] = len(engine.encode(task_prompt(task)))
    n = 9 if (script["prompt"] + 9) % 4 != 3 else 10  # the stop token inside a block that goes on past it
    script["answer"] = (word * 4)[:n] + [eos] + word * 4
    states: list[tuple[int, list[int]]] = []
    real_forward = runner.forward

    def recording(
        x: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor, cache: Any, logits: bool = True, last: int = 0
    ):
        if logits:  # a denoise step: the block as the sampler saw it (the last 4 columns when fused)
            states.append((int(pos[0, -4]), x[0, -4:].tolist()))
        return real_forward(x, mask, pos, cache, logits=logits, last=last)

    runner.forward = recording  # type: ignore[method-assign]
    cfg = RLConfig(stage="e2e", samples_per_task=2, temperature=0.0, max_new_tokens=64)
    rollout = engine_rollout_fn(engine)([task], 1, cfg)[0]

    answer = script["answer"]
    assert rollout.finish_reason == "eos"
    assert eos in rollout.response_ids and rollout.response_ids.index(eos) < len(rollout.response_ids) - 1
    assert (len(rollout.prompt_ids) + len(rollout.response_ids)) % 4 == 0  # whole blocks
    assert engine.encode(rollout.text) == answer[: answer.index(eos)]  # the reward reads the cut text
    rows = replay_rows(
        rollout.prompt_ids,
        rollout.response_ids,
        rollout.step_map,
        block_size=4,
        mask_token_id=ids.mask,
        pad_token_id=ids.pad,
    )
    last = len(rollout.prompt_ids) + len(rollout.response_ids) - 4
    sampler_states = [x for start, x in states if start == last]
    final = rows.clean[0, last : last + 4].tolist()
    replayed = [row[last : last + 4] for row in rows.noisy.tolist() if row[last : last + 4] != final]
    assert len(sampler_states) >= 2  # the last block took several denoising steps
    assert replayed == sampler_states
    eos_at = len(rollout.prompt_ids) + rollout.response_ids.index(eos)
    assert bool(rows.targets[:, eos_at].any())  # the stop token is trained on


def test_rollouts_run_in_microbatches_that_fit_the_budget_and_match_one_batch(tmp_path) -> None:
    from cudice.model.engine import load_engine
    from cudice.model.tiny import make_tiny
    from cudice.model.train.rollout import engine_rollout_fn, kv_bytes_per_token, microbatches

    engine = load_engine(str(make_tiny(tmp_path / "tiny", sdar_layout=True)), device="cpu")
    model_config = engine.loaded.model.config
    per_token = kv_bytes_per_token(model_config, 4)
    assert per_token == 2 * 2 * 2 * 16 * 4  # K+V · layers · kv heads · head_dim · fp32
    tasks = [RLTask("e2e", 1, "class Model: pass" + " # pad" * k, task_id=str(k)) for k in range(3)]
    base = RLConfig(stage="e2e", samples_per_task=2, temperature=0.0, max_new_tokens=8)
    budget = per_token * 700 / 1024**3  # about one row of ~700 tokens
    tight = RLConfig(
        stage="e2e", samples_per_task=2, temperature=0.0, max_new_tokens=8, rollout_memory_gib=budget
    )
    groups = microbatches([100, 300, 50, 600], model_config, tight, 4, 4)
    assert sorted(i for g in groups for i in g) == [0, 1, 2, 3] and max(len(g) for g in groups) < 4

    calls: list[int] = []
    real = engine.generate_texts

    def spy(prompts, config, **kw):
        calls.append(len(prompts))
        return real(prompts, config, **kw)

    engine.generate_texts = spy  # type: ignore[method-assign]
    one = engine_rollout_fn(engine)(tasks, 2, base)
    assert calls == [6]
    calls.clear()
    many = engine_rollout_fn(engine)(tasks, 2, tight)
    assert len(calls) > 1 and sum(calls) == 6
    assert [r.response_ids for r in many] == [r.response_ids for r in one]  # greedy: batching changes nothing
    assert [r.task.task_id for r in many] == ["0", "0", "1", "1", "2", "2"]


def test_rewards_come_from_the_backend_and_anti_cheat_cannot_be_switched_off() -> None:
    from concurrent.futures import Future

    from cudice.model.train.reward import check_reward_config, verifier_reward_fn
    from cudice.verifier.backends import VerifyBackend, VerifyJob
    from cudice.verifier.config import VerifyConfig
    from cudice.verifier.source.result import Stage, Verdict, VerifyResult

    class Backend(VerifyBackend):
        """Scripted verdicts; records the candidate and reference texts it was given."""

        def __init__(self, config: VerifyConfig) -> None:
            self.config = config
            self.files: list[tuple[str, str, str | None]] = []  # (candidate text, reference text, key)

        def _submit(self, job: VerifyJob, config: VerifyConfig) -> Future[VerifyResult]:
            assert job.reference is not None and config is self.config
            assert job.source is not None and not Path(job.path).exists()  # the candidate is text
            candidate = job.source
            self.files.append((candidate, job.reference_source or "", job.key))
            fut: Future[VerifyResult] = Future()
            fut.set_result(
                VerifyResult(
                    Verdict.CORRECT if "fast" in candidate else Verdict.INCORRECT,
                    Stage.TIMING,
                    str(job.path),
                    speedup=2.0,
                    speedup_min=1.9,
                )
            )
            return fut

        def cancel(self, key: str) -> bool:
            return False

        def shutdown(self, *, cancel_pending: bool = True) -> None:
            pass

    backend = Backend(VerifyConfig())
    task = RLTask("e2e", 1, "class Model: ...", task_id="t")
    rollouts = [Rollout(task, [], [], [], "```python\nfast kernel\n```"), Rollout(task, [], [], [], "slow")]
    rewards = verifier_reward_fn(backend)(rollouts, RLConfig(stage="e2e"))
    assert rewards == [1.0, 0.0]
    assert backend.files == [
        ("fast kernel\n", "class Model: ...", "t-0#0"),
        ("slow", "class Model: ...", "t-1#1"),
    ]
    with pytest.raises(ValueError, match="anti-cheat"):
        verifier_reward_fn(Backend(VerifyConfig(static_policy="lenient")))
    with pytest.raises(ValueError, match="anti-cheat"):
        check_reward_config(VerifyConfig(static_policy="lenient"))
    with pytest.raises(ValueError, match="compile_only"):
        check_reward_config(SimpleNamespace(static_policy="default", compile_only=True))


@pytest.mark.gpu
def test_reward_pool_rewards_the_bundled_relu_kernel() -> None:
    from cudice.model.train.reward import RewardJob, reward_pool, verify_texts
    from cudice.verifier.api import gpu_available

    if not gpu_available():
        pytest.skip("needs a GPU")
    root = Path(__file__).parents[3] / "examples"
    candidate = (root / "relu_cuda.py").read_text()
    reference = (root / "relu.py").read_text()
    with reward_pool(gpus=[0]) as pool:
        results = verify_texts(
            pool,
            [RewardJob("relu", candidate, reference), RewardJob("junk", "class ModelNew: pass\n", reference)],
        )
    assert results[0].is_correct and not results[1].is_correct


def test_reward_gpus_default_to_those_no_training_process_uses(monkeypatch, caplog) -> None:
    """One process: auto takes GPUs 1.. (the policy trains on 0); a lone GPU is shared, with a warning."""
    from cudice.model.train.cli import _verify_gpus
    from cudice.verifier import pool

    monkeypatch.setattr(pool, "count_gpus", lambda: 4)
    assert _verify_gpus("auto") == [1, 2, 3]
    assert _verify_gpus("5,6") == [5, 6]
    monkeypatch.setattr(pool, "count_gpus", lambda: 1)
    with caplog.at_level("WARNING"):
        assert _verify_gpus("auto") == [0]
    assert "under contention" in caplog.text
    monkeypatch.setattr(pool, "count_gpus", lambda: 0)
    with pytest.raises(ValueError, match="need a GPU"):
        _verify_gpus("auto")
    with pytest.raises(ValueError, match="comma-separated"):
        _verify_gpus("gpu4")
