"""Attention speed at the decoding targets' shapes: the Triton block kernel vs SDPA, and the prefill.

1. Block attention (`cudice.model.attention.attend`) against a static cache, as the fast path calls
   it: rows' caches hold `--filled` tokens of `--slots` (the rest blocked), 1 / 4 / 8 tokens per row.
   Baseline in the same run: SDPA over all slots under the same additive mask (what the runner did
   before). Each kernel configuration (keys per tile, warps, stages, splits) is timed; the effective
   bandwidth counts the K/V bytes the kernel must read (the filled slots only).
2. Prefill attention (512 tokens per row, block-causal mask, GQA): the runner's SDPA call (K/V
   repeated per query head, explicit mask), SDPA with `enable_gqa`, each SDPA back end forced, and a
   causal flash call (a different mask: the speed bound of a kernel that skips blocked tiles).

Shapes: SDAR-4B (32 heads over 8 KV heads, head dim 128) at batch 128, DICE-1.7B (16 over 8) at
batch 1. Block attention is timed as the fast path runs it: 20 calls captured in one CUDA graph and
replayed (median of CUDA-event timings, per call); the prefill eagerly.
Usage: python bench/attention_speed.py [--quick]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
from typing import Any

import torch
import torch.nn.functional as F

GRAPH_CALLS = 20


def log(*args: Any) -> None:
    print(*args, flush=True)


def timed_us(fn: Any, repeat: int = 30, graph: bool = True) -> float:
    """Median microseconds per call. graph: `GRAPH_CALLS` calls captured as one CUDA graph and
    replayed, as the fast path runs them (no Python or launch cost between kernels)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    calls = 1
    run = fn
    if graph:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            fn()
        torch.cuda.current_stream().wait_stream(stream)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(GRAPH_CALLS):
                fn()
        calls, run = GRAPH_CALLS, g.replay
        run()
    times = []
    for _ in range(repeat):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        run()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / calls)
    return statistics.median(times)


def block_section(
    batch: int, heads: int, kv: int, slots: int, filled: int, quick: bool
) -> list[dict[str, Any]]:
    from cudice.model import attention
    from cudice.model.runner import _additive

    d, dtype, dev = 128, torch.bfloat16, "cuda"
    k = torch.randn(batch, kv, slots, d, dtype=dtype, device=dev)
    v = torch.randn_like(k)
    rows = []
    sweep = list(itertools.product((64, 128), (4, 8), (2, 3)))
    configs = [attention.CONFIG_WHOLE, attention.CONFIG_SPLIT] if quick else sweep
    base_splits = attention.num_splits(batch, kv, slots, k.device)
    split_options = sorted({base_splits, max(1, base_splits // 2), base_splits * 2})
    for n in (1, 4) if batch > 1 else (4,):
        q = torch.randn(batch, n, heads, d, dtype=dtype, device=dev)
        allowed = torch.zeros(batch, 1, n, slots, dtype=torch.bool, device=dev)
        allowed[..., : filled + n] = True
        mask = _additive(allowed, dtype)
        lo, hi = attention.bounds(mask)
        ref = attention.reference(q, k, v, mask, d**-0.5)
        sdpa = timed_us(lambda q=q, mask=mask: attention.reference(q, k, v, mask, d**-0.5))
        need = 2 * batch * kv * (filled + n) * d * k.element_size()  # bytes of K/V that must be read
        best: tuple[float, Any] = (float("inf"), None)
        for cfg, splits in itertools.product(configs, split_options):
            try:
                out = attention.attend(q, k, v, mask, lo, hi, d**-0.5, splits=splits, config=cfg)
                err = (out.float() - ref.float()).abs().max().item()
                us = timed_us(
                    lambda q=q, mask=mask, lo=lo, hi=hi, cfg=cfg, splits=splits: attention.attend(
                        q, k, v, mask, lo, hi, d**-0.5, splits=splits, config=cfg
                    )
                )
            except Exception as exc:  # a configuration that does not fit (shared memory) is skipped
                log(f"  b={batch} n={n} {cfg} splits={splits}: {type(exc).__name__}: {str(exc)[:120]}")
                continue
            row = {"batch": batch, "n": n, "config": cfg, "splits": splits, "us": us, "err": err}
            rows.append(row)
            best = min(best, (us, row), key=lambda x: x[0])
        default_cfg = attention.CONFIG_WHOLE if base_splits == 1 else attention.CONFIG_SPLIT
        default = next(
            (r for r in rows if r["n"] == n and r["config"] == default_cfg and r["splits"] == base_splits),
            None,
        )
        b_us, b_row = best
        d_us = default["us"] if default else float("nan")
        log(
            f"block attention b={batch} H={heads}/{kv} n={n} filled {filled}/{slots}: SDPA {sdpa:.1f} us "
            f"({need / sdpa / 1e3:.0f} GB/s of needed bytes) | default {d_us:.1f} us "
            f"({need / d_us / 1e3:.0f} GB/s, {sdpa / d_us:.2f}x SDPA) | best {b_us:.1f} us "
            f"{b_row and b_row['config']} splits {b_row and b_row['splits']} "
            f"({need / b_us / 1e3:.0f} GB/s, {sdpa / b_us:.2f}x SDPA); max |err| {b_row and b_row['err']}"
        )
        rows.append({"batch": batch, "n": n, "sdpa_us": sdpa, "best": b_row, "default": default})
    return rows


def prefill_section(batch: int, heads: int, kv: int, n: int, block: int) -> None:
    from cudice.model.runner import block_causal_mask
    from torch.nn.attention import SDPBackend, sdpa_kernel

    d, dtype, dev = 128, torch.bfloat16, "cuda"
    group = heads // kv
    q = torch.randn(batch, heads, n, d, dtype=dtype, device=dev)
    k = torch.randn(batch, kv, n, d, dtype=dtype, device=dev)
    v = torch.randn_like(k)
    mask = block_causal_mask(torch.ones(batch, n, dtype=torch.bool, device=dev), block, dtype)
    flops = 4 * batch * heads * n * n * d  # the full square (a kernel skipping blocked tiles does ~half)

    def runner_call() -> torch.Tensor:
        return F.scaled_dot_product_attention(
            q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1), attn_mask=mask, scale=d**-0.5
        )

    variants: dict[str, Any] = {"runner (repeat K/V, mask)": runner_call}
    variants["enable_gqa, mask"] = lambda: F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, scale=d**-0.5, enable_gqa=True
    )
    for name, backend in (
        ("cudnn", SDPBackend.CUDNN_ATTENTION),
        ("efficient", SDPBackend.EFFICIENT_ATTENTION),
    ):

        def forced(backend: Any = backend) -> torch.Tensor:
            with sdpa_kernel([backend]):
                return runner_call()

        variants[f"{name} (repeat K/V, mask)"] = forced
    variants["flash causal (other mask: bound)"] = lambda: F.scaled_dot_product_attention(
        q, k, v, is_causal=True, scale=d**-0.5, enable_gqa=True
    )
    ref = runner_call()
    base = None
    for name, fn in variants.items():
        try:
            err = (fn().float() - ref.float()).abs().max().item() if "causal" not in name else float("nan")
            us = timed_us(fn, repeat=10, graph=False)
        except Exception as exc:
            log(f"prefill attention {name}: {type(exc).__name__}: {str(exc)[:160]}")
            continue
        base = base or us
        log(
            f"prefill attention b={batch} n={n} H={heads}/{kv} {name:34s}: {us / 1e3:.2f} ms per layer "
            f"({flops / us / 1e6:.0f} TFLOP/s of the square; {base / us:.2f}x the runner's call); "
            f"max |err| {err:.3g}"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="the default configuration only")
    ap.add_argument("--slots", type=int, default=768)
    ap.add_argument(
        "--filled", type=int, default=576, help="cached tokens per row (prompt 512 + half of 128)"
    )
    args = ap.parse_args()
    if not torch.cuda.is_available():
        log("attention_speed needs a CUDA GPU; nothing measured")
        return 0
    log(f"# attention_speed on {torch.cuda.get_device_name()}, torch {torch.__version__}")
    block_section(128, 32, 8, args.slots, args.filled, args.quick)  # SDAR-4B, batch 128
    block_section(1, 16, 8, args.slots, args.filled, args.quick)  # DICE-1.7B, batch 1
    prefill_section(128, 32, 8, 512, 4)
    log("RESULT attention_speed: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
