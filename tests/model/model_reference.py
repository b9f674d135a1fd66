"""An uncached, batch-1 reference of block-diffusion decoding: every step recomputes the whole
sequence with the block-causal mask (no KV cache, no crop, no padding). The cached sampler must
match it token for token at temperature 0."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from cudice.model.config import SamplerConfig
from cudice.model.sampling import sample_tokens
from cudice.model.strategies import STRATEGIES, quota_schedule


@torch.no_grad()
def reference_generate(
    model, prompt: Sequence[int], cfg: SamplerConfig, block_length: int, mask_id: int, stop_ids: Sequence[int]
) -> tuple[list[int], list[int], int]:
    """-> (tokens, step_map, forwards), trimmed at the first stop id / max_new_tokens."""
    bl, n = block_length, len(prompt)
    seq = list(prompt)
    tokens: list[int] = []
    step_map: list[int] = []
    step_total = forwards = 0
    block_start = n // bl * bl
    while True:
        block = seq[block_start:] + [mask_id] * (bl - (len(seq) - block_start))
        first_new = len(seq) - block_start
        masked = torch.tensor([[t == mask_id for t in block]])
        quotas = quota_schedule(masked.sum(dim=1), cfg.denoising_steps)
        revealed_at = [-1] * bl
        step = 0
        while masked.any():
            full = torch.tensor([seq[:block_start] + block])
            length = full.shape[1]
            blk = torch.arange(length) // bl
            allowed = blk[None, :] <= blk[:, None]
            mask = torch.where(allowed, 0.0, torch.finfo(torch.float32).min)[None, None]
            logits = model(
                input_ids=full, attention_mask=mask, position_ids=torch.arange(length)[None]
            ).logits
            forwards += 1
            x0, conf = sample_tokens(logits[:, block_start:].float(), 0.0, 0, 1.0)
            quota = quotas[:, min(step, cfg.denoising_steps - 1)].clamp(min=1)
            reveal = STRATEGIES[cfg.strategy](conf, masked, quota, cfg.threshold)
            for j in range(bl):
                if reveal[0, j]:
                    block[j] = int(x0[0, j])
                    revealed_at[j] = step_total + step
            masked &= ~reveal
            step += 1
        step_total += step
        seq = seq[:block_start] + block
        tokens += block[first_new:]
        step_map += revealed_at[first_new:]
        block_start += bl
        cut = next((k for k, t in enumerate(tokens) if t in stop_ids), None)
        if cut is not None:
            return tokens[:cut], step_map[:cut], forwards
        if len(tokens) >= cfg.max_new_tokens:
            return tokens[: cfg.max_new_tokens], step_map[: cfg.max_new_tokens], forwards
