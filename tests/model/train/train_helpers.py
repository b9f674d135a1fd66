"""Shared stand-ins for the training tests (importable: pytest puts this folder on sys.path)."""

from __future__ import annotations

import torch
import transformers

MASK_ID, PAD_ID = 98, 99


def tiny_model(seed: int = 0) -> torch.nn.Module:
    cfg = transformers.Qwen3Config(
        vocab_size=100,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=256,
        tie_word_embeddings=False,
    )
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    return transformers.Qwen3ForCausalLM(cfg)


def toy_samples(count: int, length: int = 12, num_prompt: int = 4, seed: int = 0) -> list:
    """`count` EncodedSamples of random ids (lengths vary by one block), the first `num_prompt` prompt."""
    from cudice.model.train.sft import EncodedSample

    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(count):
        n = length + 4 * (i % 2)
        out.append(EncodedSample(torch.randint(0, 90, (n,), generator=g).tolist(), num_prompt))
    return out
