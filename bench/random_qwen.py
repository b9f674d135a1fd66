"""A Qwen3 with random weights for the speed benchmarks (bench/model_speed.py, bench/serve_load.py).

`random_qwen3(dims, device, dtype, std)` builds `Qwen3ForCausalLM` from config.json-style `dims`
(vocabulary, hidden, intermediate, layers, heads, KV heads, head_dim, tied embeddings) with a 32k
context and RoPE theta 1e6, directly on `device` in `dtype`, every matrix drawn from N(0, std)
(small enough for unit-ish activations, so decoding is not degenerate), frozen and in eval mode.
RoPE's inverse frequencies stay float32 as in a loaded checkpoint. Seeding is the caller's.
"""

from __future__ import annotations

from typing import Any

import torch

# Qwen3-1.7B / SDAR-1.7B-Chat / DICE-1.7B config.json dims (untied lm_head)
DICE_1P7B: dict[str, Any] = {
    "vocab_size": 151936,
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "tie_word_embeddings": False,
}


def random_qwen3(dims: dict[str, Any], device: torch.device, dtype: torch.dtype, std: float) -> Any:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(
        max_position_embeddings=32768, rope_parameters={"rope_type": "default", "rope_theta": 1e6}, **dims
    )
    cfg._attn_implementation = "sdpa"
    with torch.device(device):
        torch.set_default_dtype(dtype)
        try:
            model = Qwen3ForCausalLM(cfg)
        finally:
            torch.set_default_dtype(torch.float32)
    model.model.rotary_emb = type(model.model.rotary_emb)(config=cfg).to(device)  # float32 inv_freq
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, std)
    return model.eval().requires_grad_(False)
