"""Seeded values for the weights a model's constructor sets to constants.

PyTorch's modules start some weights at constants: LayerNorm, RMSNorm, GroupNorm and BatchNorm
weights at 1 and biases at 0, BatchNorm's running statistics at 0 and 1, attention's projection
biases at 0, PReLU's slope at 0.25; hand-written references do the same
(`nn.Parameter(torch.ones(d))`). At those values a layer can be the identity, or an affine map
within the tolerance of the identity (a BatchNorm in eval mode with fresh statistics is
`x / sqrt(1 + eps)`), so a kernel that skips it, or ignores the weights, would pass. So the judge
draws such weights in the reference after it is built, and the candidate's runner gives the
candidate's matching weights the same values:

- `draw_reference_constants(model, seed, order)`: every parameter of the reference that holds a
  single value, and the running statistics of its norm layers, get seeded values: a value `v`
  becomes `v * U(0.5, 1.5)` (its sign kept, so a running variance stays positive), 0 becomes
  `U(-0.5, 0.5)`; NaN and Inf stay. The values are a function of the seed and the weight's `Key`:
  its space (`param` or `stat`), constant, shape, dtype and how many drawn weights of that space,
  constant, shape and dtype the constructor registered before it (`registration_order`, entered
  around the constructor, numbers each module's parameter and buffer slots). Returns the drawn
  weights with their names (`Drawn`).
- `match_reference_constants(model, seed, drawn, order)`: a single-valued parameter or buffer of
  the candidate with a drawn weight's name (`bn1.weight`), constant, shape and dtype gets its
  values. The rest are paired in registration order, space by space: the candidate's
  single-valued parameters with the reference's drawn parameters of the same constant, shape
  and dtype, its single-valued buffers of norm layers or with `mean` or `var` in their name with
  the drawn running statistics. So a candidate that
  keeps the reference's layers gets their weights; one that writes `nn.LayerNorm(d)` as its own
  `torch.ones(d)` and `torch.zeros(d)` parameters, in order, gets them too; a single-valued
  tensor of its own with nothing left to pair keeps its value.

The global RNG, which the other weights come from, is left alone: both models draw it as before.

Not covered: slots created by `copy.deepcopy` (`nn.TransformerEncoder` copies its layer) are not
registered, so they rank after the registered ones. A candidate that derives tensors from such
weights in its constructor (a BatchNorm
folded into a scale at `__init__`, a slope read into a float) derives them from the constants and
is rejected; so is one that holds them as plain tensor attributes or creates them in `forward`.
A renamed weight paired by order can take another's values when the candidate registers
same-shaped constants in another order than the reference. Buffers a reference creates itself
(`register_buffer(..., torch.ones(d))`) are constants by its design: they are not drawn.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
from collections.abc import Iterator
from typing import Any, NamedTuple


class Key(NamedTuple):
    space: str  # "param" (a parameter) or "stat" (a norm layer's running statistic)
    value: float  # the constant the tensor held
    shape: tuple[int, ...]
    dtype: str
    ordinal: int  # drawn weights of this space, constant, shape and dtype registered before it

    @property
    def cls(self) -> tuple[float, tuple[int, ...], str]:
        """(constant, shape, dtype): what a candidate's weight must hold to take this key."""
        return self.value, self.shape, self.dtype


class Drawn(NamedTuple):
    name: str  # its state_dict name in the reference
    key: Key


def _draw(seed: int, key: Key) -> Any:
    import torch

    digest = hashlib.blake2b(repr((seed, *key)).encode(), digest_size=8).digest()
    gen = torch.Generator().manual_seed(int.from_bytes(digest, "little") & ((1 << 63) - 1))
    u = torch.rand(key.shape, generator=gen, dtype=torch.float64)
    return u - 0.5 if key.value == 0 else key.value * (u + 0.5)


def _fill(t: Any, seed: int, key: Key) -> None:
    import torch

    with torch.no_grad():
        t.copy_(_draw(seed, key).to(dtype=t.dtype, device=t.device))


def _single_value(t: Any) -> float | None:
    """The one finite value of a floating tensor with at least one element, or None (a lazy
    module's parameter, not materialised yet, has none)."""
    from torch.nn.parameter import is_lazy

    if is_lazy(t) or not t.is_floating_point() or t.numel() == 0 or t.is_meta:
        return None
    flat = t.detach().reshape(-1)
    first = float(flat[0])
    if not math.isfinite(first) or not bool((flat == flat[0]).all()):
        return None
    return first


@contextlib.contextmanager
def registration_order() -> Iterator[dict[tuple[int, str], int]]:
    """Inside: every parameter and buffer slot a module registers is numbered in the order
    registered (a layer's own before the module that holds it is assigned), keyed by the module's
    id and the slot's name, so that moving the model (`.cuda()` replaces buffer tensors) keeps it."""
    import torch

    order: dict[tuple[int, str], int] = {}
    module = torch.nn.Module
    originals = (module.register_parameter, module.register_buffer)

    def register_parameter(self: Any, name: str, param: Any) -> None:
        originals[0](self, name, param)
        order.setdefault((id(self), name), len(order))

    def register_buffer(self: Any, name: str, tensor: Any, persistent: bool = True) -> None:
        originals[1](self, name, tensor, persistent)
        order.setdefault((id(self), name), len(order))

    module.register_parameter = register_parameter  # type: ignore[method-assign]
    module.register_buffer = register_buffer  # type: ignore[method-assign]
    try:
        yield order
    finally:
        module.register_parameter, module.register_buffer = originals  # type: ignore[method-assign]


class _Slot(NamedTuple):
    name: str
    tensor: Any
    module: Any
    attr: str
    param: bool
    cls: tuple[float, tuple[int, ...], str]  # (its one value, shape, dtype) when it was found


def _slots(model: Any, order: dict[tuple[int, str], int]) -> list[_Slot]:
    """The model's single-valued parameters and buffers (each tensor once), in registration order
    (slots it did not see after the others, in the module walk's order)."""
    found: list[tuple[int, _Slot]] = []
    seen: set[int] = set()
    for mod_name, m in model.named_modules():
        for param, table in ((True, m._parameters), (False, m._buffers)):
            for attr, t in table.items():
                if t is None or id(t) in seen:
                    continue
                seen.add(id(t))
                value = _single_value(t)
                if value is None:
                    continue
                rank = order.get((id(m), attr), len(order) + len(found))
                name = f"{mod_name}.{attr}" if mod_name else attr
                cls = (value, tuple(t.shape), str(t.dtype).removeprefix("torch."))
                found.append((rank, _Slot(name, t, m, attr, param, cls)))
    return [slot for _, slot in sorted(found, key=lambda it: it[0])]


def draw_reference_constants(model: Any, seed: int, order: dict[tuple[int, str], int]) -> list[Drawn]:
    """The reference's single-valued parameters and norm-layer running statistics, drawn
    (module docstring); returns them with their names and keys."""
    import torch
    from torch.nn.modules.batchnorm import _NormBase

    if not isinstance(model, torch.nn.Module):
        return []
    counts: dict[tuple[Any, ...], int] = {}
    drawn: list[Drawn] = []
    for slot in _slots(model, order):
        stat = isinstance(slot.module, _NormBase) and slot.attr in ("running_mean", "running_var")
        if not (slot.param or stat):
            continue  # the reference's own constant buffer: a constant by its design
        cls = ("param" if slot.param else "stat", *slot.cls)
        key = Key(*cls, counts.get(cls, 0))
        counts[cls] = key.ordinal + 1
        _fill(slot.tensor, seed, key)
        drawn.append(Drawn(slot.name, key))
    return drawn


def match_reference_constants(
    model: Any, seed: int, drawn: list[Drawn], order: dict[tuple[int, str], int]
) -> int:
    """The candidate's single-valued parameters and buffers given the values of the reference's
    drawn weights: by name first, then in registration order space by space (module docstring).
    Returns how many."""
    import torch
    from torch.nn.modules.batchnorm import _NormBase

    if not drawn or not isinstance(model, torch.nn.Module):
        return 0
    slots = _slots(model, order)
    by_name = {slot.name: slot for slot in slots}
    used: set[int] = set()
    left: list[Drawn] = []
    for d in drawn:
        slot = by_name.get(d.name)
        if slot is not None and id(slot.tensor) not in used and slot.cls == d.key.cls:
            _fill(slot.tensor, seed, d.key)
            used.add(id(slot.tensor))
        else:
            left.append(d)
    queues: dict[tuple[Any, ...], list[Drawn]] = {}
    for d in left:
        queues.setdefault((d.key.space, *d.key.cls), []).append(d)
    for slot in slots:
        if id(slot.tensor) in used:
            continue
        if not slot.param and not (
            isinstance(slot.module, _NormBase) or "mean" in slot.attr.lower() or "var" in slot.attr.lower()
        ):
            continue  # a constant buffer of the candidate's own (a ones vector): not a statistic
        queue = queues.get(("param" if slot.param else "stat", *slot.cls))
        if queue:
            _fill(slot.tensor, seed, queue.pop(0).key)
            used.add(id(slot.tensor))
    return len(used)


def drawn_to_json(drawn: list[Drawn]) -> list[list[Any]]:
    return [[d.name, d.key.space, d.key.value, list(d.key.shape), d.key.dtype, d.key.ordinal] for d in drawn]


def drawn_from_json(raw: object) -> list[Drawn]:
    """Drawn weights sent by the judge; anything malformed is dropped (the candidate then keeps
    its constants there)."""
    out: list[Drawn] = []
    for item in raw if isinstance(raw, list) else ():
        try:
            name, space, value, shape, dtype, ordinal = item
            if space not in ("param", "stat"):
                continue
            key = Key(str(space), float(value), tuple(int(s) for s in shape), str(dtype), int(ordinal))
            out.append(Drawn(str(name), key))
        except (TypeError, ValueError):
            continue
    return out
