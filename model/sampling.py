"""Token sampling for masked slots: temperature -> top-k -> top-p -> draw, with confidences.

Confidence is the probability of the drawn token under the filtered distribution (SDAR's
definition). At temperature 0 the draw is the argmax and its confidence is its probability
under the unfiltered softmax (DICE's evaluation used top_k=1, which makes every confidence 1.0
and the static strategy left-to-right; the plain softmax keeps the dynamic threshold meaningful).

Not covered: repetition penalties and logit processors.
"""

from __future__ import annotations

import torch


def filter_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Set logits outside the top-k / top-p nucleus to -inf. logits (..., V) float32."""
    if top_k > 0 and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]  # (..., 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        cum = torch.softmax(sorted_logits, dim=-1).cumsum(dim=-1)
        drop_sorted = (cum - torch.softmax(sorted_logits, dim=-1)) >= top_p  # keep the first token always
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def sample_tokens(
    logits: torch.Tensor,
    temperature: float,
    top_k: int,
    top_p: float,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw one token per slot. logits (B, L, V) -> tokens (B, L) long, confidence (B, L) float32."""
    logits = logits.float()
    if temperature == 0:
        probs = torch.softmax(logits, dim=-1)  # (B, L, V)
        confidence, tokens = probs.max(dim=-1)  # (B, L)
        return tokens, confidence
    probs = torch.softmax(filter_logits(logits / temperature, top_k, top_p), dim=-1)
    flat = probs.reshape(-1, probs.shape[-1])  # (B*L, V)
    tokens = torch.multinomial(flat, 1, generator=generator).reshape(probs.shape[:-1])
    confidence = torch.gather(probs, -1, tokens[..., None])[..., 0]
    return tokens, confidence
