"""The model side of the sampler: forwards against a KV cache, crop, row selection, masks.

`HFRunner` drives a transformers causal LM with a `DynamicCache`, a 4-D additive float mask
(0 = attend, dtype-min = blocked; transformers 5 passes a 4-D mask through unchanged) and
explicit position ids. Every forward appends its K/V to the cache; the sampler crops a
denoise step's K/V away again (`DynamicCache.crop` with a negative count, which both
transformers 5.17 and 5.24 accept).

Tests replace the runner with a stub that scripts logits (tests/model/stub.py).
Not covered: static caches and CUDA-graph capture (see docs/model.md, "Speed").
"""

from __future__ import annotations

import inspect
from typing import Any, Protocol

import torch


class Runner(Protocol):
    """What the sampler needs from a model. Shapes: B rows, L new tokens, K = cache + L keys."""

    dtype: torch.dtype
    device: torch.device

    def new_cache(self, batch: int, max_length: int) -> Any:
        """An empty cache for `batch` rows that will hold at most `max_length` tokens."""
        ...

    def forward(
        self,
        ids: torch.Tensor,
        mask: torch.Tensor,
        pos: torch.Tensor,
        cache: Any,
        logits: bool = True,
        last: int = 0,
    ) -> torch.Tensor:
        """ids (B, L), mask (B, 1, L, K) additive, pos (B, L) -> logits (B, L, V); appends K/V to cache.

        With logits=False (prefill, commit) the caller ignores the result, which may be empty.
        last > 0: the logits of the last `last` tokens only, (B, last, V) (a fused commit needs only its
        new block's: the vocabulary projection of the committed tokens is skipped)."""
        ...

    def cache_length(self, cache: Any) -> int: ...
    def crop(self, cache: Any, length: int) -> None:
        """Drop cached K/V beyond `length` tokens."""
        ...

    def select_rows(self, cache: Any, rows: torch.Tensor) -> None:
        """Keep only batch rows `rows` (long tensor of indices) in the cache."""
        ...


class HFRunner:
    """`Runner` over a transformers model (Qwen3ForCausalLM, SDPA or eager attention)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        param = next(model.parameters())
        self.dtype = param.dtype
        self.device = param.device
        # transformers 5.24 renamed `past_key_values` to `cache` (the old name still warns);
        # 5.17 only knows `past_key_values`.
        params = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"

    def new_cache(self, batch: int, max_length: int) -> Any:
        from transformers import DynamicCache

        return DynamicCache(config=self.model.config)

    @torch.no_grad()
    def forward(
        self,
        ids: torch.Tensor,
        mask: torch.Tensor,
        pos: torch.Tensor,
        cache: Any,
        logits: bool = True,
        last: int = 0,
    ) -> torch.Tensor:
        # logits_to_keep=1 spares the (B, L, V) logits of a long prefill
        out = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=pos,
            use_cache=True,
            logits_to_keep=last if logits else 1,
            **{self._cache_kw: cache},
        )
        result: torch.Tensor = out.logits  # (B, L, V)
        return result

    def cache_length(self, cache: Any) -> int:
        return int(cache.get_seq_length())

    def crop(self, cache: Any, length: int) -> None:
        extra = self.cache_length(cache) - length
        if extra > 0:  # crop(0) must not be called: transformers < 5.2x read it as "crop to length 0"
            cache.crop(-extra)

    def select_rows(self, cache: Any, rows: torch.Tensor) -> None:
        cache.batch_select_indices(rows)


def block_causal_mask(valid: torch.Tensor, block_length: int, dtype: torch.dtype) -> torch.Tensor:
    """Prefill mask over whole blocks: query i sees key j iff block(j) <= block(i) and j is not padding.

    valid (B, K) bool -> (B, 1, K, K) additive. Padding queries see themselves (keeps SDPA free of
    all-blocked rows, whose output would be NaN; their outputs are never read).
    """
    k = valid.shape[1]
    block = torch.arange(k, device=valid.device) // block_length  # (K,)
    allowed = (block[None, :] <= block[:, None])[None] & valid[:, None, :]  # (B, K, K)
    allowed |= torch.eye(k, dtype=torch.bool, device=valid.device)[None]
    return additive(allowed[:, None], dtype)


def block_query_mask(valid: torch.Tensor, block_length: int, dtype: torch.dtype) -> torch.Tensor:
    """Mask of one block (the last `block_length` keys) against the cache: it sees every valid cached key
    and itself bidirectionally. valid (B, K) bool (the block's own columns True) -> (B, 1, L, K)."""
    allowed = valid[:, None, None, :].expand(-1, 1, block_length, -1)
    return additive(allowed, dtype)


def additive(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Boolean `allowed` -> additive float mask of `dtype`: 0 where allowed, the dtype's minimum elsewhere."""
    zero = torch.zeros((), dtype=dtype, device=allowed.device)
    blocked = torch.full((), torch.finfo(dtype).min, dtype=dtype, device=allowed.device)
    return torch.where(allowed, zero, blocked)


_additive = additive  # the former private name: bench/attention_speed.py and bench/model_speed.py import it
