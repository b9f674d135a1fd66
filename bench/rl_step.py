"""One BiC-RL step at the DICE-1.7B shape against `cudice generate`'s batched decode, in one run.

Role: the figures of the one-step BiC-RL targets at the DICE-1.7B shape on one H200, all measured
in the same process:
  (a) the baseline: `cudice generate`'s decode path (an `Engine` over a frozen bf16 copy of the
      weights, fast path where the model sits on a GPU, warmed up as `load_engine` does, then a
      decode at the same batch and cache size stopped after a few blocks) on one batch of the
      step's own prompts, with the rollouts' sampler settings (dynamic strategy,
      threshold 0.9, temperature 1) and token budget; the batch is the rollouts' micro-batch
      (`cudice.model.train.rollout.microbatches` under `--rollout-memory-gib`), or `--baseline-batch`;
  (b) one step of `cudice.model.train.rl.run_stage`, wired as `cudice train rl` wires it (a bf16
      `RolloutWeights` copy sampled by `engine_rollout_fn`, `verifier_reward_fn` over a
      `reward_pool` with the default canary, `ppo_update` over fp32 master weights):
      rollout tokens/s and its ratio to (a), the reward time, the update time and its ratio to
      the rollout time;
  (c) the peak GPU memory of the step (`torch.cuda.max_memory_allocated`; the rollout's peak and
      the update's peak beside it).
Progress lines go to stdout as the run goes; the last line is `RESULT rl_step: ...`; the figures
also go to `$OUT/rl_step.json` when OUT is set (or to `--json PATH`).

Contract (what the figures mean):
- the model is a Qwen3 of the chosen shape with random weights (`--shape dice-1.7b`: hidden 2048,
  28 layers, 16/8 heads, head_dim 128, intermediate 6144, vocabulary 151,936, untied head, as
  bench/train_smoke.py and bench/model_speed.py build it; `--shape tiny`: cudice.model.tiny's dims,
  for the CPU test). Nothing is downloaded; the prompts are DICE's RL prompts
  (`cudice.model.train.rollout.task_prompt`) over the bundled references examples/relu.py and
  examples/softmax.py, tokenized with the bundled demo checkpoint's BPE tokenizer
  (model/assets/demo; Qwen's tokenizer is not available offline, so the prompt lengths, printed,
  are not a real DICE run's). Sampled ids past that tokenizer's vocabulary decode to one of its
  ordinary tokens (`WideTokenizer`), so every sampled id still becomes text;
- random weights are never confident: every denoise step reveals one token (4 replay rows per
  rollout with block 4, the most the replay can have) and most answers run to `--max-new-tokens`.
  A trained model's update is cheaper than this one; its rollouts stop earlier;
- rewards (`--rewards verifier`, the default on a GPU): the real training path. Random weights
  write garbage, and it is scored as it is (mostly a syntax error: 0). So that the groups have a
  spread and the update has work, the first sample of each task has its text replaced by the
  bundled correct candidate of its reference before verification ("planted", as in
  bench/train_smoke.py; `--no-plant` turns it off); the replayed tokens stay the sampled ones.
  On one H200 the verifier's runs share the policy's GPU (idle while rewards run). A verifier
  that raises (its canary fails, the pool breaks) is reported (`reward_error`, "VERIFIER FAILED"
  in the RESULT line) and the step goes on with scripted rewards, so the update is still measured.
  Without a GPU a correct kernel stops at `compiled` (an infrastructure verdict: not scored), so
  `--rewards scripted` (the default without a GPU) gives the planted sample 1 and the others 0
  without the verifier, to exercise the update on the CPU;
- the update time runs from the reward function's return to `run_stage`'s return: `ppo_update`
  (the pre-update log-probabilities, the minibatch steps) and the refresh of the rollout copy;
- ratios are of figures measured in this run; tokens are the rollouts' replayed tokens (every
  decoded block, untrimmed), counted the same way for the baseline;
- time guard: `--time-limit` seconds (default 450). Before the step the rollout time is predicted
  from the baseline (every row running to the token budget); if the run would pass the limit it
  stops there with the figures it has. A watchdog (when run as a script) prints the partial
  figures at the limit, with the update's progress (replay forwards done, an extrapolated time
  marked as an estimate: the no-grad pass as measured, then the time per grad forward so far times
  the grad forwards left; the optimizer steps taken, since the peak lacks AdamW's state before the
  first one), writes the JSON and exits with status 3 (also the status of a run that
  stopped early or failed: an OOM or a failing phase is reported with the figures before it).

At the DICE-1.7B shape the update may outlast the limit by itself: the SFT rate of
bench/train_smoke.py at this shape (5,454 tokens/s, L = 2048, docs/benchmarks.md) puts 256 rollouts
x 4 replay rows of ~2,300 tokens (fwd + bwd, plus the no-grad pass) at 6-8 minutes. The partial
figures (rollout ratio measured, update ratio and peak estimated) are then the ones to read.

Usage (the H200 call: bench/gpu_benches_rl.txt):
  python bench/rl_step.py [--shape dice-1.7b] [--rollouts 256] [--max-new-tokens 1536]
      [--samples-per-task 16] [--ppo-epochs 1] [--num-minibatches 4] [--rollout-memory-gib 16]
      [--gradient-checkpointing] [--replay-attention auto|sparse|dense]
      [--rewards auto|verifier|scripted] [--time-limit 450] [--quick]
  python bench/rl_step.py --shape tiny --rollouts 4 --samples-per-task 2 --max-new-tokens 8  # CPU

`--lora-rank` samples, as `cudice train rl` does, from the bf16 copy holding the merged weights on
the fast path (model/train/rollout.py). Not covered: several GPUs (FSDP, a separate reward GPU), a
real DICE checkpoint or tokenizer, more than one step (each stage's later steps reuse the compiled
layers).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from cudice.model.tiny import TINY_DIMS

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
TASK_NAMES = ("relu", "softmax")  # bundled references with a correct candidate (<name>_cuda.py)
GIB = 2**30
PARTIAL_EXIT = 3
WARMUP_FORWARDS = 16  # the baseline's warm-up: the prefill and three blocks of four steps

SHAPES: dict[str, dict[str, Any]] = {
    # Qwen3-1.7B / SDAR-1.7B-Chat / DICE-1.7B config.json dims (untied lm_head)
    "dice-1.7b": {
        "vocab_size": 151936,
        "hidden_size": 2048,
        "intermediate_size": 6144,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "tie_word_embeddings": False,
    },
    # cudice.model.tiny's dims (build_master sets positions, RoPE and norm eps for every shape); a
    # vocabulary wider than the demo tokenizer's 8,192 entries (WideTokenizer in use)
    "tiny": {
        "vocab_size": 8448,
        **{
            k: v
            for k, v in TINY_DIMS.items()
            if k not in ("max_position_embeddings", "rope_theta", "rms_norm_eps")
        },
    },
}
TARGETS = (  # (report key, op, bound, what): the one-step targets at the DICE-1.7B shape
    ("peak_gib", "<=", 100.0, "peak GPU memory of the step, GiB"),
    ("rollout_over_generate", ">=", 0.5, "rollout tok/s over cudice generate's at the same batch"),
    ("update_over_rollout", "<=", 2.0, "update time over rollout time"),
)
ESTIMATES = {"peak_gib": "peak_gib_so_far", "update_over_rollout": "update_over_rollout_estimate"}


# --- clock, report, time guard -------------------------------------------------------------------
class TimeUp(Exception):
    """The run would pass `--time-limit`: stop with the figures measured so far."""


class Clock:
    def __init__(self, limit_s: float) -> None:
        self.start = time.perf_counter()
        self.limit_s = limit_s

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def check(self, what: str, predicted_s: float = 0.0) -> None:
        """Raise `TimeUp` if `what` (predicted to take `predicted_s`) would end past the limit."""
        if self.elapsed() + predicted_s > self.limit_s:
            raise TimeUp(
                f"{what} would end past the time limit ({self.elapsed():.0f} s elapsed + "
                f"{predicted_s:.0f} s predicted > {self.limit_s:.0f} s)"
            )


class Report:
    """The figures, filled in phase by phase; `finish` prints the RESULT line once (main thread or
    watchdog, whichever comes first) and writes the JSON."""

    def __init__(self, clock: Clock, json_path: Path | None) -> None:
        self.clock = clock
        self.json_path = json_path
        self.data: dict[str, Any] = {"partial": False, "phase": "start"}
        self.lock = threading.Lock()
        self.finished = False
        self.update_progress: Callable[[], dict[str, Any]] | None = None  # set while the update runs
        self.cleanups: list[Callable[[], None]] = []  # what the watchdog closes before exiting (the pool)

    def set(self, **values: Any) -> None:
        with self.lock:
            self.data.update(values)

    def phase(self, name: str, message: str = "") -> None:
        self.set(phase=name)
        log(f"[{self.clock.elapsed():6.1f} s] {name}{': ' + message if message else ''}")

    def finish(self, partial_reason: str | None = None) -> dict[str, Any] | None:
        with self.lock:
            if self.finished:
                return None
            self.finished = True
            data = dict(self.data)
        if partial_reason is not None:
            data.update(partial=True, partial_reason=partial_reason, stopped_in=data.get("phase"))
            if data.get("phase") == "update" and self.update_progress is not None:
                progress = self.update_progress()
                estimate, rollout_s = progress.get("update_s_estimate"), data.get("rollout_s")
                if estimate is not None and rollout_s:
                    data["update_over_rollout_estimate"] = estimate / rollout_s
                peaks = [p for p in (data.get("rollout_peak_gib"), progress["update_peak_gib_so_far"]) if p]
                if peaks:
                    data["peak_gib_so_far"] = max(peaks)
                data["update_progress"] = progress
        data["wall_s"] = self.clock.elapsed()
        data["ratios"] = ratios(data)
        data.update(data["ratios"])
        data["targets"] = print_targets(data)
        if self.json_path is not None:
            self.json_path.parent.mkdir(parents=True, exist_ok=True)
            self.json_path.write_text(json.dumps(data, indent=2, default=str))
            data["json"] = str(self.json_path)
        print(result_line(data), flush=True)
        return data


class Watchdog:
    """Calls `on_limit()` once, from a daemon thread, unless `stop()` comes within `limit_s`."""

    def __init__(self, limit_s: float, on_limit: Callable[[], None]) -> None:
        self._done = threading.Event()
        self._on_limit = on_limit
        self._thread = threading.Thread(target=self._run, args=(limit_s,), daemon=True, name="rl-step-guard")
        self._thread.start()

    def _run(self, limit_s: float) -> None:
        if not self._done.wait(max(limit_s, 0.0)):
            self._on_limit()

    def stop(self) -> None:
        self._done.set()


def log(message: str) -> None:
    print(message, flush=True)


# --- model, tokenizer, tasks -----------------------------------------------------------------------
class WideTokenizer:
    """A small BPE tokenizer standing in for a model with a wider vocabulary: text encodes as the
    base tokenizer encodes it; an id past the base's vocabulary decodes as one of the base's
    ordinary (non-special) tokens, so random samples over the whole vocabulary become text."""

    def __init__(self, base: Any, vocab_size: int) -> None:
        if vocab_size < len(base):
            raise ValueError(
                f"the model's vocabulary ({vocab_size}) is narrower than the tokenizer's ({len(base)}): "
                "prompt ids would index past the embedding; widen the shape's vocab_size"
            )
        self.base = base
        self.vocab_size = vocab_size
        self.base_size = len(base)
        self.first_plain = max(base.all_special_ids) + 1  # the demo's specials are its first ids

    def __call__(self, text: Any, **kwargs: Any) -> Any:
        return self.base(text, **kwargs)

    def __len__(self) -> int:
        return self.vocab_size

    def decode(self, ids: Sequence[int], **kwargs: Any) -> str:
        n, first = self.base_size, self.first_plain
        mapped = [i if i < n else first + (i - n) % (n - first) for i in ids]
        return str(self.base.decode(mapped, **kwargs))


def build_master(shape: str, device: Any, pad_id: int, seed: int) -> Any:
    """The trainer's fp32 master: a random `Qwen3ForCausalLM` of `shape`, built on `device`."""
    import torch
    import transformers

    cfg = transformers.Qwen3Config(
        **SHAPES[shape],
        max_position_embeddings=32768,
        rope_parameters={"rope_type": "default", "rope_theta": 1e6},
        rms_norm_eps=1e-6,
        hidden_act="silu",
        attention_bias=False,
        pad_token_id=pad_id,
        bos_token_id=pad_id,
        eos_token_id=pad_id,
    )
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    with torch.device(device):
        model = transformers.Qwen3ForCausalLM(cfg)
    with torch.no_grad():  # random but not degenerate: unit-ish activations (bench/model_speed.py)
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.02)
    return model.eval()


def demo_tokenizer() -> tuple[Any, Any]:
    """The demo checkpoint's tokenizer (model/assets/demo) and its ids: mask, pad, and the stops
    `<|im_end|>` and `<|endoftext|>`."""
    from cudice.model.bundled import DEMO_DIR
    from cudice.model.loader import TokenIds, load_tokenizer

    base = load_tokenizer(DEMO_DIR)
    tid = base.convert_tokens_to_ids
    ids = TokenIds(
        mask=tid("<|MASK|>"), pad=tid("<|endoftext|>"), stop=(tid("<|im_end|>"), tid("<|endoftext|>"))
    )
    return base, ids


def loaded_model(master: Any, device: Any, base: Any, ids: Any) -> Any:
    """A `LoadedModel` for `master` with the demo tokenizer (widened to the model's vocabulary), block 4."""
    import torch
    from cudice.model.bundled import DEMO_DIR
    from cudice.model.loader import LoadedModel

    return LoadedModel(
        model=master,
        tokenizer=WideTokenizer(base, master.config.vocab_size),
        path=DEMO_DIR,
        model_type="sdar",
        block_size=4,
        ids=ids,
        device=torch.device(device),
        dtype=torch.float32,
    )


def make_tasks(stage: str, count: int) -> tuple[list[Any], dict[str, str]]:
    """`count` tasks alternating over the bundled references, and each reference's planted answer."""
    from cudice.model.scaffold import split_scaffold
    from cudice.model.train.data import RLTask

    tasks, planted = [], {}
    for k in range(count):
        name = TASK_NAMES[k % len(TASK_NAMES)]
        reference = (EXAMPLES / f"{name}.py").read_text()
        candidate = (EXAMPLES / f"{name}_cuda.py").read_text()
        planted[reference] = f"```python\n{candidate}```"
        if stage == "e2e":
            tasks.append(RLTask("e2e", 1, reference, task_id=f"{name}-{k}"))
        else:
            s = split_scaffold(candidate, f"{name}_cuda.py")
            tasks.append(
                RLTask(
                    "infill",
                    1,
                    reference,
                    prefix=s.prefix,
                    suffix=s.suffix,
                    reference_middle=s.middle,
                    task_id=f"{name}-{k}",
                )
            )
    return tasks, planted


# --- rewards -----------------------------------------------------------------------------------------
def reward_function(
    mode: str,
    plant: bool,
    planted: dict[str, str],
    backend: Any,
    canary: Any,
    on_error: Callable[[Exception], None] | None = None,
) -> Callable[[Sequence[Any], Any], list[float | None]]:
    """The step's `RewardFn`: the verifier's (planted first samples) or the scripted one.

    `on_error`: a verifier that raises (its canary failed, the pool broke) is reported to it and
    the step goes on with the scripted rewards, so that one scarce GPU run still measures the
    update; without it the error stops the step."""

    def scripted(rollouts: Sequence[Any], cfg: Any) -> list[float | None]:
        return [1.0 if plant and i % cfg.samples_per_task == 0 else 0.0 for i in range(len(rollouts))]

    if mode == "scripted":
        return scripted
    from cudice.model.train.reward import verifier_reward_fn

    verified = verifier_reward_fn(backend, canary=canary)

    def reward(rollouts: Sequence[Any], cfg: Any) -> list[float | None]:
        if plant:
            rollouts = [
                dataclasses.replace(r, text=planted[r.task.pytorch_code])
                if i % cfg.samples_per_task == 0
                else r
                for i, r in enumerate(rollouts)
            ]
        try:
            return list(verified(rollouts, cfg))
        except Exception as exc:
            if on_error is None:
                raise
            on_error(exc)
            return scripted(rollouts, cfg)

    return reward


# --- the step's probes ---------------------------------------------------------------------------------
class StepProbe:
    """Wraps the step's rollout and reward functions to time the phases (device synchronised) and
    read the memory peaks; counts the master's forwards during the update."""

    def __init__(self, report: Report, device: Any) -> None:
        self.report = report
        self.device = device
        self.update_start: float | None = None
        self.expected_old = 0  # no-grad replay forwards (logp_old): kept rollouts but the first minibatch's
        self.expected_grad = 0  # forwards with grad, one per kept rollout and PPO epoch
        self.expected_steps = 0  # optimizer steps: one per non-empty minibatch and PPO epoch
        self.done_old = 0
        self.done_grad = 0
        self.done_steps = 0
        self.last_old: float | None = None  # when the last no-grad forward ended
        self.adam_gib = 0.0  # AdamW's two fp32 moments of the trained parameters
        self.captured: tuple[list[Any], list[float | None]] | None = None  # the step's rollouts, rewards

    def sync(self) -> None:
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def peak_gib(self) -> float | None:
        import torch

        return torch.cuda.max_memory_allocated() / GIB if self.device.type == "cuda" else None

    def rollouts(self, inner: Callable[..., Any]) -> Callable[..., Any]:
        def rollout(tasks: Sequence[Any], samples_per_task: int, cfg: Any) -> Any:
            self.report.phase("rollouts", f"{len(tasks)} tasks x {samples_per_task} samples")
            self.sync()
            start = time.perf_counter()
            out = inner(tasks, samples_per_task, cfg)
            self.sync()
            seconds = time.perf_counter() - start
            tokens = sum(len(r.response_ids) for r in out)
            answer = sum(len(r.step_map) for r in out)
            self.report.set(
                rollout_s=seconds,
                rollout_tokens=tokens,
                rollout_tok_s=tokens / seconds if seconds > 0 else 0.0,
                rollout_answer_tokens=answer,
                rollout_finish=dict(collections.Counter(r.finish_reason for r in out)),
                rollout_peak_gib=self.peak_gib(),
            )
            log(
                f"[{self.report.clock.elapsed():6.1f} s] rollouts: {len(out)} answers, {tokens} tokens in "
                f"{seconds:.1f} s = {tokens / max(seconds, 1e-9):.1f} tok/s"
            )
            return out

        return rollout

    def rewards(self, inner: Callable[..., Any]) -> Callable[..., Any]:
        def reward(rollouts: Sequence[Any], cfg: Any) -> list[float | None]:
            import torch
            from cudice.model.train.objective import group_advantages

            self.report.phase("rewards", f"{len(rollouts)} rollouts")
            start = time.perf_counter()
            out = list(inner(rollouts, cfg))
            seconds = time.perf_counter() - start
            scored = [r for r in out if r is not None]
            _, keep = group_advantages(out, cfg.samples_per_task)
            kept = sum(k and bool(r.response_ids) for k, r in zip(keep, rollouts, strict=True))
            # the first minibatch's rollouts take their logp_old from their first grad forward, and
            # with old_logprobs "sampler" every rollout that recorded its log-probabilities (ppo.py)
            unrecorded = sum(
                k and bool(r.response_ids) and len(r.logprobs) != len(r.response_ids)
                for k, r in zip(keep, rollouts, strict=True)
            )
            scored_old = unrecorded if cfg.old_logprobs == "sampler" else kept
            self.expected_old = scored_old - scored_old // cfg.num_minibatches
            self.expected_grad = kept * cfg.ppo_epochs
            self.captured = (list(rollouts), out)
            self.expected_steps = min(kept, cfg.num_minibatches) * cfg.ppo_epochs
            self.report.set(
                reward_s=seconds,
                rewards_scored=len(scored),
                rewards_unscored=len(out) - len(scored),
                rewards_positive=sum(r > 0 for r in scored),
                reward_mean=sum(scored) / len(scored) if scored else None,
                kept_rollouts=kept,
            )
            log(
                f"[{self.report.clock.elapsed():6.1f} s] rewards in {seconds:.1f} s: {len(scored)} scored "
                f"({sum(r > 0 for r in scored)} > 0), {len(out) - len(scored)} not scored; "
                f"{kept} rollouts kept for the update"
            )
            self.sync()
            if self.device.type == "cuda":
                torch.cuda.reset_peak_memory_stats()  # the update's own peak from here
            self.report.update_progress = self.progress
            self.report.phase(
                "update", f"{self.expected_old} no-grad forwards, {kept} x {cfg.ppo_epochs} with grad"
            )
            self.update_start = time.perf_counter()
            return out

        return reward

    def on_forward(self, module: Any, args: Any, output: Any) -> None:
        import torch

        if self.update_start is None:
            return
        if torch.is_grad_enabled():
            self.done_grad += 1
        else:
            self.done_old += 1
            self.last_old = time.perf_counter()

    def on_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self.update_start is not None:
            self.done_steps += 1

    def progress(self) -> dict[str, Any]:
        """The update's forwards and optimizer steps so far, and an extrapolated update time: the
        no-grad pass (the rest of `logp_old`, which comes first) as measured or scaled, then the time per grad
        forward (its backward and the optimizer steps included) times the grad forwards expected."""
        now = time.perf_counter()
        start = self.update_start or now
        estimate = None
        if self.done_grad and (self.last_old is not None or not self.expected_old):
            since = self.last_old if self.last_old is not None else start  # no no-grad pass: one minibatch
            estimate = (since - start) + (now - since) / self.done_grad * self.expected_grad
        elif self.done_old:  # a grad forward and its backward counted as 3 no-grad forwards
            estimate = (now - start) * (self.expected_old + 3 * self.expected_grad) / self.done_old
        return {
            "seconds_so_far": now - start,
            "no_grad_forwards": f"{self.done_old}/{self.expected_old}",
            "grad_forwards": f"{self.done_grad}/{self.expected_grad}",
            "optimizer_steps": f"{self.done_steps}/{self.expected_steps}",
            "update_s_estimate": estimate,
            "update_peak_gib_so_far": self.peak_gib(),
            # before the first optimizer step the peak lacks AdamW's state: this much more
            "adam_state_gib": self.adam_gib,
        }


# --- the measurements ------------------------------------------------------------------------------
def sampler_config(config: Any, seed: int) -> Any:
    """The rollouts' sampler settings (`engine_rollout_fn`'s) with `seed`."""
    from cudice.model.config import SamplerConfig

    return SamplerConfig(
        strategy="low_confidence_dynamic",
        threshold=config.threshold,
        temperature=config.temperature,
        max_new_tokens=config.max_new_tokens,
        seed=seed,
    )


def measure_baseline(
    engine: Any, prompts: list[str], config: Any, probe: StepProbe, report: Report
) -> dict[str, Any]:
    """`cudice generate`'s decode of `prompts` as one batch, after a warm-up at the same batch and
    cache size (its graphs, kernels and autotuning, which the rollouts then find done) that stops
    after `WARMUP_FORWARDS` forwards."""
    import torch

    cfg = sampler_config(config, config.seed * 100_003)
    polls = iter(range(WARMUP_FORWARDS))  # the same batch and cache size, stopped after a few blocks
    engine.generate_texts(prompts, cfg, should_stop=lambda: next(polls, None) is None)
    probe.sync()
    if probe.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    result = engine.generate_texts(prompts, cfg)
    probe.sync()
    seconds = time.perf_counter() - start
    tokens = sum(len(r.block_tokens) for r in result.rows)
    decode_s = max(result.seconds - result.prefill_seconds, 1e-9)
    figures = {
        "baseline_batch": len(prompts),
        "baseline_tokens": tokens,
        "baseline_s": seconds,
        "baseline_prefill_s": result.prefill_seconds,
        "baseline_tok_s": tokens / seconds if seconds > 0 else 0.0,
        "baseline_decode_tok_s": tokens / decode_s,
        "baseline_forwards": result.num_forwards,
        "baseline_peak_gib": probe.peak_gib(),
    }
    report.set(**figures)
    log(
        f"[{report.clock.elapsed():6.1f} s] baseline (cudice generate, batch {len(prompts)}): "
        f"{tokens} tokens in {seconds:.1f} s = {figures['baseline_tok_s']:.1f} tok/s "
        f"({figures['baseline_decode_tok_s']:.1f} decode only), {result.num_forwards} forwards"
    )
    return figures


def warm_up_replay(master: Any, config: Any, loaded: Any, block: int, device: Any) -> None:
    """What `ppo_update` does to the master on its first step, done before the step
    (`ppo.prepare_replay`: the replay attention switched as configured, the layers compiled), and
    one forward + backward of a synthetic packed replay under the update's autocast, so that the
    step's update time is the steady state a run of many steps sees (the compile is paid once per
    run). The gradients are dropped."""
    import torch
    from cudice.model.train.objective import ReplayRows, pack_replay, packed_token_logprobs, replay_rows
    from cudice.model.train.ppo import prepare_replay

    prepare_replay(master, config.setup, device)
    generator = torch.Generator().manual_seed(0)
    for prompt, answer in ((37, 200), (53, 331)):  # two lengths: the dynamic-shape graph, not one size
        ids = torch.randint(10, master.config.vocab_size, (prompt + answer,), generator=generator).tolist()
        steps = [k // block * block + (block - 1 - k % block) for k in range(answer)]
        rows = replay_rows(
            ids[:prompt],
            ids[prompt:],
            steps,
            block_size=block,
            mask_token_id=loaded.ids.mask,
            pad_token_id=loaded.ids.pad,
        )
        rows = ReplayRows(rows.clean.to(device), rows.noisy.to(device), rows.targets.to(device))
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=config.setup.precision != "fp32"):
            logp = packed_token_logprobs(master, pack_replay(rows, block))
        logp.sum().backward()
    master.zero_grad(set_to_none=True)
    torch.cuda.synchronize()


def measure(args: argparse.Namespace, report: Report, clock: Clock) -> None:
    """Fill `report` phase by phase; raises `TimeUp` to stop early."""
    import torch
    import transformers
    from cudice.model.engine import Engine
    from cudice.model.train.config import ModelSetup, RLConfig
    from cudice.model.train.data import schedule
    from cudice.model.train.rl import run_stage
    from cudice.model.train.rollout import (
        RolloutWeights,
        engine_rollout_fn,
        microbatches,
        prompt_token_counter,
        task_prompt,
    )
    from torch.optim.optimizer import register_optimizer_step_post_hook

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    cuda = device.type == "cuda"
    for knob in ("recompile_limit", "cache_size_limit"):  # as bench/model_speed.py: never fall back to eager
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, max(getattr(torch._dynamo.config, knob), 32))
    precision = args.precision
    if precision == "auto":  # `cudice train rl`'s default
        precision = "bf16-autocast" if cuda and torch.cuda.is_bf16_supported() else "fp32"
    rewards = args.rewards if args.rewards != "auto" else ("verifier" if cuda else "scripted")
    tasks_per_step = args.rollouts // args.samples_per_task
    config = RLConfig(
        stage=args.stage,
        num_steps=1,
        tasks_per_step=tasks_per_step,
        samples_per_task=args.samples_per_task,
        max_new_tokens=args.max_new_tokens,
        ppo_epochs=args.ppo_epochs,
        num_minibatches=args.num_minibatches,
        old_logprobs="replay" if args.old_logprobs == "replay" else "sampler",
        rollout_memory_gib=args.rollout_memory_gib,
        max_prompt_tokens=args.max_prompt_tokens,
        seed=args.seed,
        setup=ModelSetup(
            precision=precision,
            gradient_checkpointing=args.gradient_checkpointing,
            lora_rank=args.lora_rank,
            replay_attention=args.replay_attention,
            compile_replay=not args.no_compile_replay,
        ),
    )
    report.set(
        device=torch.cuda.get_device_name() if cuda else "cpu",
        torch=torch.__version__,
        transformers=transformers.__version__,
        date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        args=vars(args),
        shape=args.shape,
        precision=precision,
        rewards=rewards,
        rollouts=tasks_per_step * args.samples_per_task,
        tasks=tasks_per_step,
    )
    report.phase("build", f"{args.shape} on {device}, master fp32, {precision}")
    start = time.perf_counter()
    tasks, planted = make_tasks(args.stage, tasks_per_step)
    probe = StepProbe(report, device)
    base, ids = demo_tokenizer()
    master = build_master(args.shape, device, ids.pad, args.seed)
    loaded = loaded_model(master, device, base, ids)
    params = sum(p.numel() for p in master.parameters())
    copy = RolloutWeights(master, torch.bfloat16)  # the sampler's bf16 copy (`cudice train rl`)
    owners = [t for t in schedule(tasks, 0, tasks_per_step) for _ in range(args.samples_per_task)]
    prompts = [task_prompt(t) for t in owners]
    lengths = [len(loaded.tokenizer(p, add_special_tokens=False)["input_ids"]) for p in prompts]
    block = loaded.block_size
    groups = microbatches(lengths, master.config, config, block, 2)
    report.set(
        params=params,
        vocab_size=master.config.vocab_size,
        prompt_tokens_min=min(lengths),
        prompt_tokens_max=max(lengths),
        microbatches=[len(g) for g in groups],
        build_s=time.perf_counter() - start,
    )
    log(
        f"[{clock.elapsed():6.1f} s] built {params / 1e6:.1f} M parameters; prompts {min(lengths)}-"
        f"{max(lengths)} tokens; rollouts in micro-batches of {[len(g) for g in groups]} "
        f"(KV budget {args.rollout_memory_gib} GiB)"
    )

    # (a) the baseline: cudice generate's engine (load_engine(freeze=True) + warm_up) on the copy
    clock.check("the baseline")
    report.phase("baseline", "cudice generate's engine: warm-up (compile, capture)")
    start = time.perf_counter()
    baseline_engine = Engine(copy.loaded(loaded))  # fast where the model sits on a GPU
    baseline_engine.warm_up()
    report.set(baseline_warmup_s=time.perf_counter() - start)
    batch = args.baseline_batch or len(groups[0])
    order = [i for g in groups for i in g]
    baseline_prompts = [prompts[order[k % len(order)]] for k in range(batch)]
    base = measure_baseline(baseline_engine, baseline_prompts, config, probe, report)
    del baseline_engine

    # (b) the step
    predicted = len(prompts) * args.max_new_tokens / max(base["baseline_tok_s"], 1e-9)
    clock.check("the rollouts (predicted from the baseline, every row to the token budget)", predicted)
    lora = args.lora_rank > 0
    # as `cudice train rl`: the bf16 copy samples on the fast path (LoRA: the merged weights, which
    # `refresh` recomputes after every update; rollout.RolloutWeights)
    weights = copy
    rollout_engine = Engine(weights.loaded(loaded), fast=cuda)
    report.phase("rollout warm-up", "the rollout engine's compile and capture, outside the step")
    start = time.perf_counter()
    rollout_engine.warm_up()
    report.set(rollout_warmup_s=time.perf_counter() - start)
    if cuda and config.setup.compile_replay:
        report.phase("replay warm-up", "the update's compiled layers: compile once, outside the step")
        start = time.perf_counter()
        warm_up_replay(master, config, loaded, block, device)
        report.set(replay_warmup_s=time.perf_counter() - start)
        warmup = report.data["replay_warmup_s"]
        log(f"[{clock.elapsed():6.1f} s] replay warm-up (compiled layers) in {warmup:.1f} s")
    backend, canary = None, None
    if rewards == "verifier":
        from cudice.model.train.reward import default_canary, reward_pool
        from cudice.verifier.config import VerifyConfig

        backend = reward_pool(
            VerifyConfig(static_policy="default", required_speedup=config.required_speedup or 1.0),
            gpus=[0] if cuda else [],
            num_compile_workers=args.compile_workers,
        )
        report.cleanups.append(lambda: backend.shutdown(cancel_pending=True))
        if not args.no_canary:  # without a GPU a good kernel stops at compiled: learn that verdict
            canary = default_canary("correct" if cuda else None)
    report.set(canary=canary.name if canary is not None else None, planted=not args.no_plant)

    def verifier_failed(exc: Exception) -> None:
        why = f"{type(exc).__name__}: {exc}"
        report.set(reward_error=why[:500], rewards="scripted (verifier failed)")
        log(f"REWARDS: the verifier failed ({why}); the update runs on scripted rewards")

    reward_fn = reward_function(rewards, not args.no_plant, planted, backend, canary, verifier_failed)
    # one per replay forward: the backbone runs once in each (the head is applied outside it)
    backbone = master.get_decoder() if hasattr(master, "get_decoder") else master
    hook = backbone.register_forward_hook(probe.on_forward)
    step_hook = register_optimizer_step_post_hook(probe.on_optimizer_step)
    trained = sum(p.numel() for p in master.parameters() if p.requires_grad) if not lora else 0
    probe.adam_gib = 8 * trained / GIB  # LoRA: the adapters' state, negligible
    probe.sync()
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    try:
        history = run_stage(
            master,
            tasks,
            config,
            rollout_fn=probe.rollouts(engine_rollout_fn(rollout_engine)),
            reward_fn=probe.rewards(reward_fn),
            block_size=block,
            mask_token_id=loaded.ids.mask,
            pad_token_id=loaded.ids.pad,
            cpu=not cuda,
            count_prompt_tokens=prompt_token_counter(rollout_engine),
            rollout_weights=weights,
        )
        probe.sync()
    finally:
        hook.remove()
        step_hook.remove()
        if backend is not None:
            backend.shutdown(cancel_pending=True)
    end = time.perf_counter()
    stats = history[-1]
    update_s = end - (probe.update_start or end)
    rollout_peak = report.data.get("rollout_peak_gib")
    update_peak = probe.peak_gib()
    report.set(
        step_s=end - start,
        update_s=update_s,
        update_peak_gib=update_peak,
        peak_gib=max(rollout_peak, update_peak) if cuda else None,
        peak_rss_gib=_peak_rss_gib(),
        num_updates=stats.num_updates,
        kept_groups=stats.num_kept_groups,
        replay_rows=stats.num_rows,
        replay_tokens=stats.replay_tokens,  # one pass, packed (pack_replay)
        doubled_tokens=stats.doubled_tokens,  # the same rows doubled, as before packing
        packed_over_doubled=stats.replay_tokens / stats.doubled_tokens if stats.doubled_tokens else None,
        loss=stats.loss,
        kl=stats.kl,
        clip_fraction=stats.clip_fraction,
        grad_norm=stats.grad_norm,
        mean_reward=stats.mean_reward,
        train_rollout_tok_s=stats.tokens_per_s,  # run_stage's own figure (includes the schedule)
        update_forwards={"no_grad": probe.done_old, "grad": probe.done_grad, "steps": probe.done_steps},
    )
    log(
        f"[{clock.elapsed():6.1f} s] update: {stats.num_updates} optimizer steps over {stats.num_rows:.0f} "
        f"replay rows ({stats.num_kept_groups} groups; {stats.replay_tokens} tokens a pass packed, "
        f"{stats.doubled_tokens} as doubled rows) in {update_s:.1f} s; loss {stats.loss:.4f} "
        f"kl {stats.kl:.2e} clip {stats.clip_fraction:.3f}"
    )
    if args.old_logprobs == "both" and probe.captured is not None and stats.num_updates:
        update_again(args, report, clock, probe, master, tasks, config, weights, block, loaded, cuda)
    report.set(phase="done")


def update_again(
    args: argparse.Namespace,
    report: Report,
    clock: Clock,
    probe: StepProbe,
    master: Any,
    tasks: Sequence[Any],
    config: Any,
    weights: Any,
    block: int,
    loaded: Any,
    cuda: bool,
) -> None:
    """The step's own rollouts and rewards updated once more, with `logp_old` from the no-grad
    replay pass (`old_logprobs` "replay"), timed as the step's update is: from the reward's return
    to `run_stage`'s. The weights start where the first update left them (4 optimizer steps at the
    RL learning rate: the same work)."""

    import torch
    from cudice.model.train.rl import run_stage

    assert probe.captured is not None
    rollouts, rewards = probe.captured
    clock.check("the replay-logp_old update", float(report.data.get("update_s") or 0.0) * 1.3)
    report.phase("update (replay logp_old)", "the same rollouts and rewards, logp_old from a no-grad pass")
    counts = {True: 0, False: 0}
    backbone = master.get_decoder() if hasattr(master, "get_decoder") else master
    hook = backbone.register_forward_hook(
        lambda m, a, o: counts.__setitem__(torch.is_grad_enabled(), counts[torch.is_grad_enabled()] + 1)
    )
    marks: dict[str, float] = {}

    def reward(rs: Sequence[Any], cfg: Any) -> list[float | None]:
        probe.sync()
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        counts[True] = counts[False] = 0
        marks["start"] = time.perf_counter()
        return list(rewards)

    try:
        run_stage(
            master,
            tasks,
            dataclasses.replace(config, old_logprobs="replay"),
            rollout_fn=lambda ts, n, cfg: list(rollouts),
            reward_fn=reward,
            block_size=block,
            mask_token_id=loaded.ids.mask,
            pad_token_id=loaded.ids.pad,
            cpu=not cuda,
            rollout_weights=weights,
        )
        probe.sync()
    finally:
        hook.remove()
    seconds = time.perf_counter() - marks.get("start", time.perf_counter())
    rollout_s = report.data.get("rollout_s")
    report.set(
        replay_update_s=seconds,
        replay_update_over_rollout=seconds / rollout_s if rollout_s else None,
        replay_update_peak_gib=probe.peak_gib(),
        replay_update_forwards={"no_grad": counts[False], "grad": counts[True]},
    )
    log(
        f"[{clock.elapsed():6.1f} s] update again with logp_old from a no-grad replay pass: {seconds:.1f} s "
        f"({counts[False]} no-grad, {counts[True]} grad forwards); the sampler's logp_old: "
        f"{report.data.get('update_s', 0.0):.1f} s"
    )


def _peak_rss_gib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB  # Linux: KiB


# --- output -----------------------------------------------------------------------------------------
def ratios(data: dict[str, Any]) -> dict[str, float | None]:
    def div(a: Any, b: Any) -> float | None:
        return a / b if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b > 0 else None

    ran = data.get("num_updates") != 0  # no optimizer step (no group with a spread): no update figure
    return {
        "rollout_over_generate": div(data.get("rollout_tok_s"), data.get("baseline_tok_s")),
        "update_over_rollout": div(data.get("update_s"), data.get("rollout_s")) if ran else None,
    }


def print_targets(data: dict[str, Any]) -> list[dict[str, Any]]:
    note = "" if str(data.get("device", "cpu")) != "cpu" else " (CPU, tiny: not the target's figures)"
    out = []
    for key, op, bound, what in TARGETS:
        value = data.get(key)
        guess = data.get(ESTIMATES.get(key, ""))  # a partial run's stand-in for the figure
        if value is None and guess is not None:
            met = guess <= bound if op == "<=" else guess >= bound
            log(
                f"TARGET {what}: ~{guess:.2f} (ESTIMATE of a partial run; target {op} {bound}) "
                f"{'MET' if met else 'NOT MET'}{note}"
            )
            out.append({"key": key, "value": None, "estimate": guess, "bound": bound, "op": op, "met": None})
            continue
        if value is None:
            log(f"TARGET {what}: not measured (target {op} {bound}){note}")
            out.append({"key": key, "value": None, "bound": bound, "op": op, "met": None})
            continue
        met = value <= bound if op == "<=" else value >= bound
        log(f"TARGET {what}: {value:.2f} (target {op} {bound}) {'MET' if met else 'NOT MET'}{note}")
        out.append({"key": key, "value": value, "bound": bound, "op": op, "met": met})
    return out


def result_line(data: dict[str, Any]) -> str:
    def fmt(key: str, spec: str = ".2f") -> str:
        value = data.get(key)
        return "n/a" if value is None else format(value, spec)

    status = "FAILED" if data.get("error") else "PARTIAL" if data.get("partial") else "ok"
    peak = fmt("peak_gib", ".1f")
    if data.get("peak_gib") is None and data.get("peak_gib_so_far") is not None:
        peak = f">= {data['peak_gib_so_far']:.1f} so far"
    update = fmt("update_over_rollout")
    if data.get("update_over_rollout") is None and data.get("update_over_rollout_estimate") is not None:
        update = f"~{data['update_over_rollout_estimate']:.2f} (estimate)"
    head = (
        f"RESULT rl_step: {status}; peak {peak} GiB, rollout/generate "
        f"{fmt('rollout_over_generate')}, update/rollout {update}"
    )
    parts = [
        f"{data.get('shape')} {data.get('rollouts')} rollouts x <= "
        f"{data.get('args', {}).get('max_new_tokens')} tokens on {data.get('device')}",
        f"generate b={data.get('baseline_batch')}: {fmt('baseline_tok_s', '.0f')} tok/s",
        f"rollouts {fmt('rollout_tok_s', '.0f')} tok/s in {fmt('rollout_s', '.1f')} s "
        f"(micro-batches {data.get('microbatches')})",
        f"rewards ({data.get('rewards')}) {fmt('reward_s', '.1f')} s, mean {fmt('reward_mean', '.3f')}, "
        f"{data.get('rewards_unscored', 'n/a')} unscored",
        f"update {fmt('update_s', '.1f')} s (logp_old {data.get('args', {}).get('old_logprobs', 'n/a')}), "
        f"{data.get('num_updates', 'n/a')} steps over {fmt('replay_rows', '.0f')} rows",
        f"wall {data.get('wall_s', 0):.0f} s",
    ]
    if data.get("replay_update_s") is not None:
        parts.append(
            f"the same update with logp_old from a no-grad replay pass {fmt('replay_update_s', '.1f')} s "
            f"(update/rollout {fmt('replay_update_over_rollout')})"
        )
    if data.get("reward_error"):
        parts.append(f"VERIFIER FAILED, update on scripted rewards: {data['reward_error'][:200]}")
    if data.get("num_updates") == 0:
        parts.append("no update ran (no task's group had a reward spread): no update figure")
    if data.get("partial"):
        parts.append(f"stopped in {data.get('stopped_in')}: {data.get('partial_reason')}")
        if data.get("update_progress"):
            parts.append(f"update progress {json.dumps(data['update_progress'])}")
    if data.get("error"):
        parts.append(f"error: {data['error']}")
    if data.get("json"):
        parts.append(f"json in {data['json']}")
    return head + "; " + "; ".join(parts)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="dice-1.7b")
    ap.add_argument("--stage", choices=("e2e", "infill"), default="e2e", help="which BiC-RL prompt")
    ap.add_argument("--rollouts", type=int, default=256, help="rollouts of the step (tasks x samples)")
    ap.add_argument("--samples-per-task", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=1536)
    ap.add_argument("--ppo-epochs", type=int, default=1)
    ap.add_argument("--num-minibatches", type=int, default=4)
    ap.add_argument("--rollout-memory-gib", type=float, default=16.0, help="KV budget of a micro-batch")
    ap.add_argument("--max-prompt-tokens", type=int, default=2000)
    ap.add_argument("--gradient-checkpointing", action="store_true")
    ap.add_argument(
        "--replay-attention",
        choices=("auto", "sparse", "dense"),
        default="dense",
        help="the packed replay's mask: dense, or a flex BlockMask (sparse); auto: sparse on a GPU",
    )
    ap.add_argument(
        "--precision",
        default="auto",
        choices=("auto", "fp32", "bf16-autocast", "accelerate-bf16", "accelerate-fp16"),
        help="auto: bf16-autocast on a bf16 GPU, else fp32 (as `cudice train rl`)",
    )
    ap.add_argument(
        "--old-logprobs",
        choices=("sampler", "replay", "both"),
        default="sampler",
        help="PPO's logp_old: the sampler's recorded log-probabilities (the trainer's default) or a "
        "no-grad replay pass; both: the step with 'sampler', then the same rollouts and rewards "
        "updated again with 'replay', timed apart",
    )
    ap.add_argument(
        "--no-compile-replay",
        action="store_true",
        help="keep the update's decoder layers eager (ModelSetup.compile_replay off)",
    )
    ap.add_argument("--lora-rank", type=int, default=0, help="> 0: LoRA, rollouts on the merged bf16 copy")
    ap.add_argument("--baseline-batch", type=int, default=0, help="0: the rollouts' first micro-batch's size")
    ap.add_argument(
        "--rewards",
        choices=("auto", "verifier", "scripted"),
        default="auto",
        help="auto: the verifier on a GPU, scripted (1 for the planted sample, else 0) without one",
    )
    ap.add_argument("--no-plant", action="store_true", help="score every sampled answer as it is")
    ap.add_argument("--no-canary", action="store_true", help="verifier rewards without the canary")
    ap.add_argument("--compile-workers", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--time-limit", type=float, default=450.0, help="seconds; partial figures past it")
    ap.add_argument("--json", type=Path, default=None, help="default: $OUT/rl_step.json when OUT is set")
    ap.add_argument("--quick", action="store_true", help="64 rollouts of up to 512 tokens")
    args = ap.parse_args(argv)
    if args.quick:
        args.rollouts, args.max_new_tokens = 64, 512
    if args.samples_per_task < 2 or args.rollouts % args.samples_per_task:
        ap.error("--rollouts must be a multiple of --samples-per-task (>= 2)")
    if args.json is None and os.environ.get("OUT"):
        args.json = Path(os.environ["OUT"]) / "rl_step.json"
    return args


def main(argv: Sequence[str] | None = None, *, exit_on_limit: bool = False) -> dict[str, Any]:
    """Run the measurement; return the report (with `partial` set when the time guard stopped it).

    `exit_on_limit` (the script) starts the watchdog: at the limit it prints the partial figures,
    writes the JSON and ends the process with status 3, whatever the step is doing."""
    args = parse_args(argv)
    clock = Clock(args.time_limit)
    report = Report(clock, args.json)
    import torch

    if args.shape != "tiny" and not torch.cuda.is_available():
        report.set(shape=args.shape, device="cpu", error=f"--shape {args.shape} needs a CUDA GPU")
        print(
            f"RESULT rl_step: skipped (--shape {args.shape} needs a CUDA GPU; --shape tiny runs on the CPU)",
            flush=True,
        )
        return dict(report.data)
    watchdog = None
    if exit_on_limit:

        def on_limit() -> None:
            report.finish(f"time limit {args.time_limit:.0f} s reached")
            for cleanup in report.cleanups:  # the verifier's workers; bounded: the exit must come
                closer = threading.Thread(target=cleanup, daemon=True)
                closer.start()
                closer.join(timeout=10)
            os._exit(PARTIAL_EXIT)

        watchdog = Watchdog(args.time_limit - clock.elapsed(), on_limit)  # the clock's limit
    reason: str | None = None
    try:
        measure(args, report, clock)
    except TimeUp as exc:
        reason = str(exc)
        log(f"TIME GUARD: {reason}")
    except Exception as exc:  # an OOM or a failing phase: report the figures measured before it
        reason = f"{type(exc).__name__} in {report.data.get('phase')}"
        report.set(error=f"{type(exc).__name__}: {str(exc)[:500]}")
        if torch.cuda.is_available():
            report.set(peak_gib_at_error=torch.cuda.max_memory_allocated() / GIB)
        import traceback

        traceback.print_exc()
    finally:
        if watchdog is not None:
            watchdog.stop()
    data = report.finish(reason)
    return data if data is not None else dict(report.data)


if __name__ == "__main__":
    result = main(sys.argv[1:], exit_on_limit=True)
    sys.exit(0 if not result.get("partial") and not result.get("error") else PARTIAL_EXIT)
