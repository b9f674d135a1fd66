"""LoRA rollouts on this machine's CPU: time per forward of the eager path against the fast sampler.

    python bench/lora_rollout_speed.py [--model model/assets/demo] [--rank 16] [--rows 4]
        [--max-new-tokens 32] [--repeats 3] [--threads 2] [--device cpu] [--copy-dtype float32]

Before `RolloutWeights` took LoRA masters, a LoRA run sampled with the eager HF path over the
peft-injected master (`HFRunner`, adapters applied in every forward). Now it can sample with the
fast sampler (`StaticRunner`) over the rollout copy, which holds the merged weights
(`cudice.model.train.rollout`). This script wraps the checkpoint with LoRA on the 7 projections
(`prepare_model`, random non-zero adapters) and decodes the same greedy RL rollouts (`--rows`
rows, 2 per task; dynamic strategy, threshold 0.9) three ways: eager over the LoRA master, eager
over the merged copy (the adapters' own cost) and fast over the merged copy (the fast path's
gain). It prints milliseconds per forward (the fastest and the median of `--repeats` runs after
one warm-up run; the ratios use the fastest, the run least disturbed by other load), whether
the eager LoRA and the fast tokens agree (float rounding may part them near a tie; the tests
assert equal tokens on one sampler), and the time of one `refresh` (paid after every update).
`--device cuda --copy-dtype bfloat16` is the training setup on a GPU (fp32 master, bf16 copy; the
fast path then compiles its layers and replays CUDA graphs, all inside the warm-up run); the
tokens of a bf16 copy may then differ from the fp32 master's.
Not covered: a GPU run's figures (none made yet; the issue's 36-44 ms per eager LoRA forward is
an H200 figure).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=str(ROOT / "model" / "assets" / "demo"))
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--rows", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:N]; the master is fp32 on it")
    parser.add_argument("--copy-dtype", default="float32", choices=["float32", "bfloat16"])
    args = parser.parse_args()
    import torch
    from cudice.model.engine import Engine
    from cudice.model.loader import load_checkpoint
    from cudice.model.train.config import ModelSetup, RLConfig
    from cudice.model.train.data import RLTask
    from cudice.model.train.prepare import prepare_model
    from cudice.model.train.rollout import RolloutWeights, engine_rollout_fn, task_prompt

    torch.set_num_threads(args.threads)
    loaded = load_checkpoint(args.model, device=args.device, dtype="float32")
    torch.manual_seed(0)  # peft draws A from torch's generator: the same adapters every run
    master = prepare_model(loaded.model, ModelSetup(lora_rank=args.rank, lora_alpha=2.0 * args.rank))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():  # peft starts B at zero; a trained adapter is not
        for name, param in master.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.01)
    master.eval()
    cuda = args.device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    start = time.perf_counter()
    weights = RolloutWeights(master, getattr(torch, args.copy_dtype))
    sync()
    copy_seconds = time.perf_counter() - start
    refresh = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        weights.refresh(master)
        sync()
        refresh.append(time.perf_counter() - start)
    engines = {  # the first is what LoRA runs sampled with before, the last what they sample with now
        "eager LoRA (HFRunner, peft master)": Engine(loaded, fast=False),
        "eager merged (HFRunner, merged copy)": Engine(weights.loaded(loaded), fast=False),
        "fast sampler (StaticRunner, merged copy)": Engine(weights.loaded(loaded), fast=True),
    }
    source = (
        "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x.relu()\n"
    )
    tasks = [RLTask("e2e", 1, f"{source}# task {i}\n", task_id=str(i)) for i in range(max(1, args.rows // 2))]
    config = RLConfig(stage="e2e", samples_per_task=2, max_new_tokens=args.max_new_tokens, temperature=0.0)
    per_forward: dict[str, float] = {}  # the fastest run: least disturbed by other load
    tokens: dict[str, list[list[int]]] = {}
    for label, engine in engines.items():
        timings: list[float] = []
        for run in range(args.repeats + 1):  # the first run warms up
            generate = engine.generate_texts
            forwards = 0

            def counted(prompts, cfg, _generate=generate):  # type: ignore[no-untyped-def]
                nonlocal forwards
                result = _generate(prompts, cfg)
                forwards += result.num_forwards
                return result

            engine.generate_texts = counted  # type: ignore[method-assign]
            start = time.perf_counter()
            with torch.no_grad():
                rollouts = engine_rollout_fn(engine)(tasks, 2, config)
            seconds = time.perf_counter() - start
            engine.generate_texts = generate  # type: ignore[method-assign]
            if run:
                timings.append(seconds / max(forwards, 1))
        per_forward[label] = min(timings)
        tokens[label] = [r.response_ids for r in rollouts]
        median = statistics.median(timings)
        print(
            f"{label}: {1e3 * min(timings):.2f} ms per forward (median {1e3 * median:.2f}; "
            f"{forwards} forwards a run)"
        )
    eager, eager_merged, fast = per_forward.values()
    prompt_tokens = len(engines[next(iter(engines))].encode(task_prompt(tasks[0])))
    same = tokens[next(iter(tokens))] == tokens[list(tokens)[-1]]
    cfg = loaded.model.config
    print(
        f"model {args.model}: hidden {cfg.hidden_size}, {cfg.num_hidden_layers} layers, LoRA rank "
        f"{args.rank} on 7 projections; {args.rows} rows, prompts of {prompt_tokens} tokens, "
        f"{args.max_new_tokens} new tokens, greedy"
    )
    print(f"ratio eager LoRA / fast merged copy: {eager / fast:.2f}x; same tokens: {same}")
    print(
        f"of which the adapters in every forward: eager LoRA / eager merged {eager / eager_merged:.2f}x; "
        f"the fast path: eager merged / fast merged {eager_merged / fast:.2f}x"
    )
    refresh_ms = statistics.median(refresh) * 1e3
    print(f"rollout copy: made in {copy_seconds * 1e3:.1f} ms, refresh {refresh_ms:.1f} ms")
    print(
        f"machine: {torch.cuda.get_device_name() + ', ' if cuda else ''}"
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"{args.threads} torch threads, load average {os.getloadavg()[0]:.2f}"
    )


if __name__ == "__main__":
    main()
