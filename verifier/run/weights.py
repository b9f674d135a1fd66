"""Seeded values for the weights a model's constructor sets to constants.

PyTorch's modules start some weights at constants: LayerNorm, RMSNorm, GroupNorm and BatchNorm
weights at 1 and biases at 0, BatchNorm's running statistics at 0 and 1, attention's projection
biases at 0, PReLU's slope at 0.25; hand-written references do the same
(`nn.Parameter(torch.ones(d))`). At those values a layer can be the identity, or an affine map
within the tolerance of the identity (a BatchNorm in eval mode with fresh statistics is
`x / sqrt(1 + eps)`), so a kernel that skips it, or ignores the weights, would pass. So the judge
draws such weights in the reference after it is built, and the candidate's runner gives the
candidate's matching weights the same values:

- `draw_reference_constants(model, seed)`: every parameter of the reference that holds a single
  value (more than one element, or one), and the running statistics of its norm layers, get
  seeded values: a value `v` becomes `v * U(0.5, 1.5)` (its sign kept, so a running variance
  stays positive), 0 becomes `U(-0.5, 0.5)`; NaN and Inf stay. The values are a function of the
  seed and the weight's *key* (`Key`: the constant, shape, dtype and how many single-valued
  tensors of that constant, shape and dtype were registered before it, parameters and buffers
  alike, in the order the constructor registered them: `registration_order`, entered around
  the constructor, records it), never of its name. Returns the keys.
- `match_reference_constants(model, seed, keys, order)`: the candidate's single-valued parameters
  and buffers, keyed the same way; those whose key the reference drew get the same values. A
  candidate that holds the reference's layers, or writes its own `torch.ones(d)` parameter where
  the reference has `nn.LayerNorm(d)`, in the same order, gets the reference's weights whatever
  it names them; a single-valued tensor of its own whose key the reference does not have keeps
  its value.

The global RNG, which the other weights come from, is left alone: both models draw it as before.

Not covered: a candidate that derives tensors from such weights in its constructor (a BatchNorm
folded into a scale at `__init__`) derives them from the constants and is rejected; an extra
single-valued tensor of the candidate's, of a reference weight's constant, shape and dtype and
registered before it, shifts that weight's key. Buffers a reference creates itself
(`register_buffer(..., torch.ones(d))`) are constants by its design and stay as they are.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
from collections.abc import Iterator
from typing import Any, NamedTuple


class Key(NamedTuple):
    value: float  # the constant the tensor held
    shape: tuple[int, ...]
    dtype: str
    ordinal: int  # single-valued tensors of this constant, shape and dtype before it


def _draw(seed: int, key: Key) -> Any:
    import torch

    digest = hashlib.blake2b(repr((seed, *key)).encode(), digest_size=8).digest()
    gen = torch.Generator().manual_seed(int.from_bytes(digest, "little") & ((1 << 63) - 1))
    u = torch.rand(key.shape, generator=gen, dtype=torch.float64)
    return u - 0.5 if key.value == 0 else key.value * (u + 0.5)


def _single_value(t: Any) -> float | None:
    """The one finite value of a floating tensor with at least one element, or None."""
    if not t.is_floating_point() or t.numel() == 0 or t.is_meta:
        return None
    flat = t.detach().reshape(-1)
    first = float(flat[0])
    if not math.isfinite(first) or not bool((flat == flat[0]).all()):
        return None
    return first


@contextlib.contextmanager
def registration_order() -> Iterator[dict[int, int]]:
    """Inside: every parameter and buffer a module registers is numbered in the order registered
    (a layer's own before the module that holds it is assigned). Yields `{id(tensor): number}`."""
    import torch

    order: dict[int, int] = {}
    module = torch.nn.Module
    originals = (module.register_parameter, module.register_buffer)

    def note(t: Any) -> None:
        if t is not None and id(t) not in order:
            order[id(t)] = len(order)

    def register_parameter(self: Any, name: str, param: Any) -> None:
        originals[0](self, name, param)
        note(param)

    def register_buffer(self: Any, name: str, tensor: Any, persistent: bool = True) -> None:
        originals[1](self, name, tensor, persistent)
        note(tensor)

    module.register_parameter = register_parameter  # type: ignore[method-assign]
    module.register_buffer = register_buffer  # type: ignore[method-assign]
    try:
        yield order
    finally:
        module.register_parameter, module.register_buffer = originals  # type: ignore[method-assign]


def _keyed(tensors: list[Any], order: dict[int, int]) -> list[tuple[Any, Key]]:
    """The single-valued ones among `tensors` (each once), with their keys, in registration order
    (tensors it did not see after the others, in the order given)."""
    counts: dict[tuple[float, tuple[int, ...], str], int] = {}
    seen: set[int] = set()
    out: list[tuple[Any, Key]] = []
    ranked = sorted(enumerate(tensors), key=lambda it: order.get(id(it[1]), len(order) + it[0]))
    for _, t in ranked:
        if id(t) in seen:
            continue
        seen.add(id(t))
        value = _single_value(t)
        if value is None:
            continue
        cls = (value, tuple(t.shape), str(t.dtype).removeprefix("torch."))
        out.append((t, Key(*cls, counts.get(cls, 0))))
        counts[cls] = counts.get(cls, 0) + 1
    return out


def _fill(t: Any, seed: int, key: Key) -> None:
    import torch

    with torch.no_grad():
        t.copy_(_draw(seed, key).to(dtype=t.dtype, device=t.device))


def draw_reference_constants(model: Any, seed: int, order: dict[int, int]) -> list[Key]:
    """The reference's single-valued parameters and norm-layer running statistics, drawn
    (module docstring); returns their keys."""
    import torch
    from torch.nn.modules.batchnorm import _NormBase

    if not isinstance(model, torch.nn.Module):
        return []
    stats = [
        getattr(m, name)
        for m in model.modules()
        if isinstance(m, _NormBase)
        for name in ("running_mean", "running_var")
        if isinstance(getattr(m, name, None), torch.Tensor)
    ]
    wanted = {id(t) for t in [*model.parameters(), *stats]}
    keys: list[Key] = []
    for t, key in _keyed([*model.parameters(), *model.buffers()], order):
        if id(t) in wanted:
            _fill(t, seed, key)
            keys.append(key)
    return keys


def match_reference_constants(model: Any, seed: int, keys: list[Key], order: dict[int, int]) -> int:
    """The candidate's single-valued parameters and buffers whose key the reference drew, given
    the same values; returns how many."""
    import torch

    if not keys or not isinstance(model, torch.nn.Module):
        return 0
    drawn = set(keys)
    done = 0
    for t, key in _keyed([*model.parameters(), *model.buffers()], order):
        if key in drawn:
            _fill(t, seed, key)
            done += 1
    return done


def keys_to_json(keys: list[Key]) -> list[list[Any]]:
    return [[k.value, list(k.shape), k.dtype, k.ordinal] for k in keys]


def keys_from_json(raw: object) -> list[Key]:
    """Keys sent by the judge; anything malformed is dropped (the candidate then keeps constants)."""
    out: list[Key] = []
    for item in raw if isinstance(raw, list) else ():
        try:
            value, shape, dtype, ordinal = item
            out.append(Key(float(value), tuple(int(s) for s in shape), str(dtype), int(ordinal)))
        except (TypeError, ValueError):
            continue
    return out
