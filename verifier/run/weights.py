"""Seeded values for the weights a model's constructor sets to constants.

PyTorch's modules start some weights at constants: LayerNorm, RMSNorm, GroupNorm and BatchNorm
weights at 1 and biases at 0, BatchNorm's running statistics at 0 and 1, attention's projection
biases at 0, PReLU's slope at 0.25; hand-written references do the same
(`nn.Parameter(torch.ones(d))`). At those values a layer can be the identity, or an affine map
within the tolerance of the identity (a BatchNorm in eval mode with fresh statistics is
`x / sqrt(1 + eps)`), so a kernel that skips it, or ignores the weights, would pass. A constant's
sign and size hide more: a LayerScale branch `x + gamma * f(x)` with `gamma = 1e-6` (timm's
ConvNeXt, CaiT) is below the fp32 precision bound (run/tolerance.py: a 5e-5 relative norm error)
at any `gamma` of that size, so a kernel that returns `x` passed; a BatchNorm weight that stays
positive lets a kernel max-pool before the per-channel affine map (`max(a x + b) = a max(x) + b`
only for `a >= 0`). Learnable weights initialised to a structure of one value and zeros hide a
product: an IRNN's recurrent weight starts as the identity (`nn.init.eye_`), a DiracNet's
convolution as `nn.init.dirac_`, so a kernel that returns `h` for `h @ W_hh.T` passed, wrong for any
trained weight. So the judge draws such weights in the reference after it is built, at a size
where what they scale counts and with either sign, and the candidate's runner gives the
candidate's matching weights the same values:

- `draw_reference_constants(model, seed, order)`: every parameter of the reference that holds a
  single value, and the running statistics of its norm layers, get seeded values. A parameter's
  constant `v` becomes `max(|v|, 1) * U(0.5, 1.5)` with a random sign per element (both signs
  where it has two elements or more; one of one element has one sign per draw, so the correctness
  phase judges a second turn with it negated, `second_turn`): at least 0.5 in size, so a term it
  scales is at least half its own size in the output, and skipping it fails the precision rule
  wherever the term is over 1e-4 of the output's norm (a constant's size kept 1e-6 of it); and no
  order valid for one sign only survives. A running statistic's `v` becomes `v * U(0.5, 1.5)` (a
  variance stays positive and of its constant's order). 0 becomes `U(-0.5, 0.5)` in both (a
  running mean takes either sign); NaN and Inf stay.
  A learnable parameter (`requires_grad=True`) whose elements take exactly two values, one of
  them 0 and the other a finite `c` (`eye_`, `dirac_`, a `tril` of ones: a structure, `_structure`)
  is drawn too, in the `struct` space: every element, its zeros' too, becomes
  `max(|c|, 1) * sqrt(nz / n) * U(0.5, 1.5)` with a random sign (`nz` of its `n` elements nonzero):
  no zero and no pattern survives, so a kernel that skips the product or reads only the pattern's
  elements is off by a term of the output's order, far over the precision rule; the factor keeps
  the Frobenius norm of the structure it replaces (a stack of dirac convolutions or a recurrence
  does not grow by `sqrt(fan_in)` per layer), so an elementwise use of a sparse pattern scales its
  term by `sqrt(nz / n)` (`1/32` for a 1024-wide identity): visible where the term is over
  `1e-4 * sqrt(n / nz)` of the output's norm. A frozen one (`requires_grad=False`: a causal mask
  held as a parameter) and buffers are constants by the reference's design: not drawn.
  The values are a function of the seed and the weight's `Key`: its space (`param`, `stat` or
  `struct`), constant, shape, dtype, a structure's pattern (its count of nonzeros and a digest of
  where they are: a candidate's tensor pairs only with one of the same pattern), how many drawn
  weights of that space, constant, shape, dtype and pattern the constructor registered before it
  (`registration_order`, entered around the constructor, numbers each module's parameter and
  buffer slots), and `kept`. Returns the drawn weights with their names (`Drawn`).
- `settle_draws(model, seed, drawn, inputs)`, in the judge after the reference is moved to its
  device: a reference can be undefined for the other sign (a temperature under `sqrt`, a prior
  under `log`: NaN, which an honest kernel that multiplies by `rsqrt(t)` or by the prior need not
  reproduce, and which leaves nothing to compare). The reference runs on `SETTLE_INPUT_SETS` sets
  of its own inputs (`as_given`, where the correctness phase holds a kernel to the reference's NaN
  and Inf; on the other distributions those elements are not judged), one set at a time, with every
  parameter drawn free, in both turns; where an output element is then NaN or Inf that is finite
  with every parameter keeping its constant's sign and size (`v * U(0.5, 1.5)`, the statistics'
  rule), the parameters to blame are found by halving the group (at most `MAX_PROBES` forwards in
  all) and get `kept` keys: their constant's sign and size, the same uniforms (a structure's:
  `c * sqrt(nz / n) * U(0.5, 1.5)` everywhere, of `c`'s sign), no second turn. The flag travels in
  the keys (`drawn_to_json`), so the candidate's matching weights get the same values.
- `second_turn(drawn)`: the keys with each one-element free parameter's (`Key.flippable`) draw
  negated (`Key.flipped`); `give_drawn(model, seed, drawn)` gives the reference a turn's values
  (the judge's correctness phase has the candidate's runner load its model again from the same
  init inputs after the same seed, with the second turn's keys).
- `match_reference_constants(model, seed, drawn, order)`: a single-valued parameter or buffer of
  the candidate with a drawn weight's name (`bn1.weight`), constant, shape and dtype gets its
  values. The rest are paired in registration order, space by space: the candidate's
  single-valued parameters with the reference's drawn parameters of the same constant, shape
  and dtype, its single-valued buffers of norm layers or with `mean` or `var` in their name with
  the drawn running statistics, its structured parameters with the reference's drawn structures
  of the same constant, shape, dtype and pattern (learnable ones first: a frozen one takes a
  structure's key only where no learnable one of its class is left). So a candidate that
  keeps the reference's layers gets their weights; one that writes `nn.LayerNorm(d)` as its own
  `torch.ones(d)` and `torch.zeros(d)` parameters, in order, gets them too, and one that holds an
  `nn.Linear`'s identity weight as its own `nn.Parameter(torch.eye(d))`; a single-valued or
  structured tensor of its own with nothing left to pair keeps its value. Last, a slot still
  unpaired takes a key left over whose constant, dtype and pattern are its own and whose element
  count is its own in another shape (a LayerNorm's (C, H, W) ones held flat, a (C,) scale held as
  (1, C, 1, 1), a 0-d temperature held as (1,)), the values in flat order; by name the same holds.
- `early_constants(seed, drawn, order)`, entered around the candidate's constructor (inside
  `registration_order`): the same values given while it is built, as soon as a slot's constant is
  known, so that what the constructor derives from them (a BatchNorm folded into a scale and
  shift, a weight read into a tensor attribute, a slope into a float) reads the drawn values. A
  submodule's slots are filled when it is attached to a parent (`self.bn = ...`, `add_module`, a
  container's children: PyTorch's module registration hook; its own constructor has ended, so
  BatchNorm's `torch.empty` weights hold their 1 and 0), a slot the model's own code registers
  with its value set (`self.g = nn.Parameter(torch.ones(d))`) when it is registered, and a
  registered learnable parameter the model's own code passes to `nn.init.eye_` or `dirac_` (patched
  inside; PyTorch's layers register random weights, then the model sets the structure) when that
  returns; each eligible single-valued or structured slot takes the next drawn key of its space,
  constant, shape, dtype and pattern: the pairing by order, made earlier. `match_reference_constants`
  then runs over the built model as before and decides: a tensor holding early-given values (its
  slot's own, or a copy's) counts as holding the constant (or structure) it had, and one that pass
  gives no key gets the constant (or structure) back, so no key's values are left in two slots and
  a candidate without a fold ends with the weights it had without the early fills.

The global RNG, which the other weights come from, is left alone: both models draw it as before
(the probes of `settle_draws` run under a forked RNG, and the reference's buffers are restored
after them: a BatchNorm in training mode updates its statistics).

Not covered: `settle_draws` sees `SETTLE_INPUT_SETS` sets of `as_given` inputs, not the ones the
correctness phase draws later with seeds of their own: a NaN that the free draw makes on a share `q`
of input sets is missed by all three and then met by an `as_given` trial with odds up to `q(1-q)^3`,
at most 0.11 (0.25 with one set; a kernel computing the reference's formula gives the same NaN, an
algebraic rewrite may not). A forward with side effects of its own (a counter, a cache kept on the
module) has them once per probe; a parameter whose free draw is finite but meaningless (an integer
count read from a parameter, a probability) keeps it. A term that stays small by its other weights
(a Linear initialised near zero) stays small: the floor covers the single-valued scale only. A
structure of other values (a band of two constants, a learnable `arange`), and one of a parameter
created with `requires_grad=False` (or frozen before the reference's constructor ends), is not
drawn: a kernel that hardcodes it passes, as it should for a constant by the reference's design;
random initialisers (`orthogonal_`, `sparse_`) need no draw. A candidate's structure held in a
buffer (`register_buffer("w_hh", torch.eye(d))` for the reference's parameter) is not paired: it
keeps the structure and the candidate is rejected. A structure set by other means than `eye_` or
`dirac_` after its registration (`copy_`, `fill_diagonal_`, `.data =`; `eye_` imported by name
before the constructor runs) is filled only by the final pass, so a fold of it in the constructor is
stale. Slots created by `copy.deepcopy` (`nn.TransformerEncoder` copies its layer) are not
registered, so they rank after the registered ones; they are not filled early. A fold reads drawn
values only where the early pairing is the final one: where the candidate registers same-shaped
constants in another order than the reference (the final pass then pairs some by name, others by
another order), or attaches a layer after a slot it registered later, the final pass gives other
keys and wins: the fold is stale and the candidate is rejected as before. So is a fold of a layer
built and read before it is attached to a parent (or never attached), of a parameter created empty
and set by `nn.init.ones_` after its registration on the model itself (an empty tensor that happens
to hold one value there takes a key early and shifts the later early pairs), and one that holds
constants as plain tensor attributes or creates them in `forward`. A renamed weight paired by order
can take another's values when the candidate registers same-shaped constants in another order than
the reference. Buffers a reference creates itself (`register_buffer(..., torch.ones(d))`) are
constants by its design: they are not drawn. The second turn negates each one-element free parameter
at once and is judged on one more set of `as_given` inputs: a kernel valid only where two such
parameters have opposite signs, or only for the first turn's size, is not told apart by it.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple


class Key(NamedTuple):
    # "param" (a single-valued parameter), "stat" (a norm layer's running statistic) or "struct" (a
    # learnable parameter holding one nonzero value and zeros: `nn.init.eye_`, `dirac_`)
    space: str
    value: float  # the constant the tensor held (a structure's nonzero one)
    shape: tuple[int, ...]
    dtype: str
    ordinal: int  # drawn weights of this space, constant, shape, dtype and pattern registered before it
    # a parameter drawn keeping its constant's sign and size (`settle_draws`: the free draw made the
    # reference's outputs non-finite); running statistics always keep theirs
    kept: bool = False
    # a structure's pattern, "<nonzeros>/<digest of where they are>" (`_structure`); "" for the others
    pattern: str = ""
    # the second turn's key of a one-element free parameter (`second_turn`): the same draw, negated
    flipped: bool = False

    @property
    def flippable(self) -> bool:
        """A free parameter of one element: one sign per draw, so the second turn negates it."""
        return self.space == "param" and not self.kept and math.prod(self.shape) == 1

    @property
    def cls(self) -> tuple[float, tuple[int, ...], str, str]:
        """(constant, shape, dtype, pattern): what a candidate's weight must hold to take this key."""
        return self.value, self.shape, self.dtype, self.pattern


class Drawn(NamedTuple):
    name: str  # its state_dict name in the reference
    key: Key


def _draw(seed: int, key: Key) -> Any:
    """The key's values (module docstring): 0 -> U(-0.5, 0.5); a statistic, or a parameter whose
    key is `kept`, `v * U(0.5, 1.5)`; another parameter `max(|v|, 1) * U(0.5, 1.5)` with a random
    sign per element, both signs present where it has two elements or more. A structure's values
    (every element, its zeros' too) are a parameter's times `sqrt(nonzeros / elements)`. A `flipped`
    key of one element (`second_turn`) has its free draw's values negated."""
    import torch

    # (`kept` is not hashed: the fallback changes only the sign and the size of the same draw)
    ident = (seed, *key[:5], key.pattern) if key.space == "struct" else (seed, *key[:5])
    digest = hashlib.blake2b(repr(ident).encode(), digest_size=8).digest()
    gen = torch.Generator().manual_seed(int.from_bytes(digest, "little") & ((1 << 63) - 1))
    u = torch.rand(key.shape, generator=gen, dtype=torch.float64)
    turn = -1.0 if key.flipped and key.flippable else 1.0  # (`second_turn`)
    if key.value == 0:
        return (u - 0.5) * turn
    density = 1.0
    if key.space == "struct":  # (the pattern's count is checked on arrival: `drawn_from_json`)
        density = math.sqrt(int(key.pattern.split("/")[0]) / max(u.numel(), 1))
    if key.space == "stat" or key.kept:
        return key.value * density * (u + 0.5)
    sign = torch.randint(0, 2, key.shape, generator=gen).to(torch.float64) * 2 - 1
    flat = sign.view(-1)
    if flat.numel() > 1 and bool((flat == flat[0]).all()):
        flat[int(torch.randint(flat.numel(), (1,), generator=gen))] *= -1
    return max(abs(key.value), 1.0) * density * (u + 0.5) * sign * turn


def _same_elements(
    a: tuple[float, tuple[int, ...], str, str], b: tuple[float, tuple[int, ...], str, str]
) -> bool:
    """Whether two classes (constant, shape, dtype, pattern) hold the same elements, the shape
    aside where the element counts agree (a weight of the same name kept flat)."""
    return a[0] == b[0] and a[2:] == b[2:] and math.prod(a[1]) == math.prod(b[1])


def _fill(t: Any, seed: int, key: Key) -> None:
    import torch

    with torch.no_grad():
        values = _draw(seed, key).to(dtype=t.dtype, device=t.device)
        if tuple(values.shape) != tuple(t.shape) and values.numel() == t.numel():
            values = values.reshape(t.shape)  # the same elements in the candidate's shape, flat order
        t.copy_(values)


def _single_value(t: Any) -> float | None:
    """The one finite value of a floating tensor with at least one element, or None (a lazy
    module's parameter, not materialised yet, has none)."""
    from torch.nn.parameter import is_lazy

    if is_lazy(t) or not t.is_floating_point() or t.numel() == 0 or t.is_meta:
        return None
    flat = t.detach().reshape(-1)
    first = float(flat[0])
    if not math.isfinite(first) or float(flat[-1]) != first or not bool((flat == flat[0]).all()):
        return None  # (the last element first: a random weight is rejected without a pass over it)
    return first


def _structure(t: Any) -> tuple[float, str, Any] | None:
    """(its nonzero value, its pattern, where it is nonzero) for a floating tensor whose elements
    take exactly two values, one of them 0, the other finite (`nn.init.eye_`, `dirac_`, a `tril` of
    ones); None for the rest. The pattern is `<nonzeros>/<digest>`, the digest of the flat 0/nonzero
    mask: with the shape, it identifies the structure."""
    import torch
    from torch.nn.parameter import is_lazy

    if is_lazy(t) or not t.is_floating_point() or t.numel() < 2 or t.is_meta:
        return None
    flat = t.detach().reshape(-1)
    ends = {float(flat[0]), float(flat[-1])} - {0.0}
    if len(ends) > 1 or not all(math.isfinite(v) for v in ends):
        return None  # (the ends first: a random weight is rejected without a pass over it)
    mask = flat != 0
    nonzeros = int(mask.sum())
    if nonzeros in (0, flat.numel()):
        return None  # one value: `_single_value`'s
    values = flat[mask]
    value = float(values[0])
    if not math.isfinite(value) or ends - {value} or not bool((values == values[0]).all()):
        return None
    digest = hashlib.blake2b(mask.to(torch.uint8).cpu().numpy().tobytes(), digest_size=16).hexdigest()
    return value, f"{nonzeros}/{digest}", mask.cpu()


def _space(slot: _Slot) -> str:
    return "struct" if slot.cls[3] else "param" if slot.param else "stat"


def _statistic(module: Any, attr: str) -> bool:
    """Whether a candidate's buffer may take a drawn running statistic: one of a norm layer, or
    one with `mean` or `var` in its name (a ones vector of its own is not)."""
    from torch.nn.modules.batchnorm import _NormBase

    return isinstance(module, _NormBase) or "mean" in attr.lower() or "var" in attr.lower()


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


class EarlyFills:
    """What `early_constants` gave while a constructor ran: the key each slot took, by its module's
    id and its name (not by the tensor's: moving the model replaces buffer tensors), and the modules
    and tensors it filled, held until the final pass so that no id of theirs is reused meanwhile."""

    def __init__(self) -> None:
        self.keys: dict[tuple[int, str], Key] = {}
        self.tensors: dict[int, Any] = {}
        self.modules: dict[int, Any] = {}
        self.masks: dict[Key, Any] = {}  # a structure's 0/nonzero mask, by the key it took

    def restore(self, t: Any, key: Key) -> None:
        """Gives a tensor holding `key`'s early values the constant (or the structure) it had."""
        import torch

        with torch.no_grad():
            mask = self.masks.get(key)
            if mask is None:
                t.fill_(key.value)
            else:
                t.copy_(mask.reshape(t.shape).to(device=t.device, dtype=t.dtype) * key.value)


@contextlib.contextmanager
def early_constants(seed: int, drawn: list[Drawn], order: dict[tuple[int, str], int]) -> Iterator[EarlyFills]:
    """Inside (around a candidate's constructor, within `registration_order`, whose `order` it
    reads), the candidate's weights take drawn values while it is built, as soon as their constant
    is known, so that code later in the constructor reads them: a submodule's registered slots when
    it is attached to a parent (`self.bn = ...`, `add_module`, a container's children: its own
    constructor has ended), a slot the model's own code registers (not PyTorch's: its layers
    register `torch.empty` weights and fill them afterwards) at once, a registered learnable
    parameter the model's own code passes to `nn.init.eye_` or `dirac_` (patched inside) as that
    returns. Each eligible single-valued or learnable structured slot (`match_reference_constants`'s
    rules; a frozen structure is left to it) takes the next drawn key of its space, constant, shape,
    dtype and pattern, in registration order: the final pass's pairing by order, made earlier.
    Yields the record `match_reference_constants` then reads; the hooks and the initialisers are
    restored on every path."""
    import torch
    from torch.nn.modules import module as nn_module

    early = EarlyFills()
    by_order = _ByOrder(drawn)
    passed = {os.path.abspath(nn_module.__file__), os.path.abspath(__file__)}
    torch_dir = os.path.join(os.path.dirname(os.path.abspath(torch.__file__)), "")

    def own_code() -> bool:
        # the nearest caller outside nn.Module's registration (and this file's hooks and patches)
        frame: types.FrameType | None = sys._getframe(1)
        while frame is not None and os.path.abspath(frame.f_code.co_filename) in passed:
            frame = frame.f_back
        return frame is not None and not os.path.abspath(frame.f_code.co_filename).startswith(torch_dir)

    def give(module: Any, attr: str, t: Any, param: bool) -> None:
        if t is None or id(t) in early.tensors or (id(module), attr) in early.keys:
            return
        if not (param or _statistic(module, attr)):
            return
        slot = _slot("", module, attr, t, param)
        # (a frozen structure is the final pass's: it pairs only where no learnable one is left)
        if slot is None or _frozen(slot):
            return
        key = by_order.take(slot)
        if key is None:
            return
        _fill(t, seed, key)
        early.keys[(id(module), attr)] = key
        early.tensors[id(t)] = t
        early.modules[id(module)] = module
        if slot.mask is not None:
            early.masks[key] = slot.mask

    # a slot these hooks cannot read or fill is left to the final pass, which judges it as it did
    # before: nothing here may fail the candidate's constructor
    # every parameter registered inside, by its tensor's id (held: no id is reused meanwhile), for
    # the structure initialisers below
    registered: dict[int, tuple[Any, str, Any]] = {}

    def on_parameter(module: Any, name: str, param: Any) -> None:
        with contextlib.suppress(Exception):
            if param is not None:
                registered[id(param)] = (module, name, param)
                if own_code():
                    give(module, name, param, True)

    def structured(init: Callable[..., Any]) -> Callable[..., Any]:
        # `nn.init.eye_(self.hh.weight)` on a registered parameter, from the model's own code: the
        # structure is known once it has run (PyTorch's layers register random weights first)
        def wrapper(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            out = init(tensor, *args, **kwargs)
            with contextlib.suppress(Exception):
                slot = registered.get(id(tensor))
                if slot is not None and slot[2] is tensor and own_code():
                    give(slot[0], slot[1], tensor, True)
            return out

        return wrapper

    def on_buffer(module: Any, name: str, tensor: Any) -> None:
        with contextlib.suppress(Exception):
            if tensor is not None and own_code():
                give(module, name, tensor, False)

    def on_module(parent: Any, name: str, sub: Any) -> None:
        with contextlib.suppress(Exception):
            if not isinstance(sub, torch.nn.Module):
                return
            # its slots in registration order; a deepcopy'd one is not registered and ranks after
            # the registered ones in the final pass: it is left to that pass
            found: list[tuple[int, Any, str, Any, bool]] = []
            for m in sub.modules():
                for param, table in ((True, m._parameters), (False, m._buffers)):
                    for attr, t in table.items():
                        rank = order.get((id(m), attr))
                        if rank is not None:
                            found.append((rank, m, attr, t, param))
            for _, m, attr, t, param in sorted(found, key=lambda f: f[0]):
                give(m, attr, t, param)

    handles: list[Any] = []
    inits = {name: getattr(torch.nn.init, name) for name in ("eye_", "dirac_")}
    try:
        if drawn:
            handles.append(nn_module.register_module_parameter_registration_hook(on_parameter))
            handles.append(nn_module.register_module_buffer_registration_hook(on_buffer))
            handles.append(nn_module.register_module_module_registration_hook(on_module))
            if any(d.key.space == "struct" for d in drawn):
                for name, init in inits.items():
                    setattr(torch.nn.init, name, structured(init))
        yield early
    finally:
        for handle in handles:
            handle.remove()
        for name, init in inits.items():
            setattr(torch.nn.init, name, init)
        registered.clear()


class _Held:
    """Which early-given key a tensor holds the values of (in its dtype): its slot's own, else any
    of its shape (a copy of a filled slot: `copy.deepcopy`, `.clone()`); None for the rest."""

    def __init__(self, early: EarlyFills, seed: int) -> None:
        self.early, self.seed = early, seed
        self.by_shape: dict[tuple[int, ...], list[Key]] = {}
        for key in dict.fromkeys(early.keys.values()):
            self.by_shape.setdefault(key.shape, []).append(key)
        self.draws: dict[tuple[Key, Any], Any] = {}

    def _holds(self, t: Any, first: float, key: Key) -> bool:
        import torch

        want = self.draws.get((key, t.dtype))
        if want is None:
            want = self.draws[key, t.dtype] = _draw(self.seed, key).to(dtype=t.dtype)
        if float(want.reshape(-1)[0]) != first:
            return False
        return bool(torch.equal(t.detach(), want.to(device=t.device)))

    def __call__(self, module: Any, attr: str, t: Any) -> Key | None:
        from torch.nn.parameter import is_lazy

        if is_lazy(t) or not t.is_floating_point() or t.is_meta or t.numel() == 0:
            return None
        shape = tuple(t.shape)
        own = self.early.keys.get((id(module), attr))
        keys = ([own] if own is not None and own.shape == shape else []) + self.by_shape.get(shape, [])
        if not keys:
            return None
        first = float(t.detach().reshape(-1)[0])
        return next((key for key in keys if self._holds(t, first, key)), None)


class _Slot(NamedTuple):
    name: str
    tensor: Any
    module: Any
    attr: str
    param: bool
    # (its one value, shape, dtype, "") when it was found; a parameter's structure: (its nonzero
    # value, shape, dtype, pattern)
    cls: tuple[float, tuple[int, ...], str, str]
    early: Key | None = None  # the key whose values it holds, given early: its class is the key's
    mask: Any = None  # a structure's 0/nonzero mask, as found (`_structure`); None for the rest


def _slot(name: str, module: Any, attr: str, t: Any, param: bool, early: Key | None = None) -> _Slot | None:
    """A parameter or buffer as a slot a drawn key may pair with: one holding a single value, a
    parameter holding a structure (`_structure`), or one holding `early`'s values (its class is the
    key's); None for the rest."""
    import torch

    value, pattern, mask = _single_value(t), "", None
    if early is not None:
        value, pattern = float(torch.tensor(early.value, dtype=t.dtype)), early.pattern
    elif value is None and param:
        value, pattern, mask = _structure(t) or (None, "", None)
    if value is None:
        return None
    cls = (value, tuple(t.shape), str(t.dtype).removeprefix("torch."), pattern)
    return _Slot(name, t, module, attr, param, cls, early, mask)


def _eligible(slot: _Slot) -> bool:
    """Whether a candidate's slot may take a drawn key: a parameter, or a statistic's buffer."""
    return slot.param or _statistic(slot.module, slot.attr)


def _frozen(slot: _Slot) -> bool:
    """A structure in a parameter with `requires_grad=False` (a mask by its design): it takes a
    structure's key only where no learnable one of its class is left (`match_reference_constants`)."""
    return _space(slot) == "struct" and not slot.tensor.requires_grad


class _ByOrder:
    """The drawn keys not given yet, by space and class (`Key.cls`), each class in the reference's
    registration order: the one pairing by order (module docstring), which `early_constants` makes
    while the constructor runs and `match_reference_constants` makes over the built model."""

    def __init__(self, drawn: list[Drawn]) -> None:
        self.queues: dict[tuple[str, tuple[float, tuple[int, ...], str, str]], list[Key]] = {}
        for d in drawn:  # in the reference's registration order, ordinals rising within each class
            self.queues.setdefault((d.key.space, d.key.cls), []).append(d.key)

    def take(self, slot: _Slot) -> Key | None:
        """The next key of the slot's space and class, taken; None where none is left."""
        queue = self.queues.get((_space(slot), slot.cls))
        return queue.pop(0) if queue else None

    def take_reshaped(self, slot: _Slot) -> Key | None:
        """The first key left of the slot's space, constant, dtype and pattern whose shape differs
        but whose element count is the slot's (a LayerNorm's (C, H, W) ones held flat, a (C,)
        scale held as (1, C, 1, 1)), taken in the reference's registration order; None if none."""
        value, shape, dtype, pattern = slot.cls
        space = _space(slot)
        for (sp, (v, s, dt, pat)), queue in self.queues.items():
            if queue and sp == space and v == value and dt == dtype and pat == pattern and s != shape:
                if math.prod(s) == math.prod(shape):
                    return queue.pop(0)
        return None


def _slots(
    model: Any, order: dict[tuple[int, str], int], held: Callable[[Any, str, Any], Key | None] | None = None
) -> list[_Slot]:
    """The model's single-valued parameters and buffers and its structured parameters (`_slot`;
    each tensor once), in registration order (slots it did not see after the others, in the module
    walk's order). With `held`, a tensor holding an early-given key's values counts as holding that
    key's constant (or structure)."""
    found: list[tuple[int, _Slot]] = []
    seen: set[int] = set()
    for mod_name, m in model.named_modules():
        for param, table in ((True, m._parameters), (False, m._buffers)):
            for attr, t in table.items():
                if t is None or id(t) in seen:
                    continue
                seen.add(id(t))
                name = f"{mod_name}.{attr}" if mod_name else attr
                slot = _slot(name, m, attr, t, param, held(m, attr, t) if held is not None else None)
                if slot is not None:
                    found.append((order.get((id(m), attr), len(order) + len(found)), slot))
    return [slot for _, slot in sorted(found, key=lambda it: it[0])]


def draw_reference_constants(model: Any, seed: int, order: dict[tuple[int, str], int]) -> list[Drawn]:
    """The reference's single-valued parameters, norm-layer running statistics and structured
    learnable parameters, drawn (module docstring); returns them with their names and keys."""
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
        space = _space(slot)
        if _frozen(slot):
            continue  # a frozen structure (a causal mask held as a parameter): a constant by its design
        cls = (space, *slot.cls)
        value, shape, dtype, pattern = slot.cls
        key = Key(space, value, shape, dtype, counts.get(cls, 0), pattern=pattern)
        counts[cls] = key.ordinal + 1
        _fill(slot.tensor, seed, key)
        drawn.append(Drawn(slot.name, key))
    return drawn


def second_turn(drawn: list[Drawn]) -> list[Drawn]:
    """The keys of the second turn: each one-element free parameter's (`Key.flippable`) negated, the
    others as they are. A parameter of two elements or more holds both signs within one draw; one of
    one element has one sign per draw, so a kernel valid for one sign of it (a scale assumed
    positive, its sign ignored) passed one draw in two; across both turns it meets both signs."""
    return [Drawn(d.name, d.key._replace(flipped=True)) if d.key.flippable else d for d in drawn]


def give_drawn(model: Any, seed: int, drawn: list[Drawn]) -> None:
    """The reference's drawn tensors, by name, given their keys' values (a turn's)."""
    for d in drawn:
        getter = model.get_parameter if d.key.space in ("param", "struct") else model.get_buffer
        _fill(getter(d.name), seed, d.key)


# `settle_draws`: how many sets of the problem's own inputs it runs the reference on (module
# docstring: where the reference is NaN or Inf on them, a kernel must be the same NaN or Inf), and at
# most this many forwards over all of them; groups still untested when they are spent keep their
# constant's sign and size
SETTLE_INPUT_SETS = 3
MAX_PROBES = 48


def settle_draws(
    model: Any,
    seed: int,
    drawn: list[Drawn],
    inputs: Callable[[], list[Any]],
    num_sets: int = SETTLE_INPUT_SETS,
) -> list[Drawn]:
    """The drawn reference run on `num_sets` sets of the problem's own inputs (`inputs()`, called
    once per set, draws one), its drawn parameters with a free sign and size first, in both turns
    (`second_turn`: a one-element parameter's sign negated). Where that makes an output element NaN
    or Inf that is finite with every parameter keeping its constant's sign and size (a parameter under
    `sqrt` or `log`), on any set in either turn, the parameters to blame are found by halving the
    group (at most `MAX_PROBES` forwards in all) and keep theirs (`Key.kept`); the others stay free.
    Each set is drawn, judged and dropped before the next (one set held at a time); where every
    output is finite, a set costs one forward per turn. The model is left holding the returned keys'
    values (the first turn's), its buffers (a BatchNorm in training mode updates its statistics) as
    they were, the global RNG as it was; a reference that raises on the free draw counts as
    non-finite, inputs that cannot be made end the sets (the correctness phase reports them)."""
    import torch

    movable = ("param", "struct")
    free = [i for i, d in enumerate(drawn) if d.key.space in movable and d.key.value != 0 and not d.key.kept]
    if not free or not isinstance(model, torch.nn.Module):
        return drawn
    try:
        tensors = {i: model.get_parameter(drawn[i].name) for i in free}
    except Exception:
        return drawn
    turns = (False, True) if any(drawn[i].key.flippable for i in free) else (False,)
    buffers = [(t, t.detach().clone()) for t in model.buffers()]
    is_initialized = torch.cuda.is_initialized()  # type: ignore[no-untyped-call]
    cuda = list(range(torch.cuda.device_count())) if is_initialized else []
    forwards = 0

    def fill(signed: set[int], flipped: bool) -> None:
        for i in free:
            key = drawn[i].key._replace(kept=i not in signed)
            _fill(tensors[i], seed, key._replace(flipped=flipped and key.flippable))

    def non_finite(args: list[Any], signed: set[int], flipped: bool) -> list[Any] | None:
        """Per floating output, where it is NaN or Inf; None where the forward raised."""
        nonlocal forwards
        forwards += 1
        fill(signed, flipped)
        try:
            with torch.no_grad(), torch.random.fork_rng(devices=cuda):
                out = model(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
                return [~torch.isfinite(t) for t in _float_leaves(out)]
        except Exception:
            return None
        finally:
            with torch.no_grad():
                for t, saved in buffers:
                    if t.shape == saved.shape:
                        t.copy_(saved)

    signed = set(free)
    # the set being judged ("args") and, once needed, its outputs' non-finite places with every
    # parameter kept ("base"; None where that raises)
    judged: dict[str, Any] = {}

    def ok(group: set[int]) -> bool:
        if not group:
            return True  # (the kept draw itself)
        for flipped in turns:
            masks = non_finite(judged["args"], group, flipped)
            if masks is not None and not any(bool(m.any()) for m in masks):
                continue  # finite everywhere
            if "base" not in judged:
                judged["base"] = non_finite(judged["args"], set(), False)
            base = judged["base"]
            if base is None or masks is None or len(masks) != len(base):
                return False
            if any(m.shape != b.shape or bool((m & ~b).any()) for m, b in zip(masks, base, strict=True)):
                return False
        return True

    def settle(part: list[int]) -> None:
        if forwards >= MAX_PROBES:
            return
        if ok(signed | set(part)):
            signed.update(part)
        elif len(part) > 1:
            settle(part[: len(part) // 2])
            settle(part[len(part) // 2 :])

    for _ in range(num_sets):
        if forwards >= MAX_PROBES:
            break
        try:
            judged.clear()
            judged["args"] = inputs()
        except Exception:
            break
        if ok(signed) or judged.get("base", ()) is None:
            continue  # (no base: it raises either way on these inputs, which the correctness phase reports)
        group = sorted(signed)
        signed.clear()
        if len(group) > 1:
            settle(group[: len(group) // 2])
            settle(group[len(group) // 2 :])
    judged.clear()
    fill(signed, False)
    out = list(drawn)
    for i in free:
        if i not in signed:
            out[i] = Drawn(drawn[i].name, drawn[i].key._replace(kept=True))
    return out


def _float_leaves(out: Any) -> list[Any]:
    """The floating (and complex) tensors of a model's output, in order (run/dynamic_checks.py
    `flatten_outputs`)."""
    import torch
    from cudice.verifier.run.dynamic_checks import discrete, flatten_outputs

    return [t for t in flatten_outputs(out) if isinstance(t, torch.Tensor) and not discrete(t)]


def match_reference_constants(
    model: Any,
    seed: int,
    drawn: list[Drawn],
    order: dict[tuple[int, str], int],
    early: EarlyFills | None = None,
) -> int:
    """The candidate's single-valued parameters and buffers and its structured parameters given the
    values of the reference's drawn weights: by name first, then in registration order space by
    space, a frozen structure after the learnable ones (module docstring). With `early`
    (`early_constants` around the constructor), a tensor that holds values given early counts as
    holding the constant (or structure) it had, and one this pass gives no key gets that back: this
    pass decides, and no key's values are left in two slots. Returns how many it gave."""
    import torch

    if not drawn or not isinstance(model, torch.nn.Module):
        return 0
    slots = _slots(model, order, _Held(early, seed) if early is not None and early.keys else None)
    by_name = {slot.name: slot for slot in slots}
    used: set[int] = set()
    left: list[Drawn] = []
    for d in drawn:
        slot = by_name.get(d.name)
        if slot is not None and id(slot.tensor) not in used and _same_elements(slot.cls, d.key.cls):
            _fill(slot.tensor, seed, d.key)
            used.add(id(slot.tensor))
        else:
            left.append(d)
    by_order = _ByOrder(left)
    eligible = [slot for slot in slots if _eligible(slot)]
    # a constant buffer of the candidate's own (a ones vector) is not a statistic; a frozen structure
    # takes a structure's key only where no learnable one of its class is left
    for slot in sorted(eligible, key=_frozen):  # (stable: registration order within each)
        if id(slot.tensor) in used:
            continue
        key = by_order.take(slot)
        if key is not None:
            _fill(slot.tensor, seed, key)
            used.add(id(slot.tensor))
    # then a weight the candidate holds in another shape of the same elements takes a key left over
    for slot in sorted(eligible, key=_frozen):
        if id(slot.tensor) not in used and (key := by_order.take_reshaped(slot)) is not None:
            _fill(slot.tensor, seed, key)
            used.add(id(slot.tensor))
    for slot in eligible:
        if slot.early is not None and id(slot.tensor) not in used and early is not None:
            early.restore(slot.tensor, slot.early)
    return len(used)


def drawn_to_json(drawn: list[Drawn]) -> list[list[Any]]:
    """The drawn weights as JSON lists: name, space, constant, shape, dtype, ordinal, `kept`, and an
    eighth field in the "struct" space (its pattern) and for a `flipped` key (true)."""
    return [
        [d.name, d.key.space, d.key.value, list(d.key.shape), d.key.dtype, d.key.ordinal, d.key.kept]
        + ([d.key.pattern] if d.key.space == "struct" else [True] if d.key.flipped else [])
        for d in drawn
    ]


def _pattern_ok(pattern: object, shape: tuple[int, ...]) -> bool:
    """Whether a "struct" key's pattern is `<nonzeros>/<32 hex digits>` with 0 < nonzeros < elements."""
    if not isinstance(pattern, str) or pattern.count("/") != 1:
        return False
    count, digest = pattern.split("/")
    if not count.isdigit() or len(digest) != 32 or any(c not in "0123456789abcdef" for c in digest):
        return False
    return 0 < int(count) < math.prod(shape)


def drawn_from_json(raw: object) -> list[Drawn]:
    """Drawn weights sent by the judge; anything malformed, or of an unknown space, is dropped (the
    candidate then keeps its constants there)."""
    out: list[Drawn] = []
    for item in raw if isinstance(raw, list) else ():
        try:
            name, space, value, shape, dtype, ordinal, *rest = item
            if space not in ("param", "stat", "struct") or len(rest) > 2:
                continue
            kept = rest[0] if rest else False  # (six fields: a list without the flag)
            eighth = rest[1] if len(rest) == 2 else None  # a structure's pattern, or a flipped key's true
            struct, dims = space == "struct", tuple(int(s) for s in shape)
            if not isinstance(kept, bool) or (struct and not _pattern_ok(eighth, dims)):
                continue
            if not struct and not (eighth is None or eighth is True):
                continue  # (a flag is the bool true, or absent)
            pattern, flipped = (str(eighth), False) if struct else ("", eighth is True)
            key = Key(str(space), float(value), dims, str(dtype), int(ordinal), kept, pattern, flipped)
            if flipped and not key.flippable:
                continue  # (only a free parameter of one element has a second turn)
            out.append(Drawn(str(name), key))
        except (TypeError, ValueError):
            continue
    return out
