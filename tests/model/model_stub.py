"""A stub `Runner` with scripted logits, for pinning the sampler's exact behaviour.

The stub "writes" a target text: at absolute position p (read from the position ids, so it is
independent of padding and caching) it puts probability `confidence(p)` on `target[p]` and
spreads the rest evenly. It records every forward, crop and row selection.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch


@dataclass
class StubCache:
    rows: int = 0
    length: int = 0


@dataclass
class StubRunner:
    vocab_size: int
    target: Callable[[int], int]  # absolute position -> token the stub writes there
    confidence: Callable[[int], float] = lambda p: 0.99
    events: list[tuple] = field(default_factory=list)
    dtype: torch.dtype = torch.float32
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    def new_cache(self, batch: int, max_length: int) -> StubCache:
        self.events.append(("new_cache", batch, max_length))
        return StubCache()

    def forward(
        self,
        ids: torch.Tensor,
        mask: torch.Tensor,
        pos: torch.Tensor,
        cache: StubCache,
        logits: bool = True,
        last: int = 0,
    ) -> torch.Tensor:
        b, n = ids.shape
        assert mask.shape == (b, 1, n, cache.length + n), (mask.shape, cache.length)
        self.events.append(("forward", n, cache.length) if logits else ("forward-no-logits", n, cache.length))
        cache.rows, cache.length = b, cache.length + n
        logits = torch.empty(b, n, self.vocab_size)
        for i in range(b):
            for j in range(n):
                p = int(pos[i, j])
                c = self.confidence(p)
                rest = (1.0 - c) / (self.vocab_size - 1)
                logits[i, j].fill_(math.log(rest))
                logits[i, j, self.target(p)] = math.log(c)
        return logits[:, n - last :] if last else logits

    def cache_length(self, cache: StubCache) -> int:
        return cache.length

    def crop(self, cache: StubCache, length: int) -> None:
        self.events.append(("crop", length))
        cache.length = min(cache.length, length)

    def select_rows(self, cache: StubCache, rows: torch.Tensor) -> None:
        self.events.append(("select", tuple(rows.tolist())))
        cache.rows = len(rows)


def char_decode(ids: Sequence[int]) -> str:
    """Decode ids as characters (id 65 -> 'A'); the stub vocabulary is bytes."""
    return "".join(chr(i) for i in ids)


def text_target(prompt_len: int, text: str, filler: int = ord("_")) -> Callable[[int], int]:
    """Target that writes `text` right after a prompt of `prompt_len` tokens (prompt positions: filler)."""

    def target(p: int) -> int:
        k = p - prompt_len
        return ord(text[k]) if 0 <= k < len(text) else filler

    return target
