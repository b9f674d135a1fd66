"""Paged KV cache: one pool of fixed-size pages per layer, a page table per sequence.

Role: hold the keys and values of many sequences of different lengths so that memory in use is
the sum of their real lengths (rounded up to a page each), not batch x longest. The continuous
batching engine (`cudice.model.batching`) admits, grows and frees sequences here; the ragged
forward (`cudice.model.paged_forward`) writes each forward's K/V into the pages and reads them back.

Layout: every layer owns one key and one value tensor of shape (num_pages * page_size, H_kv, D),
a flat array of token slots; page p holds slots [p * page_size, (p + 1) * page_size). A page id
means the same page in every layer, so one page table per sequence serves all layers. The page
table (`page_table`: (b, max pages) int32, -1 past the end) and the lengths are what a paged
attention kernel takes: the batched decode (`PagedRunner.decode`) reads pages in place through
`cudice.model.attention.attend_paged` on CUDA; the ragged forward (prefills, and anywhere without
that kernel) `gather`s a batch's K/V into a padded (b, H_kv, K, D) copy for SDPA.

Contract:
- `add(seq, max_tokens)` reserves (does not allocate) the pages the sequence can ever need; it
  raises `PoolExhausted` when the unreserved pages do not cover them, so an admitted sequence can
  always grow to its maximum without preemption. `can_add(max_tokens)` asks first.
- `ensure(seq, length)` allocates pages (from the free list) until slots [0, length) exist;
  `pages_in_use` counts allocated pages only: the sum over sequences of ceil(extent / page_size).
- `free(seq)` returns its pages and its reservation; freeing twice or an unknown id is a no-op.
- Slots past a sequence's extent hold stale values; callers mask them.

Thread safety: none. One owner (the batching engine's worker thread) calls every method.
Not covered: preemption or swapping to host memory, prefix sharing between sequences
(copy-on-write pages), growing the pool after construction.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


class PoolExhausted(RuntimeError):
    """Not enough unreserved pages for a sequence's maximum length; says how many were needed."""


@dataclass
class _Seq:
    reserved: int  # pages this sequence may allocate in all
    pages: list[int] = field(default_factory=list)
    extent: int = 0  # slots [0, extent) are allocated (ensure's largest length)


class PagedKVCache:
    """Pools of K/V pages for `num_layers` layers; see the module docstring."""

    def __init__(
        self,
        num_layers: int,
        num_kv_heads: int,
        head_dim: int,
        num_pages: int,
        page_size: int = 16,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> None:
        if num_pages < 1 or page_size < 1:
            raise ValueError(f"num_pages={num_pages} and page_size={page_size} must both be >= 1")
        self.num_layers, self.num_kv_heads, self.head_dim = num_layers, num_kv_heads, head_dim
        self.num_pages, self.page_size = num_pages, page_size
        self.dtype, self.device = dtype, torch.device(device)
        shape = (num_pages * page_size, num_kv_heads, head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype, device=self.device) for _ in range(num_layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=self.device) for _ in range(num_layers)]
        self._free: list[int] = list(range(num_pages - 1, -1, -1))  # pop() hands out page 0 first
        self._seqs: dict[int, _Seq] = {}
        self._reserved = 0  # pages reserved by live sequences (allocated or not)

    # --- accounting ---------------------------------------------------------------------------
    def pages_for(self, tokens: int) -> int:
        return -(-tokens // self.page_size)

    @property
    def page_bytes(self) -> int:
        """Bytes of one page over all layers, keys and values."""
        per_layer = self.page_size * self.num_kv_heads * self.head_dim * self.keys[0].element_size()
        return 2 * self.num_layers * per_layer

    @property
    def pages_in_use(self) -> int:
        return self.num_pages - len(self._free)

    @property
    def free_pages(self) -> int:
        return len(self._free)

    @property
    def unreserved_pages(self) -> int:
        return self.num_pages - self._reserved

    @property
    def bytes_in_use(self) -> int:
        return self.pages_in_use * self.page_bytes

    def __contains__(self, seq: int) -> bool:
        return seq in self._seqs

    def sequences(self) -> dict[int, int]:
        """Each live sequence's allocated extent in slots."""
        return {s: st.extent for s, st in self._seqs.items()}

    def pages_of(self, seq: int) -> tuple[int, ...]:
        return tuple(self._seqs[seq].pages)

    # --- lifetime ------------------------------------------------------------------------------
    def can_add(self, max_tokens: int) -> bool:
        return self.pages_for(max_tokens) <= self.unreserved_pages

    def add(self, seq: int, max_tokens: int) -> None:
        """Register `seq`, reserving the pages for `max_tokens` slots (allocated later by `ensure`)."""
        if seq in self._seqs:
            raise ValueError(f"sequence {seq} is already in the paged cache")
        need = self.pages_for(max_tokens)
        if need > self.unreserved_pages:
            raise PoolExhausted(
                f"sequence {seq} needs {need} pages of {self.page_size} tokens for {max_tokens} tokens, "
                f"but only {self.unreserved_pages} of {self.num_pages} are unreserved; free finished "
                "sequences first or build the cache with more pages"
            )
        self._seqs[seq] = _Seq(reserved=need)
        self._reserved += need

    def ensure(self, seq: int, length: int) -> None:
        """Allocate pages so that slots [0, length) of `seq` exist."""
        st = self._seqs[seq]
        need = self.pages_for(length)
        if need > st.reserved:
            raise PoolExhausted(
                f"sequence {seq} grew to {length} tokens, past the {st.reserved * self.page_size} "
                "reserved when it was added (add it with its largest length)"
            )
        while len(st.pages) < need:
            st.pages.append(self._free.pop())  # cannot be empty: reservations never exceed the pool
        st.extent = max(st.extent, length)

    def free(self, seq: int) -> None:
        """Return the pages and the reservation of `seq` to the pool."""
        st = self._seqs.pop(seq, None)
        if st is None:
            return
        self._free.extend(reversed(st.pages))
        self._reserved -= st.reserved

    # --- addressing ----------------------------------------------------------------------------
    def slots(self, seq: int, start: int, stop: int) -> torch.Tensor:
        """Flat slot index of positions [start, stop) of `seq` (allocated by `ensure`): (stop-start,) long."""
        return self.spans([(seq, start, stop)])

    def spans(self, spans: list[tuple[int, int, int]]) -> torch.Tensor:
        """Flat slot indices of several (seq, start, stop) spans, concatenated: built on the host and
        moved to the device in one copy."""
        parts = []
        for seq, start, stop in spans:
            pages = torch.tensor(self._seqs[seq].pages, dtype=torch.long)
            pos = torch.arange(start, stop)
            parts.append(pages[pos // self.page_size] * self.page_size + pos % self.page_size)
        return torch.cat(parts).to(self.device)

    def _table(self, seqs: list[int]) -> torch.Tensor:
        width = max((len(self._seqs[s].pages) for s in seqs), default=0)
        table = torch.full((len(seqs), width), -1, dtype=torch.long)
        for i, s in enumerate(seqs):
            pages = self._seqs[s].pages
            table[i, : len(pages)] = torch.tensor(pages, dtype=torch.long)
        return table

    def page_table(self, seqs: list[int]) -> torch.Tensor:
        """(b, most pages) int32 page ids per sequence, -1 past each one's pages (a kernel's input)."""
        return self._table(seqs).to(device=self.device, dtype=torch.int32)

    def key_slots(self, seqs: list[int], lengths: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Slots of positions [0, lengths[i]) of each sequence, padded to the longest: (b, K) long
        (padding points at slot 0) and (b, K) bool valid; built on the host, moved in one copy each."""
        k = max(lengths)
        pos = torch.arange(k)
        valid = pos[None, :] < torch.tensor(lengths)[:, None]  # (b, K)
        table = self._table(seqs)
        if table.shape[1] == 0:
            index = torch.zeros(len(seqs), k, dtype=torch.long)
        else:
            page = table[:, (pos // self.page_size).clamp(max=table.shape[1] - 1)]  # (b, K)
            index = torch.where(valid, page * self.page_size + pos % self.page_size, 0)
        return index.to(self.device), valid.to(self.device)

    # --- data ----------------------------------------------------------------------------------
    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store k, v (T, H_kv, D) at flat `slots` (T,) of `layer`."""
        self.keys[layer].index_copy_(0, slots, k.to(self.dtype))
        self.values[layer].index_copy_(0, slots, v.to(self.dtype))

    def gather(self, layer: int, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """K, V at `index` (b, K) slots -> two (b, H_kv, K, D) tensors (a copy)."""
        return self.keys[layer][index].transpose(1, 2), self.values[layer][index].transpose(1, 2)
