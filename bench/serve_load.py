"""Serving load: continuous batching (paged KV cache) vs one request at a time, same run, same prompts.

Role: measure what `cudice.model.batching.ContinuousBatcher` gains when many editors ask for
generations at once. For each concurrency level C (default 1, 8, 32) C client threads run a
closed loop (submit, wait for the answer, submit the next) over the same list of
`C x --requests-per-client` prompts, twice:

- `serial`: the existing path, one request at a time behind a lock (what the single-editor
  server's model worker does, and the team server's with `CUDICE_TEAM_BATCHING=0`):
  `BlockDiffusionSampler.generate([prompt])` over `HFRunner` (CPU default) or the static fast
  path (`--baseline static`, the GPU default; no torch.compile);
- `batched`: the same clients submitting to one `ContinuousBatcher` (requests join at block
  boundaries, leave when done).

Reported per level and mode: aggregate generated tokens/s over the wall time and its ratio to the
serial run of the same level (`xN.NN vs serial`); per-request latency p50/p95 (submit -> answer,
queueing included); peak memory: on CUDA the device's peak allocated bytes over the level, on CPU
the KV bytes the paged pool held at its peak against what a static cache of the same rows would
hold (rows x the longest request); and whether every batched answer equals its serial answer
token for token (greedy; float32 on CPU is exact by contract, bf16 on a GPU may differ on
near-tied logits of random weights).

Model: random weights, nothing downloaded. `--shape tiny` (cudice.model.tiny's dims, the CPU
default), `demo` (the bundled demo model's dims) or `dice-1.7b` (Qwen3-1.7B / DICE-1.7B dims,
bf16 on a GPU). Prompts are random ids with lengths drawn from [--prompt-min, --prompt-len] (seeded;
the default minimum is a quarter of the maximum);
random weights are never confident, so each denoise step reveals about one token and answers run
to `--max-new-tokens`.

The static baseline keeps one cache (and its CUDA graphs) per size class of 256 slots and
recaptures when the size class changes, so on a GPU pick prompt lengths that stay in one class
(the GPU line below: 400..600 + 128 new -> 768 slots), or the serial figures pay recaptures.

Usage:
  python bench/serve_load.py                                   # CPU, tiny shape
  python bench/serve_load.py --shape dice-1.7b --prompt-min 400 --prompt-len 600 \
      --max-new-tokens 128                                     # one GPU
Writes `$OUT/serve_load.json` when OUT is set (or `--json PATH`).

Not covered: real sockets. The team server's model worker now serves generations through this
same engine (server/workers/model_batched.py; tested over TCP in tests/server/test_team_batching.py),
but a TCP mode here is not written: it needs an LSP client over TCP (initialize, answering
`workspace/configuration` and progress requests, `cudice.generateKernel` per request), one
workspace per client and a saved checkpoint of each shape with a tokenizer (`cudice model
make-tiny` only writes the tiny one), and it would measure the LSP and pipe overheads on top of
the figures here. Until then this benchmark drives the engine in-process.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
from cudice.model.batching import ContinuousBatcher
from cudice.model.config import SamplerConfig
from cudice.model.runner import HFRunner, Runner
from cudice.model.sampler import BlockDiffusionSampler
from cudice.model.tiny import TINY_DIMS
from random_qwen import DICE_1P7B, random_qwen3

_TINY = {
    k: v for k, v in TINY_DIMS.items() if k not in ("max_position_embeddings", "rope_theta", "rms_norm_eps")
}
SHAPES: dict[str, dict[str, Any]] = {
    "tiny": {"vocab_size": 1024, **_TINY},
    # the bundled demo model's dims (docs/model.md, "The demo model")
    "demo": {
        "vocab_size": 2048,
        "hidden_size": 256,
        "intermediate_size": 768,
        "num_hidden_layers": 8,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "tie_word_embeddings": True,
    },
    "dice-1.7b": DICE_1P7B,
}
BLOCK = 4


def log(*args: Any) -> None:
    print(*args, flush=True)


def random_model(shape: str, device: torch.device, dtype: torch.dtype) -> Any:
    """A Qwen3 of `shape` with seeded random weights (unit-ish activations), frozen."""
    torch.manual_seed(0)
    return random_qwen3(SHAPES[shape], device, dtype, std=0.02 if shape == "dice-1.7b" else 0.08)


@dataclass
class Level:
    mode: str
    concurrency: int
    requests: int
    tokens: int
    seconds: float
    tok_s: float
    p50_s: float
    p95_s: float
    peak_bytes: int  # CUDA: device peak allocated; CPU: peak KV bytes held (paged pool / static layout)
    static_kv_bytes: int = 0  # batched on CPU: a static cache of the same peak rows x longest request
    ratio: float = 0.0  # tok/s vs the serial run of the same level
    match: str = ""


def percentile(xs: Sequence[float], q: float) -> float:
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def drive(
    prompts: Sequence[Sequence[int]], clients: int, ask: Callable[[Sequence[int]], tuple[int, ...]]
) -> tuple[list[tuple[int, ...]], list[float], float]:
    """`clients` threads in a closed loop over `prompts`: -> (answers in prompt order, latencies, wall)."""
    answers: list[tuple[int, ...]] = [() for _ in prompts]
    latency: list[float] = [0.0 for _ in prompts]
    nxt = iter(range(len(prompts)))
    take = threading.Lock()
    errors: list[BaseException] = []

    def client() -> None:
        while True:
            with take:
                i = next(nxt, None)
            if i is None:
                return
            t0 = time.perf_counter()
            try:
                answers[i] = ask(prompts[i])
            except BaseException as exc:  # reported after the join
                errors.append(exc)
                return
            latency[i] = time.perf_counter() - t0

    start = time.perf_counter()
    threads = [threading.Thread(target=client, name=f"client-{c}") for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return answers, latency, time.perf_counter() - start


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument(
        "--shape", choices=sorted(SHAPES), default=None, help="default: dice-1.7b on CUDA, else tiny"
    )
    ap.add_argument("--device", default="auto")
    ap.add_argument("--concurrency", default="1,8,32")
    ap.add_argument("--requests-per-client", type=int, default=2)
    ap.add_argument("--prompt-len", type=int, default=None, help="longest prompt (default 512 GPU, 64 CPU)")
    ap.add_argument("--prompt-min", type=int, default=None, help="shortest prompt (default prompt_len/4)")
    ap.add_argument("--max-new-tokens", type=int, default=None, help="default 128 GPU, 32 CPU")
    ap.add_argument("--baseline", choices=("hf", "static"), default=None, help="default: static on CUDA")
    ap.add_argument("--page-size", type=int, default=16)
    ap.add_argument("--max-batch", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)

    device = torch.device(
        ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    )
    on_gpu = device.type == "cuda"
    shape = args.shape or ("dice-1.7b" if on_gpu else "tiny")
    dtype = torch.bfloat16 if on_gpu else torch.float32
    prompt_len = args.prompt_len or (512 if on_gpu else 64)
    prompt_min = args.prompt_min or max(1, prompt_len // 4)
    new_tokens = args.max_new_tokens or (128 if on_gpu else 32)
    baseline = args.baseline or ("static" if on_gpu else "hf")
    levels = [int(c) for c in args.concurrency.split(",")]

    model = random_model(shape, device, dtype)
    vocab = model.config.vocab_size
    mask_id, eos_id = vocab - 1, vocab - 2
    runner: Runner
    if baseline == "static":
        from cudice.model.fastpath import StaticRunner

        runner = StaticRunner(model, use_graphs=on_gpu, compile=False)
    else:
        runner = HFRunner(model)
    sampler = BlockDiffusionSampler(runner, mask_id, eos_id, [eos_id], lambda ids: " ".join(map(str, ids)))
    config = SamplerConfig(max_new_tokens=new_tokens, block_length=BLOCK)
    rng = random.Random(args.seed)
    most = max(levels) * args.requests_per_client
    pool = [
        [rng.randrange(0, vocab - 3) for _ in range(rng.randint(prompt_min, prompt_len))] for _ in range(most)
    ]
    longest = max(len(p) for p in pool) + new_tokens + 2 * BLOCK
    page = args.page_size
    pages = args.max_batch * -(-longest // page)  # room for max_batch of the longest: admission never waits
    batcher = ContinuousBatcher(
        model, sampler, BLOCK, num_pages=pages, page_size=page, max_batch=args.max_batch, max_queue=4 * most
    ).start()
    log(
        f"serve_load: shape {shape} on {device} ({dtype}), prompts {prompt_min}..{prompt_len} tokens, "
        f"{new_tokens} new, block {BLOCK}, serial baseline {type(runner).__name__}, "
        f"paged pool {pages} pages x {page} tokens ({pages * batcher.cache.page_bytes / 2**20:.1f} MiB)"
    )

    serial_lock = threading.Lock()

    def ask_serial(p: Sequence[int]) -> tuple[int, ...]:
        with serial_lock:
            return sampler.generate([p], config, BLOCK).rows[0].tokens

    def ask_batched(p: Sequence[int]) -> tuple[int, ...]:
        return batcher.submit(p, config).result(timeout=3600).row.tokens

    ask_serial(pool[0])  # warm-up both paths (first-call allocations, cuBLAS handles)
    ask_batched(pool[0])
    results: list[Level] = []
    for c in levels:
        prompts = pool[: c * args.requests_per_client]
        serial_answers: list[tuple[int, ...]] = []
        for mode, ask in (("serial", ask_serial), ("batched", ask_batched)):
            if on_gpu:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            batcher.peak_pages = batcher.peak_rows = 0
            answers, latency, wall = drive(prompts, c, ask)
            tokens = sum(len(a) for a in answers)
            static_kv = 0
            if on_gpu:
                peak = torch.cuda.max_memory_allocated()
            elif mode == "batched":
                peak = batcher.peak_pages * batcher.cache.page_bytes
                per_token = batcher.cache.page_bytes // page
                static_kv = (
                    batcher.peak_rows * (max(len(p) for p in prompts) + new_tokens + BLOCK) * per_token
                )
            else:  # one request at a time: its own KV, the longest request's
                peak = (max(len(p) for p in prompts) + new_tokens + BLOCK) * (
                    batcher.cache.page_bytes // page
                )
            level = Level(
                mode,
                c,
                len(prompts),
                tokens,
                wall,
                tokens / wall,
                statistics.median(latency),
                percentile(latency, 0.95),
                peak,
                static_kv,
            )
            if mode == "serial":
                serial_answers, base = answers, level.tok_s
            else:
                same = sum(a == b for a, b in zip(answers, serial_answers, strict=True))
                level.match = (
                    "MATCH" if same == len(answers) else f"MISMATCH {len(answers) - same}/{len(answers)}"
                )
            level.ratio = level.tok_s / base
            results.append(level)
            mem = f"peak {peak / 2**20:.2f} MiB" + (
                f" (static layout {static_kv / 2**20:.2f} MiB)" if static_kv else ""
            )
            log(
                f"C={c:3d} {mode:8s} {len(prompts):3d} requests {tokens:6d} tokens {wall:7.2f} s "
                f"{level.tok_s:9.1f} tok/s x{level.ratio:.2f} vs serial  p50 {level.p50_s:.3f} s "
                f"p95 {level.p95_s:.3f} s  {mem}  {level.match}"
            )
    batcher.close()
    out = {
        "shape": shape,
        "device": str(device),
        "dtype": str(dtype),
        "prompt_len": prompt_len,
        "prompt_min": prompt_min,
        "max_new_tokens": new_tokens,
        "baseline": type(runner).__name__,
        "levels": [asdict(r) for r in results],
    }
    log("RESULT " + json.dumps({f"{r.mode}_c{r.concurrency}_ratio": round(r.ratio, 2) for r in results}))
    path = args.json or (
        os.path.join(os.environ["OUT"], "serve_load.json") if os.environ.get("OUT") else None
    )
    if path:
        with open(path, "w") as f:
            json.dump(out, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
