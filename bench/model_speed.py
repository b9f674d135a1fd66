"""Model runtime speed: block diffusion vs autoregressive decoding through the same weights.

Random weights at DICE/SDAR shapes (Qwen3 dims, bf16, SDPA): 1.7B, 4B (Qwen3-4B dims, tied
embeddings), 8B. Every ratio is against baselines measured in the same run. The runners:

- `hf`: eager transformers forward with a `DynamicCache` (`HFRunner`) - the reference tokens;
- `fast`: static KV cache + CUDA graphs over eager layer math (`StaticRunner(compile=False)`);
- `compiled`: the same with the layer math through torch.compile (`StaticRunner(compile=True)`),
  the engine's default on a GPU; each layer's q/k/v and gate/up weights packed into one GEMM each
  (the model is frozen, as `load_engine` leaves it); attention through the Triton block kernel
  (`cudice.model.attention`) on CUDA, as `fast` too;
- `compiled-sdpa`: `compiled` with SDPA attention over all static slots (the previous default): the
  same-run baseline of the Triton attention, in the latency, end-to-end and profile sections;
- `compiled-unpacked` (forward latency only): `compiled` with one GEMM per projection, the baseline
  of the packing in the same run.

Sections per shape and batch:
1. forward latency against a prompt_len-token cache: one AR step (1 token), one denoise
   forward (block tokens, K/V dropped), one commit (block tokens, K/V kept), one fused
   commit+denoise (2 blocks); plus a teacher-forced check: top-1 agreement and max |logit
   difference| of one denoise forward of each runner against `hf` on identical inputs;
2. end to end, tokens/s (prefill included; decode-only beside it): HF `generate` (greedy,
   dynamic cache), the greedy AR loop through `fast` and `compiled`, and the block-diffusion
   sampler with `low_confidence_dynamic` at threshold 0.9 (random weights are never confident:
   ~0.8 tokens per forward) and 0 (a whole block per step: what a confident model approaches),
   each also with `fuse_commit` (up to 4 tokens per forward with block 4). Every variant's
   tokens are compared with the eager reference of the same run: MATCH or MISMATCH (bf16
   rounding differs between fused and unfused kernels and random weights have near-tied
   logits, so read a bf16 MISMATCH with the teacher-forced agreement; the float32 check is exact);
3. mixed prompt lengths (largest batch): lengths drawn from [prompt_len/4, prompt_len]; the
   prefill groups rows by padding (`prefill_groups`: tokens computed and passes vs the real and the
   padded count);
4. float32 exactness (first shape; not with --quick/--no-exact): the compiled runner's tokens
   == `hf`'s, AR and fused BD;
5. profile at the smallest and largest batch: kernels, GPU busy time and wall of one denoise
   forward and one AR step per runner ("-nograph" variants count the kernels a graph replays),
   and of one prefill through the compiled runners;
   `--profile` also prints the torch.profiler tables.

Compile and capture seconds are reported apart (`warm-up`); timed runs follow a warm-up run.
Usage: python bench/model_speed.py [--shapes 1.7b,4b,8b] [--batches 1,16,64] [--batches-4b 1,128]
       [--new-tokens 128] [--prompt-len 512] [--quick] [--profile] [--compile-mode MODE]
`--quick` (one H200, ~6 min): 1.7B at batch 1 and 4B at batch 128 (the targets' rows), 10 repeats,
end to end through the compiled runners only.
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
from cudice.model.tiny import TINY_DIMS
from random_qwen import random_qwen3

# The fields of TINY_DIMS that shape a model (random_model sets context length and RoPE itself):
# hidden, intermediate, layers, attention heads, KV heads, head_dim, tied embeddings.
_SHAPE_KEYS = tuple(
    k for k in TINY_DIMS if k not in ("max_position_embeddings", "rope_theta", "rms_norm_eps")
)
_SHAPE_DIMS = {  # the values of _SHAPE_KEYS, in that order
    # SDAR-1.7B-Chat config.json (untied lm_head)
    "1.7b": (2048, 6144, 28, 16, 8, 128, False),
    # Qwen3-4B config.json (SDAR-4B is a Qwen3-4B fine-tune; Qwen3-4B ties its embeddings)
    "4b": (2560, 9728, 36, 32, 8, 128, True),
    # Qwen3-8B dimensions (SDAR-8B / DICE-8B are Qwen3-8B fine-tunes)
    "8b": (4096, 12288, 36, 32, 8, 128, False),
    # the tiny test checkpoint's (cudice.model.tiny)
    "tiny": tuple(TINY_DIMS[k] for k in _SHAPE_KEYS),
}
SHAPES: dict[str, dict[str, Any]] = {
    name: dict(zip(_SHAPE_KEYS, dims, strict=True)) for name, dims in _SHAPE_DIMS.items()
}
VOCAB, MASK_ID, EOS_ID = 151936, 151669, 151643  # Qwen/SDAR vocabulary and ids
LABELS = (
    ("thr0.9", 0.9, False),
    ("thr0", 0.0, False),
    ("thr0.9-fused", 0.9, True),
    ("thr0-fused", 0.0, True),
)
FAST = ["fast", "compiled", "compiled-sdpa"]  # the static-cache runners of the end-to-end section


def log(*args: Any) -> None:
    print(*args, flush=True)


def special_ids(model: Any) -> tuple[int, int, int]:
    """(mask id, eos/pad id, upper bound for random prompt tokens) within the model's vocabulary."""
    v = model.config.vocab_size
    return min(MASK_ID, v - 1), min(EOS_ID, v - 2), min(150000, v - 3)


def random_model(shape: str, device: torch.device, dtype: torch.dtype) -> Any:
    """A frozen random Qwen3 of `shape` (the Qwen/SDAR vocabulary, a small one for "tiny")."""
    dims = {"vocab_size": VOCAB if shape != "tiny" else 1024, **SHAPES[shape]}
    return random_qwen3(dims, device, dtype, std=0.02)  # frozen, as the editor's load_engine(freeze=True)


def make_runners(model: Any, compile_mode: str | None) -> dict[str, Any]:
    from cudice.model.fastpath import StaticRunner
    from cudice.model.runner import HFRunner

    keep = float("inf")  # the timed run reuses the warm-up run's cache and graphs at every batch size
    return {
        "hf": HFRunner(model),
        "fast": StaticRunner(model, use_graphs=True, keep_cache_bytes=keep),
        "compiled": StaticRunner(
            model, use_graphs=True, compile=True, compile_mode=compile_mode, keep_cache_bytes=keep
        ),
        "compiled-sdpa": StaticRunner(
            model,
            use_graphs=True,
            compile=True,
            compile_mode=compile_mode,
            keep_cache_bytes=keep,
            attention="sdpa",
        ),
        # forward latency only (not in FAST): the same without packed q/k/v and gate/up GEMMs
        "compiled-unpacked": StaticRunner(
            model, use_graphs=True, compile=True, compile_mode=compile_mode, keep_cache_bytes=keep, pack=False
        ),
    }


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


def warmup_seconds(runner: Any) -> float:
    return sum(getattr(runner, "warmup_seconds", {}).values())


def compare(tokens: Any, reference: Any) -> str:
    """MATCH, or MISMATCH with how many rows agree and where the first difference is."""
    tokens, reference = [list(r) for r in tokens], [list(r) for r in reference]
    if tokens == reference:
        return "MATCH"
    same = sum(a == b for a, b in zip(tokens, reference, strict=True))
    first = min(
        next((k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
        for a, b in zip(tokens, reference, strict=True)
        if a != b
    )
    return f"MISMATCH ({same}/{len(tokens)} rows equal; first difference at token {first})"


# --- 1. forward latency --------------------------------------------------------------------
def forward_latency(
    model: Any, runners: dict[str, Any], batch: int, prompt_len: int, block: int, repeat: int
) -> dict[str, Any]:
    """ms per AR step / denoise / commit / fused forward per runner, and the teacher-forced check."""
    from cudice.model.runner import block_causal_mask

    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, special_ids(model)[2], (batch, prompt_len + 2 * block), generator=gen).to(device)
    valid = torch.ones(batch, prompt_len + 2 * block, dtype=torch.bool, device=device)
    pos = torch.arange(prompt_len + 2 * block, device=device)[None].expand(batch, -1)
    prefill_mask = block_causal_mask(valid[:, :prompt_len], block, dtype)
    out: dict[str, Any] = {}
    reference: torch.Tensor | None = None
    for name, runner in runners.items():
        try:
            before = warmup_seconds(runner)
            logits = _latency_one(
                name, runner, out, ids, valid, pos, prefill_mask, prompt_len, block, repeat, dtype
            )
            out[f"{name}_warmup_s"] = warmup_seconds(runner) - before
            if reference is None:
                reference = logits
            else:
                top1 = (logits.argmax(-1) == reference.argmax(-1)).float().mean().item()
                out[f"{name}_teacher_top1_agreement"] = top1
                out[f"{name}_teacher_max_abs_logit_diff"] = (logits - reference).abs().max().item()
                out["logit_std"] = reference.std().item()
        except Exception as exc:  # a failing path must not hide the others' figures
            log(f"{name} forward latency failed: {exc!r}")
    return out


def _latency_one(
    name: str,
    runner: Any,
    out: dict[str, Any],
    ids: torch.Tensor,
    valid: torch.Tensor,
    pos: torch.Tensor,
    prefill_mask: torch.Tensor,
    prompt_len: int,
    block: int,
    repeat: int,
    dtype: torch.dtype,
) -> torch.Tensor:
    from cudice.model.runner import _additive

    cache = runner.new_cache(ids.shape[0], prompt_len + 2 * block)
    runner.forward(ids[:, :prompt_len], prefill_mask, pos[:, :prompt_len], cache, logits=False)

    def step(n: int, logits: bool) -> torch.Tensor:
        mask = _additive(valid[:, None, None, : prompt_len + n].expand(-1, 1, n, -1), dtype)
        result = runner.forward(
            ids[:, prompt_len : prompt_len + n],
            mask,
            pos[:, prompt_len : prompt_len + n],
            cache,
            logits=logits,
        )
        runner.crop(cache, prompt_len)  # every repeat sees the same cache
        return result

    first = step(block, True).float().clone()  # (B, block, V) for the check
    out[f"{name}_ar_step_ms"] = timed_ms(lambda: step(1, True), ids.device, repeat)
    out[f"{name}_denoise_ms"] = timed_ms(lambda: step(block, True), ids.device, repeat)
    out[f"{name}_commit_ms"] = timed_ms(lambda: step(block, False), ids.device, repeat)
    out[f"{name}_fused_ms"] = timed_ms(lambda: step(2 * block, True), ids.device, repeat)
    return first


# --- 2./3. end to end ----------------------------------------------------------------------
def end_to_end(
    model: Any,
    runners: dict[str, Any],
    prompts: list[list[int]],
    new_tokens: int,
    block: int,
    labels: tuple[tuple[str, float, bool], ...] = LABELS,
    with_ar: bool = True,
) -> dict[str, Any]:
    """tokens/s and token checks of the AR baselines and of the block-diffusion sampler."""
    from cudice.model.ar import ar_generate, static_ar_generate
    from cudice.model.config import SamplerConfig
    from cudice.model.sampler import BlockDiffusionSampler

    device = next(model.parameters()).device
    mask_id, eos_id, _ = special_ids(model)
    batch = len(prompts)
    out: dict[str, Any] = {}
    if with_ar:
        ar_generate(model, prompts, 4, pad_id=eos_id, stop_ids=[eos_id], ignore_eos=True)  # warm-up
        ar = ar_generate(model, prompts, new_tokens, pad_id=eos_id, stop_ids=[eos_id], ignore_eos=True)
        out["hf_generate_tok_s"] = batch * new_tokens / ar.seconds
        for name in FAST:
            try:
                static_ar_generate(runners[name], prompts, new_tokens, eos_id)  # compiles, captures
                sar = static_ar_generate(runners[name], prompts, new_tokens, eos_id)
                out[f"{name}_ar_tok_s"] = batch * new_tokens / sar.seconds
                out[f"{name}_ar_decode_tok_s"] = (
                    batch * (new_tokens - 1) / max(sar.seconds - sar.prefill_seconds, 1e-9)
                )
                out[f"{name}_ar_check"] = compare(sar.tokens, ar.tokens)
            except Exception as exc:
                log(f"{name} AR failed: {exc!r}")
                out[f"{name}_ar_tok_s"] = float("nan")

    no_stop: list[int] = []  # random weights: decode exactly new_tokens (no EOS trimming)
    reference: dict[float, Any] = {}
    warmed: set[tuple[str, bool]] = set()  # graphs are kept per cache size: one warm-up per runner and L
    for label, threshold, fuse in labels:
        cfg = SamplerConfig(
            strategy="low_confidence_dynamic",
            threshold=threshold,
            denoising_steps=block,
            max_new_tokens=new_tokens,
            fuse_commit=fuse,
        )
        names = (("hf",) if not fuse and threshold not in reference else ()) + tuple(FAST)
        for name in names:
            sampler = BlockDiffusionSampler(runners[name], mask_id, eos_id, no_stop, lambda t: "")
            try:
                if name != "hf" and (name, fuse) not in warmed:
                    sampler.generate(prompts, cfg, block)  # compiles, captures the graphs (same cache size)
                    warmed.add((name, fuse))
                sync(device)
                res = sampler.generate(prompts, cfg, block)
                sync(device)
            except Exception as exc:
                log(f"block diffusion {name} {label} failed: {exc!r}")
                out[f"bd_{name}_{label}_tok_s"] = float("nan")
                continue
            tokens = [r.tokens for r in res.rows]
            if name == "hf":
                reference[threshold] = tokens
            elif threshold in reference:
                out[f"bd_{name}_{label}_check"] = compare(tokens, reference[threshold])
            out[f"bd_{name}_{label}_tok_s"] = res.num_tokens / res.seconds
            out[f"bd_{name}_{label}_decode_tok_s"] = res.num_tokens / max(
                res.seconds - res.prefill_seconds, 1e-9
            )
            out[f"bd_{name}_{label}_prefill_s"] = res.prefill_seconds
            out[f"bd_{label}_tokens_per_forward"] = len(res.rows[0].tokens) / res.num_forwards
    return out


def random_prompts(model: Any, lengths: list[int], seed: int = 0) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    high = special_ids(model)[2]
    return [torch.randint(0, high, (n,), generator=gen).tolist() for n in lengths]


def print_e2e(shape: str, batch: int, e2e: dict[str, Any], with_ar: bool = True) -> None:
    base = e2e.get("hf_generate_tok_s", float("nan"))
    if with_ar:
        log(
            f"{shape} b={batch} tok/s: HF generate {base:.0f} | "
            + " | ".join(
                f"{n} AR {e2e.get(f'{n}_ar_tok_s', float('nan')):.0f} "
                f"(decode {e2e.get(f'{n}_ar_decode_tok_s', float('nan')):.0f}; "
                f"{e2e.get(f'{n}_ar_check', '-')})"
                for n in FAST
            )
        )
    for label, _, _ in LABELS:
        tpf = e2e.get(f"bd_{label}_tokens_per_forward", float("nan"))
        for name in ("hf", *FAST):
            v = e2e.get(f"bd_{name}_{label}_tok_s")
            if v is None:
                continue
            ratios = "".join(
                f" = {v / base:.2f}x HF generate, {v / e2e[f'{n}_ar_tok_s']:.2f}x {n} AR"
                for n in ("compiled",)
                if with_ar and f"{n}_ar_tok_s" in e2e
            )
            log(
                f"  block diffusion {name:8s} {label:12s} ({tpf:.2f} tok/fwd): {v:.0f} tok/s "
                f"(decode {e2e.get(f'bd_{name}_{label}_decode_tok_s', float('nan')):.0f}, prefill "
                f"{e2e.get(f'bd_{name}_{label}_prefill_s', float('nan')):.2f} s){ratios}; "
                f"{e2e.get(f'bd_{name}_{label}_check', 'reference')}"
            )


# --- 4. float32 exactness --------------------------------------------------------------------
def exact_check(model: Any, prompt_len: int, block: int, compile_mode: str | None) -> dict[str, str]:
    """In float32 the compiled runner must give the eager reference's tokens exactly (AR and fused BD)."""
    from cudice.model.ar import ar_generate, static_ar_generate
    from cudice.model.config import SamplerConfig
    from cudice.model.fastpath import StaticRunner
    from cudice.model.runner import HFRunner
    from cudice.model.sampler import BlockDiffusionSampler

    dtype = next(model.parameters()).dtype
    model.float()
    try:
        mask_id, eos_id, _ = special_ids(model)
        prompts = random_prompts(model, [prompt_len, prompt_len // 2 + 3], seed=7)
        runner = StaticRunner(model, use_graphs=True, compile=True, compile_mode=compile_mode)
        out = {
            "ar": compare(
                static_ar_generate(runner, prompts, 16, eos_id).tokens,
                ar_generate(model, prompts, 16, eos_id, [eos_id], ignore_eos=True).tokens,
            )
        }
        cfg = SamplerConfig(
            strategy="low_confidence_dynamic", threshold=0.0, max_new_tokens=16, denoising_steps=block
        )
        ref = BlockDiffusionSampler(HFRunner(model), mask_id, eos_id, [], lambda t: "").generate(
            prompts, cfg, block
        )
        fused = BlockDiffusionSampler(runner, mask_id, eos_id, [], lambda t: "").generate(
            prompts, cfg.replace(fuse_commit=True), block
        )
        out["bd_thr0_fused"] = compare([r.tokens for r in fused.rows], [r.tokens for r in ref.rows])
        out["compiled"] = "yes" if runner.compiled else f"no ({runner.compile_error})"
        return out
    finally:
        model.to(dtype)


# --- 5. profile ------------------------------------------------------------------------------
def profile_forwards(
    model: Any, prompt_len: int, batch: int, block: int, compile_mode: str | None, table: bool
) -> dict[str, Any]:
    """Kernels, GPU-busy and wall time of one denoise forward and one AR step per runner."""
    from cudice.model.fastpath import StaticRunner
    from cudice.model.runner import HFRunner, _additive, block_causal_mask
    from torch.profiler import ProfilerActivity, profile

    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    runners = {
        "hf": HFRunner(model),
        "fast-nograph": StaticRunner(model, use_graphs=False),
        "compiled-nograph": StaticRunner(model, use_graphs=False, compile=True, compile_mode=compile_mode),
        "fast": StaticRunner(model, use_graphs=True),
        "compiled": StaticRunner(model, use_graphs=True, compile=True, compile_mode=compile_mode),
        "compiled-sdpa": StaticRunner(
            model, use_graphs=True, compile=True, compile_mode=compile_mode, attention="sdpa"
        ),
    }
    ids = torch.randint(0, special_ids(model)[2], (batch, prompt_len + block), device=device)
    pos = torch.arange(prompt_len + block, device=device)[None].expand(batch, -1)
    valid = torch.ones(batch, prompt_len + block, dtype=torch.bool, device=device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    out: dict[str, Any] = {}
    for name in list(runners):
        runner = runners.pop(name)  # one runner's cache (and graphs) alive at a time
        setup = time.perf_counter()  # the first compiled runner of a shape compiles here: reported apart
        cache = runner.new_cache(batch, prompt_len + 2 * block)
        runner.forward(
            ids[:, :prompt_len],
            block_causal_mask(valid[:, :prompt_len], block, dtype),
            pos[:, :prompt_len],
            cache,
            logits=False,
        )
        for n, what in ((block, "denoise"), (1, "ar_step")):
            mask = _additive(valid[:, None, None, : prompt_len + n].expand(-1, 1, n, -1), dtype)

            def fwd(n: int = n, mask: torch.Tensor = mask, runner: Any = runner, cache: Any = cache) -> None:
                runner.forward(
                    ids[:, prompt_len : prompt_len + n], mask, pos[:, prompt_len : prompt_len + n], cache
                )
                runner.crop(cache, prompt_len)

            for _ in range(3):
                fwd()
            sync(device)
            if what == "denoise":
                out[f"{name}_setup_s"] = time.perf_counter() - setup
                if name.startswith("compiled") and "nograph" not in name:
                    out[f"{name}_prefill"] = _profile_prefill(
                        runner, ids[:, :prompt_len], valid[:, :prompt_len], pos[:, :prompt_len], block, table
                    )
                    log(f"profile {name:16s} prefill  b={batch}: {out[f'{name}_prefill']}")
                log(
                    f"profile {name:16s} b={batch}: prefill + first forwards (compile, capture) "
                    f"{out[f'{name}_setup_s']:.1f} s"
                )
            with profile(activities=activities) as prof:
                t = time.perf_counter()
                fwd()
                sync(device)
                wall = (time.perf_counter() - t) * 1e3
            busy_ms, kernels = _gpu_busy(prof, table, device)
            out[f"{name}_{what}"] = {"wall_ms": wall, "gpu_busy_ms": busy_ms, "kernels": kernels}
            log(
                f"profile {name:16s} {what:8s} b={batch}: wall {wall:.2f} ms (profiled), GPU busy "
                f"{busy_ms:.2f} ms over {kernels} kernels"
            )
    return out


def _profile_prefill(
    runner: Any, ids: torch.Tensor, valid: torch.Tensor, pos: torch.Tensor, block: int, table: bool
) -> dict[str, Any]:
    """Wall and GPU busy time of one prefill (block-causal, no logits) into a fresh cache."""
    from cudice.model.runner import block_causal_mask
    from torch.profiler import ProfilerActivity, profile

    mask = block_causal_mask(valid, block, runner.dtype)
    cache = runner.new_cache(ids.shape[0], ids.shape[1] + 2 * block)
    runner.forward(ids, mask, pos, cache, logits=False)  # warm (the shapes of this length compile once)
    cache = runner.new_cache(ids.shape[0], ids.shape[1] + 2 * block)
    sync(runner.device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t = time.perf_counter()
        runner.forward(ids, mask, pos, cache, logits=False)
        sync(runner.device)
        wall = (time.perf_counter() - t) * 1e3
    busy, kernels = _gpu_busy(prof, table, runner.device)
    return {"wall_ms": round(wall, 2), "gpu_busy_ms": round(busy, 2), "kernels": kernels}


def _gpu_busy(prof: Any, table: bool, device: torch.device) -> tuple[float, int]:
    """(GPU busy milliseconds, kernel count) of a profiled region; `table` logs its top operators."""
    kernels = [e for e in prof.events() if str(getattr(e, "device_type", "")).endswith("CUDA")]
    if table:
        sort = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
        log(prof.key_averages().table(sort_by=sort, row_limit=15, max_name_column_width=60))
    return sum(e.time_range.elapsed_us() for e in kernels) / 1e3, len(kernels)


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


def run_shape(
    shape: str,
    batches: list[int],
    args: argparse.Namespace,
    device: torch.device,
    dtype: torch.dtype,
    results: dict[str, Any],
    first: bool,
) -> None:
    t0 = time.perf_counter()
    model = random_model(shape, device, dtype)
    log(
        f"\n## {shape}: {sum(p.numel() for p in model.parameters()) / 1e9:.2f} B parameters "
        f"({time.perf_counter() - t0:.0f} s to build)"
    )
    profiled = not (args.latency_only or args.no_profile)
    for batch in sorted({min(batches), max(batches)}) if profiled else ():
        try:
            prof = profile_forwards(
                model, args.prompt_len, batch, args.block, args.compile_mode, args.profile
            )
            results["runs"].append({"shape": shape, "batch": batch, "profile": prof})
        except Exception as exc:  # the profiler is optional; keep measuring
            log(f"profile failed: {exc!r}")
    if args.profile_only:
        write(results)
        return
    runners = make_runners(model, args.compile_mode)
    for batch in batches:
        row: dict[str, Any] = {"shape": shape, "batch": batch}
        try:
            lat = forward_latency(model, runners, batch, args.prompt_len, args.block, args.repeat)
            row.update(lat)
            for name in [n for n in runners if f"{n}_commit_ms" in lat]:
                log(
                    f"{shape} b={batch} {name:8s}: AR step {lat[f'{name}_ar_step_ms']:.2f} ms, denoise "
                    f"{lat[f'{name}_denoise_ms']:.2f} ms "
                    f"({lat[f'{name}_denoise_ms'] / lat[f'{name}_ar_step_ms']:.2f}x AR), "
                    f"commit {lat[f'{name}_commit_ms']:.2f} ms, fused {lat[f'{name}_fused_ms']:.2f} ms; "
                    f"warm-up (compile+capture) {lat.get(f'{name}_warmup_s', 0):.1f} s"
                    + (
                        f"; teacher-forced top-1 vs hf {100 * lat[f'{name}_teacher_top1_agreement']:.2f}%, "
                        f"max |dlogit| {lat[f'{name}_teacher_max_abs_logit_diff']:.3f} (logit std "
                        f"{lat['logit_std']:.3f})"
                        if f"{name}_teacher_top1_agreement" in lat
                        else ""
                    )
                )
            if args.latency_only:
                results["runs"].append(row)
                write(results)
                continue
            e2e = end_to_end(
                model, runners, random_prompts(model, [args.prompt_len] * batch), args.new_tokens, args.block
            )
            row.update(e2e)
            print_e2e(shape, batch, e2e)
            comp = runners["compiled"]
            row["compile_error"] = comp.compile_error
            row["attention"], row["attention_error"] = comp.attention, comp.attention_error
            if comp.compile_error:
                log(f"  compiled runner fell back to eager: {comp.compile_error[:300]}")
            log(
                f"  compiled runner's attention: {comp.attention}"
                + (f" (Triton failed: {comp.attention_error[:300]})" if comp.attention_error else "")
            )
        except Exception as exc:
            log(f"{shape} b={batch} failed: {exc!r}")
            row["error"] = repr(exc)
        results["runs"].append(row)
        write(results)
    if args.latency_only:
        return
    batch = max(batches)
    try:  # 3. mixed prompt lengths
        gen = torch.Generator().manual_seed(3)
        lengths = torch.randint(args.prompt_len // 4, args.prompt_len + 1, (batch,), generator=gen).tolist()
        mixed = end_to_end(
            model,
            runners,
            random_prompts(model, lengths, seed=4),
            args.new_tokens,
            args.block,
            labels=(("thr0", 0.0, False), ("thr0-fused", 0.0, True)),
            with_ar=False,
        )
        from cudice.model.fastpath import prefill_groups

        whole = [n // args.block * args.block for n in lengths]
        groups = prefill_groups(
            [max(whole) - w for w in whole], max(whole), runners["compiled"].prefill_pass_tokens
        )
        computed = sum(len(rows) * (max(whole) - p) for p, rows in groups)
        mixed.update(
            {
                "prefill_tokens": sum(whole),
                "prefill_computed_tokens": computed,
                "prefill_passes": len(groups),
                "padded_prefill_tokens": batch * max(whole),
            }
        )
        log(
            f"{shape} b={batch} mixed prompt lengths {min(lengths)}..{max(lengths)} (mean "
            f"{sum(lengths) / batch:.0f}): the static runners' prefill computes {computed} tokens in "
            f"{len(groups)} passes ({sum(whole)} real; padded to the longest: {batch * max(whole)})"
        )
        print_e2e(shape, batch, mixed, with_ar=False)
        results["runs"].append({"shape": shape, "batch": batch, "mixed_lengths": lengths, **mixed})
    except Exception as exc:
        log(f"{shape} mixed lengths failed: {exc!r}")
    del runners
    if first and args.exact:
        try:
            exact = exact_check(model, min(args.prompt_len, 128), args.block, args.compile_mode)
            log(
                f"{shape} float32 exactness, compiled vs eager reference: "
                + ", ".join(f"{k} {v}" for k, v in exact.items())
            )
            results["runs"].append({"shape": shape, "float32_check": exact})
        except Exception as exc:
            log(f"{shape} float32 check failed: {exc!r}")
    write(results)
    del model
    if device.type == "cuda":
        torch.cuda.empty_cache()


TARGETS = (  # (shape, batch, key, comparison, bound, what)
    (
        "4b",
        128,
        "bd_compiled_thr0-fused_tok_s",
        ">=",
        10_000,
        "SDAR-4B b=128 tok/s, fused commit, threshold 0",
    ),
    ("4b", 128, "compiled_denoise_over_ar", "<=", 1.1, "SDAR-4B b=128 denoise forward / AR step"),
    ("1.7b", 1, "compiled_denoise_ms", "<=", 2.0, "DICE-1.7B b=1 4-token denoise forward, ms"),
    ("1.7b", 1, "bd_compiled_thr0-fused_tok_s", ">=", 720, "DICE-1.7B b=1 tok/s, fused commit, threshold 0"),
)


def print_targets(results: dict[str, Any]) -> None:
    """One line per target of the runtime's speed goals: measured, bound, met or not."""
    for shape, batch, key, op, bound, what in TARGETS:
        row = next(
            (
                r
                for r in results["runs"]
                if r.get("shape") == shape
                and r.get("batch") == batch
                and "mixed_lengths" not in r
                and "profile" not in r
            ),
            None,
        )
        if row is None:
            continue
        if key == "compiled_denoise_over_ar":
            value = row.get("compiled_denoise_ms", float("nan")) / row.get(
                "compiled_ar_step_ms", float("nan")
            )
        else:
            value = row.get(key, float("nan"))
        met = value >= bound if op == ">=" else value <= bound
        log(f"TARGET {what}: {value:.2f} (target {op} {bound}) {'MET' if met else 'NOT MET'}")


def write(results: dict[str, Any]) -> Path:
    out_dir = Path(os.environ.get("OUT", "bench/out"))
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "model_speed.json"
    path.write_text(json.dumps(results, indent=2, default=str))
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default="1.7b,4b,8b")
    ap.add_argument("--batches", default="1,16,64", help="batch sizes for the 1.7b (and tiny) shape")
    ap.add_argument("--batches-4b", default="1,128", help="batch sizes for the 4b shape")
    ap.add_argument("--batches-8b", default="1,16", help="batch sizes for the 8b shape")
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--block", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--compile-mode", default=None, help="torch.compile mode (default: Inductor's default)")
    ap.add_argument(
        "--profile", action="store_true", help="print torch.profiler tables of the profiled forwards"
    )
    ap.add_argument(
        "--no-exact",
        dest="exact",
        action="store_false",
        help="skip the float32 exactness check (a second compilation of the first shape)",
    )
    ap.add_argument(
        "--latency-only",
        action="store_true",
        help="only section 1 (forward latency per runner, packed and unpacked): no profile, end to end, "
        "mixed lengths, float32 check",
    )
    ap.add_argument(
        "--profile-only", action="store_true", help="only section 5 (the profile) of each shape and batch"
    )
    ap.add_argument("--no-profile", action="store_true", help="skip section 5 (the profile)")
    ap.add_argument(
        "--quick",
        action="store_true",
        help="1.7b at batch 1 and 4b at batch 128, 10 repeats, "
        "no float32 check (tests/model/test_fastpath.py's gpu test checks float32 on CUDA)",
    )
    args = ap.parse_args()
    if args.quick:
        args.shapes, args.batches, args.batches_4b, args.repeat = "1.7b,4b", "1", "128", 10
        args.exact = False
        FAST.remove("fast")  # end to end: the compiled runners only (the eager-math one is slower)
    if args.latency_only or args.profile_only:
        args.exact = False
    # three shapes x (bf16 + float32) x (T >= 2, T = 1) compilations of each layer function: above
    # torch.compile's default of 8 per function, after which it would silently run eager
    for knob in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, max(getattr(torch._dynamo.config, knob), 32))
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    if device.type == "cpu":
        log("no GPU: running the tiny shape only (figures are not meaningful)")
        args.shapes, args.batches, args.prompt_len, args.new_tokens, args.repeat = "tiny", "1,3", 16, 16, 3
    import transformers

    results: dict[str, Any] = {
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "args": vars(args),
        "runs": [],
    }
    log(
        f"# model_speed on {results['device']}, torch {torch.__version__}, "
        f"transformers {transformers.__version__}"
    )
    start = time.perf_counter()
    for i, shape in enumerate(args.shapes.split(",")):
        spec = {"8b": args.batches_8b, "4b": args.batches_4b}.get(shape, args.batches)
        run_shape(shape, [int(b) for b in spec.split(",")], args, device, dtype, results, first=i == 0)
    try:
        if args.latency_only or args.profile_only:
            raise RuntimeError("skipped (--latency-only or --profile-only)")
        tiny = tiny_tokens_per_forward()
        results["tiny"] = tiny
        log("\n" + ", ".join(f"{k} {v:.2f}" for k, v in tiny.items()))
    except Exception as exc:
        log(f"tiny tokens/forward failed: {exc!r}")
    log("")
    print_targets(results)
    path = write(results)
    ok = all("error" not in r for r in results["runs"])
    log(
        f"RESULT model_speed: {'ok' if ok else 'some runs failed'} in {time.perf_counter() - start:.0f} s; "
        f"json in {path}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
