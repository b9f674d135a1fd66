"""GPU smoke run of `cudice.model.train` at the DICE-1.7B shape (random weights, nothing downloaded).

1. SFT: a Qwen3-1.7B-shaped model (vocab 151936, hidden 2048, 28 layers, 16/8 heads, head_dim
   128) built on the GPU from a config; `train_sft` steps on random token samples with fp32
   master weights + bf16 autocast, with and without gradient checkpointing. Prints tokens/s
   (real tokens of the batch per second; the model runs twice as many, the `[x_t ; x_0]` copy)
   and the peak GPU memory.
2. BiC-RL: one end-to-end step of `run_stage` at the same shape (vocab cut to the tiny test
   tokenizer's, so sampled ids decode): rollouts through the fast sampler in KV-budgeted
   micro-batches, rewards from the real verifier (`reward_pool`, anti-cheat on) against the
   bundled examples/relu.py and examples/softmax.py, PPO with 2 epochs × 2 minibatches.
   A random model never writes a correct kernel, so the first sample of each task gets its
   text replaced by the bundled correct candidate before verification ("planted"): the group
   then has spread and the update runs. The replayed tokens stay the sampled ones.

Prints one `RESULT` line. Needs a CUDA GPU with bf16 and the verifier's toolchain (nvcc).
Usage: python bench/train_smoke.py [--sft-steps 5] [--seq-len 2048] [--batch 4] [--skip-rl]
Not covered: several GPUs (use `accelerate launch` with the CLI, docs/training.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QWEN3_1P7B = {
    "vocab_size": 151936,
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "max_position_embeddings": 32768,
    "rope_theta": 1_000_000.0,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def build_model(vocab_size: int | None = None):  # type: ignore[no-untyped-def]
    import torch
    import transformers

    dims = {**QWEN3_1P7B, **({"vocab_size": vocab_size} if vocab_size else {})}
    config = transformers.Qwen3Config(**dims)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device("cuda"):
        return transformers.Qwen3ForCausalLM(config)


def sft_phase(steps: int, seq_len: int, batch: int, checkpointing: bool) -> dict[str, float]:
    import torch
    from cudice.model.train.config import ModelSetup, SFTConfig
    from cudice.model.train.sft import EncodedSample, train_sft

    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    model = build_model()
    g = torch.Generator().manual_seed(0)
    samples = [
        EncodedSample(torch.randint(0, 151000, (seq_len,), generator=g).tolist(), seq_len // 8)
        for _ in range(batch * steps)
    ]
    config = SFTConfig(
        learning_rate=1e-5,
        num_epochs=1,
        batch_size=batch,
        warmup_ratio=0.0,
        max_length=seq_len,
        setup=ModelSetup(precision="bf16-autocast", gradient_checkpointing=checkpointing),
    )
    start = time.perf_counter()
    history = train_sft(model, samples, config, block_size=4, mask_token_id=151669, pad_token_id=151643)
    seconds = time.perf_counter() - start
    rates = [h["tokens_per_s"] for h in history[2:]] or [history[-1]["tokens_per_s"]]  # after warm-up
    figures = {
        "tokens_per_s": statistics.median(rates),
        "peak_gib": torch.cuda.max_memory_allocated() / 2**30,
        "seconds": seconds,
        "first_loss": history[0]["loss"],
        "last_loss": history[-1]["loss"],
        "dtype_fp32": float(all(p.dtype == torch.float32 for p in model.parameters())),
    }
    log(f"sft checkpointing={checkpointing} B={batch} L={seq_len}: {json.dumps(figures)}")
    del model
    torch.cuda.empty_cache()
    return figures


def rl_phase(tmp: Path) -> dict[str, float]:
    import torch
    from cudice.model.engine import Engine
    from cudice.model.loader import load_checkpoint
    from cudice.model.tiny import make_tiny
    from cudice.model.train.config import ModelSetup, RLConfig
    from cudice.model.train.data import RLTask
    from cudice.model.train.reward import reward_pool, verifier_reward_fn
    from cudice.model.train.rl import run_stage
    from cudice.model.train.rollout import engine_rollout_fn, prompt_token_counter

    small = load_checkpoint(str(make_tiny(tmp / "tok", sdar_layout=True)), device="cpu")
    model = build_model(vocab_size=small.model.config.vocab_size)
    loaded = dataclasses.replace(small, model=model.eval(), device=torch.device("cuda"), dtype=torch.float32)
    engine = Engine(loaded, fast=True)
    examples = ROOT / "examples"
    tasks = [
        RLTask("e2e", 1, (examples / f"{name}.py").read_text(), task_id=name) for name in ("relu", "softmax")
    ]
    planted = {
        name: f"```python\n{(examples / f'{name}_cuda.py').read_text()}```" for name in ("relu", "softmax")
    }
    config = RLConfig(
        stage="e2e",
        num_steps=1,
        tasks_per_step=2,
        samples_per_task=4,
        max_new_tokens=64,
        learning_rate=1e-6,
        ppo_epochs=2,
        num_minibatches=2,
        required_speedup=None,
        rollout_memory_gib=0.5,
        setup=ModelSetup(precision="bf16-autocast", gradient_checkpointing=True),
    )
    verify_seconds: list[float] = []
    with reward_pool(gpus=[0]) as backend:
        verified = verifier_reward_fn(backend)

        def reward(rollouts, cfg):  # type: ignore[no-untyped-def]
            texts = [
                planted[r.task.task_id] if i % cfg.samples_per_task == 0 else r.text
                for i, r in enumerate(rollouts)
            ]
            start = time.perf_counter()
            out = verified(
                [dataclasses.replace(r, text=t) for r, t in zip(rollouts, texts, strict=True)], cfg
            )
            verify_seconds.append(time.perf_counter() - start)
            log(f"rewards (first of each task planted): {out}")
            return out

        start = time.perf_counter()
        stats = run_stage(
            model,
            tasks,
            config,
            rollout_fn=engine_rollout_fn(engine),
            reward_fn=reward,
            block_size=4,
            mask_token_id=loaded.ids.mask,
            pad_token_id=loaded.ids.pad,
            count_prompt_tokens=prompt_token_counter(engine),
        )[0]
    figures = {
        "mean_reward": stats.mean_reward,
        "kept_groups": stats.num_kept_groups,
        "rows": stats.num_rows,
        "updates": stats.num_updates,
        "clip_fraction": stats.clip_fraction,
        "kl": stats.kl,
        "rollout_tokens_per_s": stats.tokens_per_s,
        "verify_s": sum(verify_seconds),
        "step_s": time.perf_counter() - start,
        "peak_gib": torch.cuda.max_memory_allocated() / 2**30,
    }
    log(f"rl step: {json.dumps(figures)}")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sft-steps", type=int, default=5)
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--skip-rl", action="store_true")
    args = parser.parse_args()
    import tempfile

    import torch

    if not torch.cuda.is_available() or not torch.cuda.is_bf16_supported():
        print("RESULT train_smoke: skipped (needs a CUDA GPU with bf16)")
        return
    start = time.perf_counter()
    ckpt = sft_phase(args.sft_steps, args.seq_len, args.batch, checkpointing=True)
    plain = sft_phase(args.sft_steps, args.seq_len, max(1, args.batch // 2), checkpointing=False)
    rl = None
    if not args.skip_rl:
        with tempfile.TemporaryDirectory(prefix="cudice-train-smoke-") as tmp:
            rl = rl_phase(Path(tmp))
    ok = ckpt["dtype_fp32"] == 1.0 and (rl is None or (rl["updates"] > 0 and rl["clip_fraction"] >= 0))
    rl_text = (
        "rl skipped"
        if rl is None
        else f"rl 1 step reward {rl['mean_reward']:.3f} groups {rl['kept_groups']} updates {rl['updates']} "
        f"clip {rl['clip_fraction']:.3f} kl {rl['kl']:.2e} verify {rl['verify_s']:.0f}s "
        f"step {rl['step_s']:.0f}s"
    )
    print(
        f"RESULT train_smoke: {'ok' if ok else 'FAILED'} in {time.perf_counter() - start:.0f} s; "
        f"sft 1.7B-shape bf16-autocast+ckpt B={args.batch} L={args.seq_len}: "
        f"{ckpt['tokens_per_s']:.0f} tok/s peak {ckpt['peak_gib']:.1f} GiB; "
        f"no ckpt B={max(1, args.batch // 2)}: {plain['tokens_per_s']:.0f} tok/s "
        f"peak {plain['peak_gib']:.1f} GiB; {rl_text}"
    )


if __name__ == "__main__":
    main()
