"""Autoregressive baseline through the same weights: HF `generate`, greedy, causal mask.

Used for honest speed comparisons (bench/model_speed.py): same model object, same prompts,
same number of new tokens. One forward per generated token.

Not covered: sampling (the baseline is greedy) and anything but transformers' own `generate`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True, slots=True)
class ARResult:
    tokens: tuple[tuple[int, ...], ...]   # new tokens per prompt (after the first stop token: cut)
    num_forwards: int                     # prefill + one decode step per further token
    seconds: float


def ar_generate(model: Any, prompts: Sequence[Sequence[int]], max_new_tokens: int, pad_id: int,
                stop_ids: Sequence[int], ignore_eos: bool = False,
                cache_implementation: str | None = None) -> ARResult:
    """Greedy-decode left-padded `prompts` with `model.generate`.

    ignore_eos: force exactly `max_new_tokens` (benchmarks). cache_implementation: e.g. "static"
    (transformers' static cache, the fast HF path) or None (dynamic cache).
    """
    device = next(model.parameters()).device
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long, device=device)
    attention = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(list(p), dtype=torch.long, device=device)
        attention[i, width - len(p):] = 1
    kwargs: dict[str, Any] = {
        "do_sample": False, "max_new_tokens": max_new_tokens, "pad_token_id": pad_id,
        "eos_token_id": list(stop_ids), "temperature": None, "top_p": None, "top_k": None,
    }
    if ignore_eos:
        kwargs["min_new_tokens"] = max_new_tokens
    if cache_implementation:
        kwargs["cache_implementation"] = cache_implementation
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=attention, **kwargs)
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    new = out[:, width:].tolist()
    stops = set(stop_ids)
    rows = []
    for row in new:
        cut = next((k for k, t in enumerate(row) if t in stops), len(row))
        rows.append(tuple(row[:cut]))
    return ARResult(tokens=tuple(rows), num_forwards=out.shape[1] - width, seconds=seconds)
