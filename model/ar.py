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
    tokens: tuple[tuple[int, ...], ...]  # new tokens per prompt (after the first stop token: cut)
    num_forwards: int  # prefill + one decode step per further token
    seconds: float
    prefill_seconds: float = 0.0  # of `seconds` (static_ar_generate only; 0 for HF generate)


def ar_generate(
    model: Any,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    pad_id: int,
    stop_ids: Sequence[int],
    ignore_eos: bool = False,
    cache_implementation: str | None = None,
) -> ARResult:
    """Greedy-decode left-padded `prompts` with `model.generate`.

    ignore_eos: force exactly `max_new_tokens` (benchmarks). cache_implementation: e.g. "static"
    (transformers' static cache, the fast HF path) or None (dynamic cache).
    """
    device = next(model.parameters()).device
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long, device=device)
    attention = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(list(p), dtype=torch.long, device=device)
        attention[i, width - len(p) :] = 1
    kwargs: dict[str, Any] = {
        "do_sample": False,
        "max_new_tokens": max_new_tokens,
        "pad_token_id": pad_id,
        "eos_token_id": list(stop_ids),
        "temperature": None,
        "top_p": None,
        "top_k": None,
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


def static_ar_generate(
    runner: Any, prompts: Sequence[Sequence[int]], max_new_tokens: int, pad_id: int
) -> ARResult:
    """Greedy AR decoding through a `Runner` (e.g. the static-cache, CUDA-graph `StaticRunner`).

    The fair baseline for the fast sampler: the same forward machinery, one token per forward.
    Never stops early (benchmarks decode exactly `max_new_tokens`). Left-padded prompts.
    """
    from cudice.model.runner import additive

    device, dtype = runner.device, runner.dtype
    b, width = len(prompts), max(len(p) for p in prompts)
    ids = torch.full((b, width), pad_id, dtype=torch.long, device=device)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(list(p), dtype=torch.long, device=device)
    pad = torch.tensor([width - len(p) for p in prompts], device=device)
    col = torch.arange(width + max_new_tokens, device=device)
    valid = col[None, :] >= pad[:, None]  # (B, W + N)
    pos_all = (col[None, :] - pad[:, None]).clamp(min=0)
    cache = runner.new_cache(b, width + max_new_tokens)
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    # prefill all but the last prompt token (causal, padding hidden; pad queries see themselves)
    w = width - 1
    if w > 0:
        causal = torch.tril(torch.ones(w, w, dtype=torch.bool, device=device))[None] & valid[:, None, :w]
        causal |= torch.eye(w, dtype=torch.bool, device=device)[None]
        runner.forward(ids[:, :w], additive(causal[:, None], dtype), pos_all[:, :w], cache, logits=False)
    if device.type == "cuda":
        torch.cuda.synchronize()  # only to time the prefill apart from the decode
    prefill_seconds = time.perf_counter() - start
    token = ids[:, w:]  # (B, 1)
    out = []
    for k in range(max_new_tokens):
        n = w + k + 1
        mask = additive(valid[:, None, None, :n], dtype)  # (B, 1, 1, n)
        logits = runner.forward(token, mask, pos_all[:, n - 1 : n], cache, logits=True)
        token = logits[:, -1:].argmax(dim=-1)  # (B, 1)
        out.append(token)
    new = torch.cat(out, dim=1).tolist()  # sync point
    seconds = time.perf_counter() - start
    return ARResult(
        tokens=tuple(tuple(r) for r in new),
        num_forwards=max_new_tokens + (1 if w > 0 else 0),
        seconds=seconds,
        prefill_seconds=prefill_seconds,
    )
