"""Sealed input sets: staged before the clock starts, usable only once the timed batch begins.

The judge stages the fresh input sets of a timed batch in the runner before starting its clock
(moving gigabytes is not what is timed). A candidate that computed its outputs while the sets
arrive would then be timed on lookups. So every tensor of a set travels XOR-ed, bit for bit,
with a key stream (a block of 4,096 pseudo-random words repeated over the tensor), and the key
reaches the runner only in the batch request: the runner unseals each set just before its call,
inside the clock, and the judge subtracts what unsealing costs (it is part of the batch's own
cost, measured on the reference's runner). XOR on the raw bits is exact: the unsealed tensor is
the one the judge drew, bit for bit. The key stream is drawn on the tensor's device (no host copy
inside the clock); the judge and the runner seal on the same kind of device, so they draw the
same stream.

Not covered: non-tensor inputs (integers, floats, shapes) travel in the clear: they are the same
for every call of a problem.
"""

from __future__ import annotations

from typing import Any

BLOCK = 4096
_INT_OF_SIZE = {1: "uint8", 2: "int16", 4: "int32", 8: "int64"}


def _bits(t: Any) -> Any:
    """`t`'s storage as integers of its element size (a view: changing it changes `t`)."""
    import torch

    return t.view(getattr(torch, _INT_OF_SIZE[t.element_size()]))


def _stream(key: int, dtype: Any, device: Any) -> Any:
    import torch

    gen = torch.Generator(device=device).manual_seed(key & 0x7FFFFFFFFFFFFFFF)
    words = torch.randint(-(2**31), 2**31, (BLOCK,), generator=gen, dtype=torch.int64, device=device)
    return words.to(dtype)


def toggle(tensors: list[Any], key: int) -> None:
    """Seal or unseal (the same operation) every contiguous tensor of `tensors` in place."""
    import torch

    for i, t in enumerate(tensors):
        if not isinstance(t, torch.Tensor) or t.numel() == 0 or t.element_size() not in _INT_OF_SIZE:
            continue
        if not t.is_contiguous():
            raise ValueError("a sealed input must be contiguous (the judge stages contiguous copies)")
        flat = _bits(t).view(-1)
        m = _stream(key + 7919 * i, flat.dtype, flat.device)
        whole = flat.numel() // BLOCK * BLOCK
        if whole:
            flat[:whole].view(-1, BLOCK).bitwise_xor_(m)
        if whole < flat.numel():
            flat[whole:].bitwise_xor_(m[: flat.numel() - whole])
