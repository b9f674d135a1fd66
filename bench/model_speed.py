"""Model runtime speed: block diffusion vs autoregressive decoding through the same weights.

Random weights at DICE-1.7B / DICE-8B shapes (Qwen3 dims, bf16, SDPA). Every ratio is against
the AR baseline measured in the same run. Sections:

1. forward latency against a prompt_len-token cache, batch 1 and 16: one AR decode step
   (1 token), one block-denoise forward (block tokens, K/V cropped) and one commit forward
   (block tokens, K/V kept) — eager HF (`HFRunner`) and the fast path (`StaticRunner`, static
   cache + CUDA graphs);
2. end-to-end tokens/s for `new_tokens` new tokens: HF `generate` (greedy, dynamic cache) and a
   greedy AR loop through the fast path, vs the block-diffusion sampler (eager and fast) with
   `low_confidence_dynamic` at threshold 0.9 (random weights are never confident: ~0.8 tokens
   per forward, static-like) and at threshold 0 (every slot revealed in one step: what a
   confident trained model approaches, 2 tokens per forward with block 4), each also with
   `fuse_commit` (fast path only; up to 4 tokens per forward with block 4);
3. a profile of one eager HF forward (GPU busy time vs wall time);
4. tokens per forward of the sampler on the tiny checkpoint (unchanged on real weights:
   `--model DIR` measures a real checkpoint instead of random weights).

Usage: python bench/model_speed.py [--shapes 1.7b,8b] [--batches 1,16] [--new-tokens 128]
       [--prompt-len 512] [--model DIR] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

SHAPES: dict[str, dict[str, Any]] = {
    # SDAR-1.7B-Chat config.json (notes/model.md §2.2)
    "1.7b": dict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=28, num_attention_heads=16,
                 num_key_value_heads=8, head_dim=128),
    # Qwen3-8B dimensions (SDAR-8B / DICE-8B are Qwen3-8B fine-tunes)
    "8b": dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
               num_key_value_heads=8, head_dim=128),
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16),
}
VOCAB, MASK_ID, EOS_ID = 151936, 151669, 151643  # Qwen/SDAR vocabulary and ids


def special_ids(model: Any) -> tuple[int, int, int]:
    """(mask id, eos/pad id, upper bound for random prompt tokens) within the model's vocabulary."""
    v = model.config.vocab_size
    return min(MASK_ID, v - 1), min(EOS_ID, v - 2), min(150000, v - 3)


def log(*args: Any) -> None:
    print(*args, flush=True)


def random_model(shape: str, device: torch.device, dtype: torch.dtype) -> Any:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(vocab_size=VOCAB if shape != "tiny" else 1024, max_position_embeddings=32768,
                      rope_parameters={"rope_type": "default", "rope_theta": 1e6}, tie_word_embeddings=False,
                      **SHAPES[shape])
    cfg._attn_implementation = "sdpa"
    with torch.device(device):
        torch.set_default_dtype(dtype)
        try:
            model = Qwen3ForCausalLM(cfg)
        finally:
            torch.set_default_dtype(torch.float32)
    model.model.rotary_emb = type(model.model.rotary_emb)(config=cfg).to(device)  # float32 inv_freq
    with torch.no_grad():  # random but not degenerate: unit-ish activations
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.02)
    return model.eval()


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed_ms(fn: Any, device: torch.device, repeat: int) -> float:
    """Median wall milliseconds of fn() (synchronised), after two warm-ups."""
    for _ in range(2):
        fn()
    times = []
    for _ in range(repeat):
        sync(device)
        t = time.perf_counter()
        fn()
        sync(device)
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def forward_latency(model: Any, batch: int, prompt_len: int, block: int, repeat: int) -> dict[str, float]:
    """ms per AR step / denoise / commit, eager HF and fast path, against a prompt_len cache."""
    from cudice.model.fastpath import StaticRunner
    from cudice.model.runner import HFRunner, block_causal_mask

    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    ids = torch.randint(0, special_ids(model)[2], (batch, prompt_len + block), device=device)
    valid = torch.ones(batch, prompt_len + block, dtype=torch.bool, device=device)
    pos = torch.arange(prompt_len + block, device=device)[None].expand(batch, -1)
    prefill_mask = block_causal_mask(valid[:, :prompt_len], block, dtype)
    out: dict[str, float] = {}
    for name, make in (("hf", HFRunner), ("fast", StaticRunner)):
        try:
            _latency_one(name, make(model), out, ids, valid, pos, prefill_mask, prompt_len, block, repeat, dtype)
        except Exception as exc:  # a failing path must not hide the other's figures
            log(f"{name} forward latency failed: {exc!r}")
    return out


def _latency_one(name: str, runner: Any, out: dict[str, float], ids: torch.Tensor, valid: torch.Tensor,
                 pos: torch.Tensor, prefill_mask: torch.Tensor, prompt_len: int, block: int, repeat: int,
                 dtype: torch.dtype) -> None:
    from cudice.model.runner import _additive

    cache = runner.new_cache(ids.shape[0], prompt_len + 2 * block)
    runner.forward(ids[:, :prompt_len], prefill_mask, pos[:, :prompt_len], cache, logits=False)

    def step(n: int, logits: bool) -> None:
        mask = _additive(valid[:, None, None, : prompt_len + n].expand(-1, 1, n, -1), dtype)
        runner.forward(ids[:, prompt_len: prompt_len + n], mask, pos[:, prompt_len: prompt_len + n], cache,
                       logits=logits)
        runner.crop(cache, prompt_len)  # a commit's K/V is dropped too: every repeat sees the same cache

    # AR step: 1 token + logits; denoise: a block + logits (K/V dropped); commit: a block, K/V kept, no logits
    out[f"{name}_ar_step_ms"] = timed_ms(lambda: step(1, True), ids.device, repeat)
    out[f"{name}_denoise_ms"] = timed_ms(lambda: step(block, True), ids.device, repeat)
    out[f"{name}_commit_ms"] = timed_ms(lambda: step(block, False), ids.device, repeat)


def profile_one_forward(model: Any, prompt_len: int) -> dict[str, float]:
    """GPU-busy vs wall time of one eager HF 4-token forward at batch 1 (is it launch/Python bound?)."""
    from cudice.model.runner import HFRunner, _additive
    from torch.profiler import ProfilerActivity, profile

    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    runner = HFRunner(model)
    cache = runner.new_cache(1, prompt_len + 4)
    ids = torch.randint(0, special_ids(model)[2], (1, prompt_len + 4), device=device)
    pos = torch.arange(prompt_len + 4, device=device)[None]
    causal = torch.tril(torch.ones(prompt_len, prompt_len, dtype=torch.bool, device=device))[None, None]
    runner.forward(ids[:, :prompt_len], _additive(causal, dtype), pos[:, :prompt_len], cache, logits=False)
    mask = torch.zeros(1, 1, 4, prompt_len + 4, dtype=dtype, device=device)

    def fwd() -> None:
        runner.forward(ids[:, prompt_len:], mask, pos[:, prompt_len:], cache)
        runner.crop(cache, prompt_len)

    for _ in range(3):
        fwd()
    sync(device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t = time.perf_counter()
        fwd()
        sync(device)
        wall = (time.perf_counter() - t) * 1e3
    events = prof.key_averages()
    gpu_us = sum(getattr(e, "self_device_time_total", 0) or getattr(e, "self_cuda_time_total", 0) for e in events)
    kernels = sum(e.count for e in events if (getattr(e, "self_device_time_total", 0) or 0) > 0)
    return {"wall_ms": wall, "gpu_busy_ms": gpu_us / 1e3, "kernels": float(kernels)}


def end_to_end(model: Any, batch: int, prompt_len: int, new_tokens: int, block: int) -> dict[str, float]:
    """tokens/s of AR baselines and of the block-diffusion sampler for `new_tokens` tokens per row."""
    from cudice.model.ar import ar_generate, static_ar_generate
    from cudice.model.config import SamplerConfig
    from cudice.model.fastpath import StaticRunner
    from cudice.model.runner import HFRunner
    from cudice.model.sampler import BlockDiffusionSampler

    device = next(model.parameters()).device
    mask_id, eos_id, high = special_ids(model)
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, high, (prompt_len,), generator=gen).tolist() for _ in range(batch)]
    out: dict[str, float] = {}

    ar_generate(model, prompts, 4, pad_id=eos_id, stop_ids=[eos_id], ignore_eos=True)  # warm-up
    ar = ar_generate(model, prompts, new_tokens, pad_id=eos_id, stop_ids=[eos_id], ignore_eos=True)
    out["hf_generate_tok_s"] = batch * new_tokens / ar.seconds
    fast_runner = StaticRunner(model, use_graphs=True)
    try:
        static_ar_generate(fast_runner, prompts, new_tokens, eos_id)  # captures the graph (same cache size)
        sar = static_ar_generate(fast_runner, prompts, new_tokens, eos_id)
        out["fast_ar_tok_s"] = batch * new_tokens / sar.seconds
    except Exception as exc:
        log(f"fast AR failed: {exc!r}")
        out["fast_ar_tok_s"] = float("nan")

    no_stop: list[int] = []  # random weights: decode exactly new_tokens (no EOS trimming)
    variants = (("thr0.9", 0.9, False), ("thr0", 0.0, False), ("thr0.9-fused", 0.9, True), ("thr0-fused", 0.0, True))
    for label, threshold, fuse in variants:
        cfg = SamplerConfig(strategy="low_confidence_dynamic", threshold=threshold, denoising_steps=block,
                            max_new_tokens=new_tokens, fuse_commit=fuse)
        runners = (("fast", fast_runner),) if fuse else (("hf", HFRunner(model)), ("fast", fast_runner))
        for name, runner in runners:
            sampler = BlockDiffusionSampler(runner, mask_id, eos_id, no_stop, lambda t: "")
            try:
                if name == "fast":
                    sampler.generate(prompts, cfg, block)  # captures the graphs (same cache size)
                sync(device)
                res = sampler.generate(prompts, cfg, block)
                sync(device)
            except Exception as exc:
                log(f"block diffusion {name} {label} failed: {exc!r}")
                out[f"bd_{name}_{label}_tok_s"] = float("nan")
                continue
            out[f"bd_{name}_{label}_tok_s"] = res.num_tokens / res.seconds
            out[f"bd_{label}_tokens_per_forward"] = len(res.rows[0].tokens) / res.num_forwards
    return out


def tiny_tokens_per_forward() -> dict[str, float]:
    """Sampler tokens/forward on the tiny checkpoint (random weights), end-to-end prompt."""
    from cudice.model.config import SamplerConfig
    from cudice.model.engine import load_engine
    from cudice.model.tiny import make_tiny

    reference = (Path(__file__).resolve().parent.parent / "examples" / "relu.py").read_text()
    with tempfile.TemporaryDirectory() as tmp:
        engine = load_engine(str(make_tiny(Path(tmp) / "tiny", sdar_layout=True)), device="cpu")
        out = {}
        for strategy in ("low_confidence_static", "low_confidence_dynamic"):
            g = engine.generate_kernel(reference, SamplerConfig(strategy=strategy, max_new_tokens=64))
            out[f"tiny_{strategy}_tokens_per_forward"] = g.tokens_per_forward
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default="1.7b,8b")
    ap.add_argument("--batches", default="1,16,64", help="batch sizes for the 1.7b (and tiny) shape")
    ap.add_argument("--batches-8b", default="1,16", help="batch sizes for the 8b shape")
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--block", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--quick", action="store_true", help="1.7b only, fewer tokens and repeats")
    args = ap.parse_args()
    if args.quick:
        args.shapes, args.new_tokens, args.repeat = "1.7b", 64, 10
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    if device.type == "cpu":
        log("no GPU: running the tiny shape only (figures are not meaningful)")
        args.shapes, args.batches, args.prompt_len, args.new_tokens, args.repeat = "tiny", "1,2", 16, 16, 3
    import transformers

    results: dict[str, Any] = {"device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
                               "torch": torch.__version__, "transformers": transformers.__version__,
                               "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "runs": []}
    log(f"# model_speed on {results['device']}, torch {torch.__version__}, transformers {transformers.__version__}")
    for shape in args.shapes.split(","):
        t0 = time.perf_counter()
        model = random_model(shape, device, dtype)
        n_params = sum(p.numel() for p in model.parameters())
        log(f"\n## {shape}: {n_params / 1e9:.2f} B parameters ({time.perf_counter() - t0:.0f} s to build)")
        try:
            prof = profile_one_forward(model, args.prompt_len)
            log(f"profile, eager HF 4-token forward at batch 1: wall {prof['wall_ms']:.1f} ms, GPU busy "
                f"{prof['gpu_busy_ms']:.1f} ms over {prof['kernels']:.0f} kernels")
            results["runs"].append({"shape": shape, "profile": prof})
        except Exception as exc:  # the profiler is optional; keep measuring
            log(f"profile failed: {exc!r}")
        for batch in [int(b) for b in (args.batches_8b if shape == "8b" else args.batches).split(",")]:
            row: dict[str, Any] = {"shape": shape, "batch": batch}
            try:
                lat = forward_latency(model, batch, args.prompt_len, args.block, args.repeat)
                row.update(lat)
                for name in [n for n in ("hf", "fast") if f"{n}_commit_ms" in lat]:
                    log(f"{shape} b={batch} {name:4s}: AR step {lat[f'{name}_ar_step_ms']:.2f} ms, denoise "
                        f"{lat[f'{name}_denoise_ms']:.2f} ms ({lat[f'{name}_denoise_ms'] / lat[f'{name}_ar_step_ms']:.2f}x AR), "
                        f"commit {lat[f'{name}_commit_ms']:.2f} ms")
                e2e = end_to_end(model, batch, args.prompt_len, args.new_tokens, args.block)
                row.update(e2e)
                base = e2e["hf_generate_tok_s"]
                log(f"{shape} b={batch} tok/s: HF generate {base:.0f} | fast AR {e2e['fast_ar_tok_s']:.0f} "
                    f"({e2e['fast_ar_tok_s'] / base:.1f}x)")
                for label in ("thr0.9", "thr0", "thr0.9-fused", "thr0-fused"):
                    tpf = e2e.get(f"bd_{label}_tokens_per_forward", float("nan"))
                    for name in [n for n in ("hf", "fast") if f"bd_{n}_{label}_tok_s" in e2e]:
                        v = e2e[f"bd_{name}_{label}_tok_s"]
                        log(f"  block diffusion {name:4s} {label:6s} ({tpf:.2f} tok/fwd): {v:.0f} tok/s = "
                            f"{v / base:.2f}x HF generate, {v / e2e['fast_ar_tok_s']:.2f}x fast AR")
            except Exception as exc:
                log(f"{shape} b={batch} failed: {exc!r}")
                row["error"] = repr(exc)
            results["runs"].append(row)
        del model
        if device.type == "cuda":
            torch.cuda.empty_cache()
    try:
        tiny = tiny_tokens_per_forward()
        results["tiny"] = tiny
        log("\n" + ", ".join(f"{k} {v:.2f}" for k, v in tiny.items()))
    except Exception as exc:
        log(f"tiny tokens/forward failed: {exc!r}")
    out_dir = Path(os.environ.get("OUT", "bench/out"))
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "model_speed.json").write_text(json.dumps(results, indent=2))
    ok = all("error" not in r for r in results["runs"])
    log(f"RESULT model_speed: {'ok' if ok else 'some runs failed'}; json in {out_dir / 'model_speed.json'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
