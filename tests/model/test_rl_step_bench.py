"""bench/rl_step.py at the tiny shape on the CPU: one BiC-RL step through the real training code
reports every figure the H200 run reports, its ratios computed from the measured figures; the
time guard stops with partial figures; the verifier's reward path scores what it is given.

Not covered: the figures themselves (CPU, tiny shape: meaningless), the CUDA paths (peak memory,
the fast sampler, verifier rewards that reach a correctness run): the H200 run does those
(bench/gpu_benches_rl.txt).
"""

from __future__ import annotations

import importlib.util
import json
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--shape", "tiny", "--rollouts", "4", "--samples-per-task", "2", "--max-new-tokens", "4"]


@pytest.fixture(scope="module")
def rl_step() -> ModuleType:
    spec = importlib.util.spec_from_file_location("rl_step_bench", ROOT / "bench" / "rl_step.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:  # tiny models: one intra-op thread is faster on a shared CPU
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_one_step_at_the_tiny_shape_reports_every_figure(
    rl_step: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "rl_step.json"
    report = rl_step.main([*TINY, "--rewards", "scripted", "--old-logprobs", "both", "--json", str(out)])
    printed = capsys.readouterr().out
    assert not report["partial"] and "error" not in report, report
    # (a) the baseline, (b) rollouts, rewards and the update: positive, measured figures
    assert report["baseline_batch"] == 4 and report["microbatches"] == [4]
    for key in ("baseline_tok_s", "baseline_s", "rollout_tok_s", "rollout_s", "update_s", "step_s"):
        assert report[key] > 0, key
    assert report["baseline_tokens"] > 0 and report["rollout_tokens"] > 0
    assert report["rollout_tok_s"] == pytest.approx(report["rollout_tokens"] / report["rollout_s"])
    assert report["baseline_tok_s"] == pytest.approx(report["baseline_tokens"] / report["baseline_s"])
    # the ratios are of the figures measured in this run
    assert report["rollout_over_generate"] == pytest.approx(
        report["rollout_tok_s"] / report["baseline_tok_s"]
    )
    assert report["update_over_rollout"] == pytest.approx(report["update_s"] / report["rollout_s"])
    # scripted rewards: the planted first sample of each task 1, the other 0 -> every group kept
    assert report["rewards_scored"] == 4 and report["rewards_positive"] == 2 and report["reward_mean"] == 0.5
    assert report["kept_rollouts"] == 4 and report["kept_groups"] == 2
    assert report["num_updates"] > 0 and report["replay_rows"] > 0
    # the update's replay is packed: fewer tokens a pass than the doubled rows it replaces
    assert 0 < report["replay_tokens"] < report["doubled_tokens"]
    assert report["packed_over_doubled"] == pytest.approx(report["replay_tokens"] / report["doubled_tokens"])
    # logp_old is the sampler's: no forward before the first optimizer step; one PPO epoch, one
    # optimizer step per minibatch
    assert report["update_forwards"] == {"no_grad": 0, "grad": 4, "steps": report["num_updates"]}
    # --old-logprobs both: the same rollouts updated again with logp_old from the no-grad replay
    # pass (but for the first of 4 minibatches, whose grad forward gives its own)
    assert report["replay_update_forwards"] == {"no_grad": 3, "grad": 4}
    assert report["replay_update_s"] > 0
    assert report["replay_update_over_rollout"] == pytest.approx(
        report["replay_update_s"] / report["rollout_s"]
    )
    assert report["peak_gib"] is None and report["vocab_size"] == 8448  # CPU: no GPU memory figure
    assert [t["key"] for t in report["targets"]] == [
        "peak_gib",
        "rollout_over_generate",
        "update_over_rollout",
    ]
    # the JSON holds the same figures; the RESULT line is the last line printed
    saved = json.loads(out.read_text())
    assert saved["update_over_rollout"] == pytest.approx(report["update_over_rollout"])
    last = printed.strip().splitlines()[-1]
    assert last.startswith("RESULT rl_step: ok;") and "rollout/generate" in last
    assert "the same update with logp_old from a no-grad replay pass" in last


def test_infill_prompts_in_micro_batches_under_a_small_kv_budget_with_lora(rl_step: ModuleType) -> None:
    """Stage-1 prompts, one row per micro-batch (the baseline then decodes one row too); with LoRA
    (when peft is installed) the rollouts sample from the master, as `cudice train rl` does."""
    lora_rank = 4 if importlib.util.find_spec("peft") is not None else 0
    # the tiny model's KV of one ~350-token row fits this budget, two rows do not
    budget = ["--rollout-memory-gib", "0.00015"]
    report = rl_step.main([*TINY, "--stage", "infill", *budget, "--lora-rank", str(lora_rank)])
    assert not report["partial"] and "error" not in report, report
    assert report["microbatches"] == [1, 1, 1, 1] and report["baseline_batch"] == 1
    assert report["prompt_tokens_min"] > 300  # the infilling prompt carries the worked example
    assert report["num_updates"] > 0 and report["rollout_over_generate"] > 0


def test_the_time_guard_stops_with_the_figures_measured_so_far(
    rl_step: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    report = rl_step.main([*TINY, "--rewards", "scripted", "--time-limit", "0"])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert report["partial"] and report["stopped_in"] == "build" and "time limit" in report["partial_reason"]
    assert report["prompt_tokens_min"] > 0 and "baseline_tok_s" not in report
    assert report["rollout_over_generate"] is None and report["update_over_rollout"] is None
    assert last.startswith("RESULT rl_step: PARTIAL;") and "stopped in build" in last


def test_the_update_progress_extrapolates_from_the_forwards_done(rl_step: ModuleType) -> None:
    """A watchdog stop in the update: the no-grad pass as measured, then the time per grad forward
    times the grad forwards expected."""
    report = rl_step.Report(rl_step.Clock(100.0), None)
    probe = rl_step.StepProbe(report, torch.device("cpu"))
    probe.expected_old, probe.expected_grad, probe.expected_steps = 4, 8, 4
    probe.update_start = rl_step.time.perf_counter() - 3.0
    with torch.no_grad():
        for _ in range(4):
            probe.on_forward(None, (), None)
    probe.last_old = probe.update_start + 1.0  # the no-grad pass took 1 s
    for _ in range(2):
        probe.on_forward(None, (), None)  # grad enabled: 2 of 8 in the 2 s since
    progress = probe.progress()
    assert progress["no_grad_forwards"] == "4/4" and progress["grad_forwards"] == "2/8"
    assert progress["update_s_estimate"] == pytest.approx(1.0 + 2.0 / 2 * 8, rel=0.05)
    assert progress["optimizer_steps"] == "0/4" and progress["update_peak_gib_so_far"] is None


def test_the_watchdog_fires_once_at_the_limit_and_never_after_stop(rl_step: ModuleType) -> None:
    fired = threading.Event()
    rl_step.Watchdog(0.01, fired.set)
    assert fired.wait(5)
    late = threading.Event()
    guard = rl_step.Watchdog(5, late.set)
    guard.stop()
    assert not late.wait(0.2)


def test_wide_ids_decode_as_ordinary_tokens_of_the_demo_tokenizer(rl_step: ModuleType) -> None:
    base, ids = rl_step.demo_tokenizer()
    wide = rl_step.WideTokenizer(base, 151936)
    assert len(wide) == 151936 and wide("x = 1")["input_ids"] == base("x = 1")["input_ids"]
    text = wide.decode([len(base), 151935, 100_000])
    assert text and "<|" not in text  # never a special token
    assert ids.mask is not None and ids.pad in ids.stop


def _recording_backend() -> Any:
    """A verify backend that records the candidates it gets: `correct` for a file with a
    `load_inline` call (the bundled candidates), `invalid_input` for anything else."""
    from cudice.verifier.backends import VerifyBackend, VerifyJob
    from cudice.verifier.config import VerifyConfig
    from cudice.verifier.source.result import Stage, Verdict, VerifyResult

    class Recording(VerifyBackend):
        def __init__(self) -> None:
            self.config = VerifyConfig()
            self.sources: list[str] = []

        def _submit(self, job: VerifyJob, config: VerifyConfig) -> Future[VerifyResult]:
            self.sources.append(job.source or "")
            verdict = Verdict.CORRECT if "load_inline" in (job.source or "") else Verdict.INVALID_INPUT
            fut: Future[VerifyResult] = Future()
            fut.set_result(VerifyResult(verdict, Stage.CORRECTNESS, str(job.path)))
            return fut

        def cancel(self, key: str) -> bool:
            return False

        def shutdown(self, *, cancel_pending: bool = True) -> None:
            pass

    return Recording()


def _garbage_rollouts(tasks: list[Any]) -> list[Any]:
    from cudice.model.train.types import Rollout

    return [
        Rollout(task=t, prompt_ids=[1], response_ids=[2], step_map=[0], text=f"garbage {k} (((")
        for t in tasks
        for k in range(2)
    ]


def test_verifier_rewards_plant_the_first_sample_and_score_the_rest_as_they_are(rl_step: ModuleType) -> None:
    """The verifier path (`verifier_reward_fn`) on a recording backend: the first sample of each
    task is verified as the bundled candidate, the others as sampled; garbage scores 0."""
    from cudice.model.train.config import RLConfig

    tasks, planted = rl_step.make_tasks("e2e", 2)
    rollouts = _garbage_rollouts(tasks)
    backend = _recording_backend()
    cfg: Any = RLConfig(stage="e2e", samples_per_task=2, required_speedup=None)
    rewards = rl_step.reward_function("verifier", True, planted, backend, None)(rollouts, cfg)
    assert rewards == [1.0, 0.0, 1.0, 0.0]
    relu, softmax = (ROOT / "examples" / f"{n}_cuda.py" for n in ("relu", "softmax"))
    assert backend.sources == [relu.read_text(), "garbage 1 (((", softmax.read_text(), "garbage 1 ((("]
    unplanted = rl_step.reward_function("verifier", False, planted, _recording_backend(), None)(rollouts, cfg)
    assert unplanted == [0.0, 0.0, 0.0, 0.0]


def test_a_failing_verifier_is_reported_and_the_step_goes_on_with_scripted_rewards(
    rl_step: ModuleType,
) -> None:
    from cudice.model.train.config import RLConfig
    from cudice.model.train.reward import Canary, RewardCanaryError

    tasks, planted = rl_step.make_tasks("e2e", 2)
    cfg: Any = RLConfig(stage="e2e", samples_per_task=2, required_speedup=None)
    broken = Canary("not a kernel", "class Model: pass", name="a canary this backend fails")
    errors: list[Exception] = []
    reward = rl_step.reward_function("verifier", True, planted, _recording_backend(), broken, errors.append)
    assert reward(_garbage_rollouts(tasks), cfg) == [1.0, 0.0, 1.0, 0.0]
    assert len(errors) == 1 and isinstance(errors[0], RewardCanaryError)
    with pytest.raises(RewardCanaryError):  # without on_error the failure stops the step
        rl_step.reward_function("verifier", True, planted, _recording_backend(), broken)(
            _garbage_rollouts(tasks), cfg
        )
