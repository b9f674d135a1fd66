"""The RL update's replay pass, packed against doubled rows: time, memory and agreement, one run.

`python bench/replay_pack.py [--shape small|dice-1.7b] [--device cpu|cuda] [--prompt 195]
[--response 512] [--reveal 1] [--repeats 3] [--quick]`. One rollout of `--prompt` + `--response` tokens
whose blocks (4 tokens) reveal `--reveal` tokens per denoising step (1, what random weights do:
4 replay rows), replayed as the update does it, forward and backward of a policy-gradient loss:
  rows   — `objective.token_logprobs` over the doubled rows `[noisy ; clean]`, R × 2L tokens;
  packed — `objective.packed_token_logprobs` over `pack_replay`'s one sequence, L + S·B tokens,
           with the dense (T, T) mask through SDPA;
  sparse — the same on the model switched by `objective.use_block_sparse_replay` (a GPU, or
           `--sparse`): a flex-attention BlockMask, tiles nobody sees skipped.
Each variant: one untimed pass (the sparse one compiles there), then `--repeats` timed passes
(synchronised), the median. Prints each, the largest |Δ log p| at the targets against the rows
and, on a GPU, against the rows in fp32 without autocast (the rounding floor: the rows' own
distance to it), and a `RESULT` line with packed/rows and sparse/rows as ratios of time, tokens
and (on a GPU) peak memory, measured in the same run.

Contract: random weights (`bench/random_qwen.py`, N(0, 0.02)) in fp32, trained as the update
does (bf16 autocast on a GPU, fp32 on the CPU); `small` is a 4-layer, hidden-256 Qwen3 for this
2-core VM, `dice-1.7b` the DICE-1.7B dims (a GPU). Not covered: the no-grad pass, the optimizer
step, several rollouts at once, gradient checkpointing; the sparse variant on a CPU is the dense
mask again (flex attention has no CPU backward), so `--sparse` there checks plumbing, not speed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from random_qwen import DICE_1P7B, random_qwen3

SHAPES: dict[str, dict[str, Any]] = {
    "small": {
        "vocab_size": 8448,
        "hidden_size": 256,
        "intermediate_size": 768,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "tie_word_embeddings": False,
    },
    "dice-1.7b": DICE_1P7B,
}
BLOCK = 4
MASK_ID, PAD_ID = 5, 6


def rollout_rows(prompt: int, response: int, reveal: int, vocab: int, seed: int = 0) -> Any:
    """Replay rows of one rollout whose every block reveals `reveal` tokens per step."""
    from cudice.model.train.objective import replay_rows

    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(10, vocab, (response,), generator=g).tolist()
    steps = [i // reveal for i in range(response)]  # consecutive reveals; blocks fill in order
    prompt_ids = torch.randint(10, vocab, (prompt,), generator=g).tolist()
    return replay_rows(prompt_ids, ids, steps, block_size=BLOCK, mask_token_id=MASK_ID, pad_token_id=PAD_ID)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from cudice.model.train.objective import (
        FLEX_TILE,
        pack_replay,
        packed_token_logprobs,
        token_logprobs,
        use_block_sparse_replay,
    )

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="small")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--prompt", type=int, default=195)
    ap.add_argument("--response", type=int, default=512)
    ap.add_argument("--reveal", type=int, default=1, choices=(1, 2, 4), help="tokens revealed per step")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="a 512-token answer, one timed pass each")
    ap.add_argument(
        "--sparse",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the block-sparse variant (default: on a GPU)",
    )
    args = ap.parse_args(argv)
    if args.quick:  # bench/run_gpu.sh --quick passes it to every line of its list
        args.response, args.repeats = min(args.response, 512), 1
    device = torch.device(args.device)
    torch.manual_seed(0)
    model = random_qwen3(SHAPES[args.shape], device, torch.float32, std=0.02).train().requires_grad_(True)
    rows = rollout_rows(args.prompt, args.response, args.reveal, SHAPES[args.shape]["vocab_size"])
    rows = type(rows)(rows.clean.to(device), rows.noisy.to(device), rows.targets.to(device))
    packed = pack_replay(rows, BLOCK)
    advantage = torch.linspace(-1.0, 1.0, rows.clean.shape[0], device=device)[:, None]
    cuda = device.type == "cuda"

    def one_pass(fn: Any) -> torch.Tensor:
        model.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=cuda):
            logp = fn()
        ((logp * rows.targets) * advantage).sum().backward()
        return logp.detach()

    variants = {
        "rows": lambda: token_logprobs(model, rows, BLOCK),
        "packed": lambda: packed_token_logprobs(model, packed),
    }
    sparse = cuda if args.sparse is None else args.sparse
    if sparse:
        variants["sparse"] = lambda: packed_token_logprobs(model, packed)  # after the switch below
    report: dict[str, Any] = {
        "shape": args.shape,
        "device": torch.cuda.get_device_name(device) if cuda else "cpu",
        "rows": rows.clean.shape[0],
        "length": rows.clean.shape[1],
        "tokens": {
            "rows": 2 * rows.clean.numel(),
            "packed": packed.input_ids.shape[1],
            "sparse": -(-packed.input_ids.shape[1] // FLEX_TILE) * FLEX_TILE,  # padded to the tile
        },
    }
    logps = {}
    if cuda:  # the rounding floor: the rows in fp32, no autocast, no gradient
        with torch.no_grad():
            logps["fp32"] = token_logprobs(model, rows, BLOCK)
    for name, fn in variants.items():
        if name == "sparse":
            use_block_sparse_replay(model)
        t0 = time.perf_counter()
        logps[name] = one_pass(fn)  # untimed: allocator, kernels (and the sparse one's compile)
        report[f"{name}_first_s"] = time.perf_counter() - t0
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            one_pass(fn)
            if cuda:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        report[f"{name}_s"] = statistics.median(times)
        report[f"{name}_peak_gib"] = torch.cuda.max_memory_allocated() / 2**30 if cuda else None
        print(
            f"{name}: {report['tokens'][name]} tokens, {report[f'{name}_s']:.3f} s median of {args.repeats}"
            + (f", peak {report[f'{name}_peak_gib']:.2f} GiB" if cuda else ""),
            flush=True,
        )
    targets = rows.targets

    def gap(a: str, b: str) -> float:
        return float((logps[a][targets].float() - logps[b][targets].float()).abs().max())

    report["max_abs_dlogp"] = gap("packed", "rows")
    report["time_ratio"] = report["packed_s"] / report["rows_s"]
    report["token_ratio"] = report["tokens"]["packed"] / report["tokens"]["rows"]
    parts = [f"packed/rows time {report['time_ratio']:.2f}"]
    if sparse:
        report["sparse_max_abs_dlogp"] = gap("sparse", "rows")
        report["sparse_time_ratio"] = report["sparse_s"] / report["rows_s"]
        parts.append(f"sparse/rows time {report['sparse_time_ratio']:.2f}")
        parts.append(f"sparse/packed time {report['sparse_s'] / report['packed_s']:.2f}")
    parts.append(f"tokens {report['token_ratio']:.2f}")
    if cuda and report["rows_peak_gib"]:
        parts.append(f"peak packed/rows {report['packed_peak_gib'] / report['rows_peak_gib']:.2f}")
        if sparse:
            parts.append(f"sparse/rows {report['sparse_peak_gib'] / report['rows_peak_gib']:.2f}")
    gaps = [f"packed-rows {report['max_abs_dlogp']:.2e}"]
    if sparse:
        gaps.append(f"sparse-rows {report['sparse_max_abs_dlogp']:.2e}")
    if "fp32" in logps:  # each against fp32 rows: the rows' own gap is the rounding floor
        report["fp32_gaps"] = {name: gap(name, "fp32") for name in variants}
        gaps += [f"{name}-fp32 {value:.2e}" for name, value in report["fp32_gaps"].items()]
    print(
        f"RESULT replay_pack: {', '.join(parts)}; max |dlogp| {', '.join(gaps)}; {args.shape} on "
        f"{report['device']}, {report['rows']} rows x {report['length']} (prompt {args.prompt}, "
        f"response {args.response}, {args.reveal} reveal(s) a step)"
    )
    return report


if __name__ == "__main__":
    main()
