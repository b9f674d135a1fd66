"""The RL update's replay pass, packed against doubled rows: time, memory and agreement, one run.

`python bench/replay_pack.py [--shape small|dice-1.7b] [--device cpu|cuda] [--prompt 195]
[--response 512] [--reveal 1] [--repeats 3] [--quick]`. One rollout of `--prompt` + `--response` tokens
whose blocks (4 tokens) reveal `--reveal` tokens per denoising step (1, what random weights do:
4 replay rows), replayed as the update does it, forward and backward of a policy-gradient loss:
  rows   — `objective.token_logprobs` over the doubled rows `[noisy ; clean]`, R × 2L tokens;
  packed — `objective.packed_token_logprobs` over `pack_replay`'s one sequence, L + S·B tokens.
Each variant: one untimed pass, then `--repeats` timed passes (synchronised), the median. Prints
both, the largest |Δ log p| between them at the targets, and a `RESULT` line with packed/rows as
ratios of time, tokens and (on a GPU) peak memory, measured in the same run.

Contract: random weights (`bench/random_qwen.py`, N(0, 0.02)) in fp32, trained as the update
does (bf16 autocast on a GPU, fp32 on the CPU); `small` is a 4-layer, hidden-256 Qwen3 for this
2-core VM, `dice-1.7b` the DICE-1.7B dims (a GPU). Not covered: the no-grad pass, the optimizer
step, several rollouts at once, gradient checkpointing.
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
    from cudice.model.train.objective import pack_replay, packed_token_logprobs, token_logprobs

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="small")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--prompt", type=int, default=195)
    ap.add_argument("--response", type=int, default=512)
    ap.add_argument("--reveal", type=int, default=1, choices=(1, 2, 4), help="tokens revealed per step")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="a 512-token answer, one timed pass each")
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
    report: dict[str, Any] = {
        "shape": args.shape,
        "device": torch.cuda.get_device_name(device) if cuda else "cpu",
        "rows": rows.clean.shape[0],
        "length": rows.clean.shape[1],
        "tokens": {"rows": 2 * rows.clean.numel(), "packed": packed.input_ids.shape[1]},
    }
    logps = {}
    for name, fn in variants.items():
        logps[name] = one_pass(fn)  # untimed: allocator, kernels
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
    report["max_abs_dlogp"] = float((logps["packed"][targets] - logps["rows"][targets]).abs().max())
    report["time_ratio"] = report["packed_s"] / report["rows_s"]
    report["token_ratio"] = report["tokens"]["packed"] / report["tokens"]["rows"]
    memory = (
        f", peak {report['packed_peak_gib'] / report['rows_peak_gib']:.2f}"
        if cuda and report["rows_peak_gib"]
        else ""
    )
    print(
        f"RESULT replay_pack: packed/rows time {report['time_ratio']:.2f}, tokens {report['token_ratio']:.2f}"
        f"{memory}; max |dlogp| {report['max_abs_dlogp']:.2e}; {args.shape} on {report['device']}, "
        f"{report['rows']} rows x {report['length']} (prompt {args.prompt}, response {args.response}, "
        f"{args.reveal} reveal(s) a step)"
    )
    return report


if __name__ == "__main__":
    main()
