"""Where one BiC-RL replay forward + backward spends its GPU time, at the DICE-1.7B shape.

Role: the update of `bench/rl_step.py` is 256 such passes (one per rollout, `ppo.ppo_update`);
this script times one pass of a synthetic rollout shaped like that bench's (a ~195-token prompt,
1,536 answer tokens revealed one per denoising step: 4 replay rounds per block) and prints, in
one run:
  (a) the time of a no-grad forward, a forward with grad and its backward, each synchronised
      (median of `--repeats`), for the variants named in `--variants`:
        master   — fp32 master weights under bf16 autocast, the trainer's setup (the baseline);
        bf16     — the same model with bf16 weights (no autocast): what the fp32 master costs;
        dense    — the master with the dense (1, 1, T, T) mask through SDPA instead of the
                   block-sparse flex attention (`use_block_sparse_replay`);
        compiled — the master's decoder layers compiled (`compile_replay_layers`), as the RL
                   update runs them on a GPU (`ModelSetup.compile_replay`);
      and each variant's ratio to the baseline measured in the same run;
  (b) `torch.profiler`'s table of the baseline's forward + backward, the kernels sorted by their
      total CUDA time (`--top` rows), and the share of the matrix products, the attention and
      the rest, so that a change to the update can aim at what costs.
Random weights (`rl_step.build_master`); nothing is downloaded. Needs a CUDA GPU for (b) and for
the flex path; on a CPU `--shape tiny` runs (a) only, as a smoke test.
Not covered: the optimizer step, DDP, gradient checkpointing, the reward, the rollouts.
Usage: python bench/replay_profile.py [--shape dice-1.7b] [--variants master,bf16,dense]
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _rl_step() -> Any:
    spec = importlib.util.spec_from_file_location("rl_step_bench", ROOT / "bench" / "rl_step.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["rl_step_bench"] = module
    spec.loader.exec_module(module)
    return module


def synthetic_rollout(
    prompt: int, answer: int, block: int, vocab: int, seed: int
) -> tuple[list[int], list[int], list[int]]:
    """Prompt ids, answer ids and a step map that reveals one token per step, in a random order
    inside each block (random weights are never confident: `bench/rl_step.py`'s docstring)."""
    rng = random.Random(seed)
    prompt_ids = [rng.randrange(10, vocab) for _ in range(prompt)]
    response = [rng.randrange(10, vocab) for _ in range(answer)]
    steps: list[int] = []
    first = prompt % block  # the prompt's tail shares the first block
    sizes = [block - first] if first else []
    sizes += [block] * ((answer - sum(sizes)) // block)
    if sum(sizes) < answer:
        sizes.append(answer - sum(sizes))
    done = 0
    for size in sizes:
        order = list(range(size))
        rng.shuffle(order)
        steps += [done + k for k in order]
        done += size
    return prompt_ids, response, steps[:answer]


def timed(fn: Any, cuda: bool, repeats: int) -> float:
    import torch

    times = []
    for _ in range(repeats):
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--shape", default="dice-1.7b")
    ap.add_argument("--variants", default="master,bf16,dense")
    ap.add_argument("--prompt-tokens", type=int, default=195)
    ap.add_argument("--answer-tokens", type=int, default=1536)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--no-profile", action="store_true")
    args = ap.parse_args(argv)

    import torch
    from cudice.model.train.objective import (
        ReplayRows,
        compile_replay_layers,
        pack_replay,
        packed_token_logprobs,
        replay_rows,
        use_block_sparse_replay,
    )

    rl_step = _rl_step()
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    print(f"device {torch.cuda.get_device_name() if cuda else 'cpu'}, torch {torch.__version__}", flush=True)
    master = rl_step.build_master(args.shape, device, 0, 0).train()
    vocab = master.config.vocab_size
    params = sum(p.numel() for p in master.parameters())
    prompt, response, steps = synthetic_rollout(args.prompt_tokens, args.answer_tokens, 4, vocab, 0)
    rows = replay_rows(prompt, response, steps, block_size=4, mask_token_id=1, pad_token_id=0)
    rows = ReplayRows(rows.clean.to(device), rows.noisy.to(device), rows.targets.to(device))
    packed = pack_replay(rows, 4)
    tokens = packed.input_ids.shape[1]
    print(
        f"{args.shape}: {params / 1e6:.0f} M parameters; "
        f"one rollout: {len(rows.clean)} replay rows, {tokens} packed tokens, "
        f"{int(rows.targets.sum())} targets",
        flush=True,
    )

    results: dict[str, Any] = {"tokens": tokens}

    def run_variant(name: str) -> dict[str, float]:
        model = master
        autocast = cuda
        if name == "bf16":
            model = rl_step.build_master(args.shape, device, 0, 0).train().to(torch.bfloat16)
            autocast = False
        if name == "compiled":
            model = rl_step.build_master(args.shape, device, 0, 0).train()
            if cuda:
                use_block_sparse_replay(model)
            compile_replay_layers(model)
        if name in ("master", "bf16") and cuda:
            use_block_sparse_replay(model)
        elif name == "dense":
            model.set_attn_implementation("sdpa")

        def ctx() -> Any:
            return (
                torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast)
                if cuda
                else torch.autocast("cpu", enabled=False)
            )

        def no_grad() -> None:
            with torch.no_grad(), ctx():
                packed_token_logprobs(model, packed)

        def grad() -> None:
            with ctx():
                logp = packed_token_logprobs(model, packed)
            logp.sum().backward()
            model.zero_grad(set_to_none=True)

        holder: dict[str, Any] = {}

        def forward_only() -> None:
            with ctx():
                holder["loss"] = packed_token_logprobs(model, packed).sum()

        def backward_only() -> None:
            holder.pop("loss").backward()
            model.zero_grad(set_to_none=True)

        for _ in range(2):  # warm-up: compile, autotune, allocator
            grad()
            no_grad()
        out = {"no_grad_s": timed(no_grad, cuda, args.repeats), "fwd_bwd_s": timed(grad, cuda, args.repeats)}
        fwd, bwd = [], []
        for _ in range(args.repeats):
            fwd.append(timed(forward_only, cuda, 1))
            bwd.append(timed(backward_only, cuda, 1))
        out["fwd_s"], out["bwd_s"] = statistics.median(fwd), statistics.median(bwd)
        if name in ("bf16", "compiled"):
            del model
            if cuda:
                torch.cuda.empty_cache()
        return out

    for name in args.variants.split(","):
        try:
            results[name] = run_variant(name)
        except Exception as exc:  # a variant that fails (e.g. the dense mask's memory) is reported
            results[name] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        figures = results[name]
        if "error" in figures:
            print(f"{name:7s} FAILED: {figures['error']}", flush=True)
            continue
        base = results.get("master", {})
        ratio = (
            f" = {figures['fwd_bwd_s'] / base['fwd_bwd_s']:.2f}x the master's"
            if "fwd_bwd_s" in base and name != "master"
            else ""
        )
        rate = 6 * params * tokens / figures["fwd_bwd_s"] / 1e12
        print(
            f"{name:7s} no-grad fwd {figures['no_grad_s'] * 1e3:7.1f} ms | "
            f"fwd {figures['fwd_s'] * 1e3:7.1f} ms + bwd {figures['bwd_s'] * 1e3:7.1f} ms | "
            f"fwd+bwd {figures['fwd_bwd_s'] * 1e3:7.1f} ms{ratio} | {rate:.1f} TFLOP/s by 6·N·T",
            flush=True,
        )

    if cuda and not args.no_profile:
        from torch.profiler import ProfilerActivity, profile

        use_block_sparse_replay(master)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logp = packed_token_logprobs(master, packed)
            logp.sum().backward()
            torch.cuda.synchronize()
        events = prof.key_averages()
        kernels = [
            e for e in events if getattr(e, "device_type", None) is not None and e.self_device_time_total > 0
        ]
        total = sum(e.self_device_time_total for e in kernels)
        groups = {"gemm": 0.0, "attention": 0.0, "other": 0.0}
        for e in kernels:
            key = e.key.lower()
            kind = (
                "gemm"
                if any(w in key for w in ("gemm", "sm90", "cutlass", "cublas", "nvjet", "matmul"))
                else "attention"
                if any(w in key for w in ("flex", "attention", "triton_tem"))
                else "other"
            )
            groups[kind] += e.self_device_time_total
        print(
            f"profile of one forward + backward: {total / 1e3:.1f} ms of kernels; "
            + ", ".join(f"{k} {v / 1e3:.1f} ms ({v / max(total, 1):.0%})" for k, v in groups.items()),
            flush=True,
        )
        print(
            events.table(sort_by="self_cuda_time_total", row_limit=args.top, max_name_column_width=70),
            flush=True,
        )
        results["profile_ms"] = {k: v / 1e3 for k, v in groups.items()}
    return results


if __name__ == "__main__":
    main()
