"""The reference's own ties: the comparison's second opinion on a discrete output.

An integer or bool output (argmax, indices, a mask) is held to equality. Where the reference's own
answer is decided by a tie or a near-tie, an honest kernel may decide it the other way where
PyTorch promises nothing: two fp32 values that round to the same number (random draws do, about
once in 10^7 pairs) are a near-tie that another summation order may break either way, and a sort
may order equal keys otherwise (`torch.sort` promises no order among them). Where PyTorch documents
the answer at exact ties (argmax, argmin, max and min over a dim: the first of equal values), an
exact tie is decided as documented: zeros after a ReLU, values a clamp saturates, equal 16-bit
values, quantised levels. `second_opinion(model, inputs, ref_out, hold)` gives
`tolerance.compare_outputs` two kinds of evidence (run/tolerance.py `_excused_at_ties`, and
`_excused_at_jumps` for floating outputs at a rounding or threshold the reference takes):

1. **Tie sets, where the output is the indices of an op that promises no order among ties.** A
   copy of the reference runs on the same inputs under a dispatch mode that keeps, for each
   median/nanmedian over a dim, mode, sort, topk, kthvalue, cummax and cummin, and max pooling with
   indices (`max_pool1d/2d/3d(..., return_indices=True)`, `F.max_pool*d_with_indices`,
   `adaptive_max_pool1d/2d/3d` with indices; a 1d pool is the 2d op on an unsqueezed input, its
   squeezed indices keep the set), the tensor it selected from and how its indices lie over it (a
   registry of layouts, `Layout`: one per slice along a dim, a permutation along it, a running
   extreme along it, or a flat place in a pooled plane). Where a reference output *is* such an op's
   indices (the same place, holding what the op made: not changed in place since), a kernel's index
   is accepted when it is in range and selects the value the reference's index selects (NaN
   selects NaN), and, for sort and topk, when no index repeats along the dim, for cummax and
   cummin, when it does not pass its own place, for a pool, when it lies inside its output
   place's window (kernel, stride, padding and dilation, or the adaptive split). Exact and
   deterministic: every tie, of any floating dtype, is judged where it is decided. PyTorch documents
   no index among equal values for these ops (its CPU cummax keeps the last, its max pool the
   first), so an honest kernel may keep another. Not for a stable sort (one order is right), nor
   where the op selects from integers, bools or a tensor of two values, nor for argmax, argmin and
   max/min over a dim (the first index is documented: their indices get the nudges only, which
   break near-ties and no exact one). The values these ops return beside their indices are
   floating outputs, compared as floats: a tie changes no value.
2. **Nudges, for other discrete outputs** (masks, argmax-like indices, indices computed further),
   and for floating outputs that fail the element rule (`_excused_at_jumps`: a rounding or a
   threshold kept in float). Copies of the reference
   run with every floating input multiplied by `1 + u * NUDGE_REL` and then by `1 - u * NUDGE_REL`
   (`u` uniform in [-1, 1], drawn per element from the OS), for `NUDGE_DRAWS` draws of `u`; an
   element may differ only where the reference's answer changed between these runs, only to a value
   it gave, and only for up to `tolerance.NUDGE_MAX_SHARE` of the output. 2^-16 is a sixteenth of a
   TF32 or fp16 rounding step (at 2^-12 an argmax of a TF32 matmul was excused in most runs) and 2^7
   fp32 steps, above what another summation order moves. One draw leaves a tie of two equal fp32
   values unbroken when their `u` round alike (`|u_i - u_j| * 2^-16` under fp32's step of 2^-23),
   about 2^-7 of the time; three draws, about 5e-7.

Refused (`NoExact`: the difference then stands): a reference that draws random numbers (dropout
in training, sampling: its reruns would differ on their own, and a kernel that skipped the random
op looked like it differed at ties), one whose rerun on the same inputs does not give its discrete
outputs bit for bit (state that changes per call, nondeterminism), and inputs with nothing floating
(no nudge; tie sets still apply).

What a kernel can gain from it: another index that selects the same value, or a value the
reference itself gives for inputs moved by 2^-16 of their values. A kernel that decides in TF32,
fp16 or bf16 differs at far more elements than that and fails.

`hold()` is entered around the GPU work (the judge's shared lease). The runs happen only after a
discrete output, or a floating one's element rule, has failed, so they cost nothing on the common
path: one run with the dispatch mode, and `2 * NUDGE_DRAWS` nudged runs when an output is not a
selecting op's indices, each on a copy of the reference. Not covered: 16-bit inputs get no nudge
(their step is above 2^-16), so their ties count only where a selecting op that promises no order
decides them; ties created from weights, not inputs, likewise; indices that pass through a view, a
cast or arithmetic before they are returned (the nudge judges them, which does not break ties made
inside the forward); fractional max pooling
(random: no second opinion); a tie whose choice feeds a floating output (`i = s.argmax(1);
return i, emb[i]`: the rows differ, judged as floats; at a near-tie the nudges may excuse them as
jumps).
"""

from __future__ import annotations

import contextlib
import copy
import secrets
from collections.abc import Callable
from typing import Any

from cudice.verifier.run.dynamic_checks import bit_identical, discrete, flatten_outputs
from cudice.verifier.run.exact_reference import seeded_but_off
from cudice.verifier.run.tolerance import NoExact, Ties, TieSet

NUDGE_REL = 2.0**-16  # how far each floating input value moves, relative to itself, at most
NUDGE_DRAWS = 3  # draws of `u`, each run both ways
Hold = Callable[[], contextlib.AbstractContextManager[Any]]  # the judge's shared lease


def second_opinion(model: Any, inputs: list[Any], ref_out: Any, hold: Hold) -> Ties:
    """The reference's tie sets for `inputs` (module docstring, 1) and, lazily, its outputs on
    nudged inputs (2); `NoExact` where there is no second opinion (random ops, a rerun that
    differs)."""
    import torch

    with hold(), torch.no_grad():
        try:
            twin = copy.deepcopy(model)
        except Exception as exc:
            raise NoExact(f"the reference cannot be copied ({type(exc).__name__})") from exc
        watch = _Selections()
        try:
            with watch:
                again = flatten_outputs(twin(*_copies(inputs)))
        except NoExact:
            raise
        except Exception as exc:  # memory
            raise NoExact(f"the reference failed when run again ({type(exc).__name__})") from exc
        finally:
            twin = None
            _release()
    given = flatten_outputs(ref_out)
    if len(again) != len(given) or any(
        isinstance(r, torch.Tensor)
        and discrete(r)
        and not (isinstance(a, torch.Tensor) and bit_identical(a, r))
        for a, r in zip(again, given, strict=False)
    ):
        raise NoExact(
            "the reference gives other discrete outputs when run again on the same inputs (it "
            "changes its own state, or it is not deterministic)"
        )
    # an output at a recorded place that no longer holds what the op made was changed in place
    # after it (`idx += 1`): its values are no longer the op's indices
    sets = {}
    for i, a in enumerate(again):
        if discrete(a) and _key(a) in watch.sets:
            tie, made = watch.sets[_key(a)]
            if bit_identical(a, made):
                sets[i] = tie
    return Ties(sets, lambda: nudged_outputs(model, inputs, hold))


def nudged_inputs(inputs: list[Any], sign: float, draws: list[Any]) -> list[Any]:
    """Copies of `inputs` with each floating tensor `x` moved to `x * (1 + sign * u * NUDGE_REL)`,
    `u` the matching entry of `draws` (computed in float64, rounded back to `x`'s dtype)."""
    import torch

    out = []
    for x, u in zip(inputs, draws, strict=True):
        if isinstance(x, torch.Tensor) and x.is_floating_point() and u is not None:
            moved = x.double() * (1.0 + sign * NUDGE_REL * u)
            out.append(moved.to(x.dtype))
        else:
            out.append(x.clone() if isinstance(x, torch.Tensor) else x)
    return out


def nudged_outputs(model: Any, inputs: list[Any], hold: Hold) -> list[list[object]]:
    """The reference's flattened outputs on the nudges of `inputs` (module docstring, 2), each run
    on its own copy of `model` (the reference's state stays as the trials left it); `NoExact`
    with the reason where there are none."""
    import torch

    if not any(isinstance(x, torch.Tensor) and x.is_floating_point() for x in inputs):
        raise NoExact("the reference has no floating input to move")
    gen = torch.Generator().manual_seed(secrets.randbits(63))
    runs: list[list[object]] = []
    for _ in range(NUDGE_DRAWS):
        draws = [
            torch.rand(x.shape, generator=gen, dtype=torch.float64).mul_(2).sub_(1).to(x.device)
            if isinstance(x, torch.Tensor) and x.is_floating_point()
            else None
            for x in inputs
        ]
        runs += _both_ways(model, inputs, draws, hold)
    return runs


def _both_ways(model: Any, inputs: list[Any], draws: list[Any], hold: Hold) -> list[list[object]]:
    import torch

    runs: list[list[object]] = []
    with hold(), torch.no_grad():
        for sign in (1.0, -1.0):
            try:
                twin = copy.deepcopy(model)
                runs.append(flatten_outputs(twin(*nudged_inputs(inputs, sign, draws))))
            except Exception as exc:  # memory, a copy that cannot be made
                raise NoExact(f"the reference failed on moved inputs ({type(exc).__name__})") from exc
            finally:
                twin = None
                _release()
    return runs


def _ties_are_rounding(source: Any) -> bool:
    """Whether ties in what a selecting op selects from are rounding's, which a kernel may break its
    own way: floating values, more than two of them (a sort of a mask, `(x > 1).int()` or cast to
    float, groups hits and misses: its ties are the answer)."""
    import torch

    if not isinstance(source, torch.Tensor) or not source.is_floating_point() or source.numel() < 3:
        return False
    return int(torch.unique(source.detach()).numel()) > 2


def _copies(inputs: list[Any]) -> list[Any]:
    import torch

    return [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]


def _release() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()  # the copies' memory back before the candidate's next call


def _key(t: Any) -> tuple[int, int, tuple[int, ...], tuple[int, ...]]:
    """A tensor's place: the same storage, offset, shape and strides are the same indices, whichever
    Python object holds them."""
    return (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), tuple(t.stride()))


# How a selecting op's indices lie over what it selected from: built from the op's arguments (by
# name) and the tensor it selected from, into the `TieSet` that judges a kernel's index there
# (run/tolerance.py `_same_selection`: in range, selecting the value the reference's index selects)
Layout = Callable[[dict[str, Any], Any], TieSet]


def _reduced(given: dict[str, Any], source: Any) -> TieSet:
    """kthvalue, median and mode over a dim: one index per slice, along the dim if kept."""
    return TieSet(source, given.get("dim"), bool(given.get("keepdim", False)), False)


def _permuted(given: dict[str, Any], source: Any) -> TieSet:
    """sort and topk: a permutation (of a prefix) along the dim, no index repeated."""
    return TieSet(source, given.get("dim"), True, True)


def _scanned(given: dict[str, Any], source: Any) -> TieSet:
    """cummax and cummin: at each place the index of a maximum (minimum) of the prefix along the dim,
    in the source's shape, never past its own place."""
    return TieSet(source, given.get("dim"), True, False, prefix=True)


def _plane_set(flat: Any, num_lead: int, shape: tuple[int, ...], within: Any) -> TieSet:
    """Max pooling with indices (max_pool2d/3d_with_indices, adaptive_max_pool2d/3d; the 1d pools are
    these on an unsqueezed input): each index of `shape` is a flat place in its plane of the input,
    `flat` the input as (*lead, places). The tie set holds the planes seen from every output place
    (a broadcast view, no copy), selected from along the last dim; `within` (`_windows`) holds each
    index to its output place's window."""
    lead, places = tuple(flat.shape[:num_lead]), flat.shape[-1]
    across = flat.reshape(*lead, *(1,) * (len(shape) - num_lead - 1), places)
    return TieSet(across.expand(*shape[:-1], places), -1, True, False, within=within)


def _per_dim(value: Any, nd: int, default: list[int]) -> list[int]:
    """A pooling argument (an int, or a list of one or `nd` ints; empty: `default`) per spatial dim."""
    if isinstance(value, int):
        return [value] * nd
    values = [int(v) for v in value] if value is not None else []
    if not values:
        return list(default)
    return values * nd if len(values) == 1 else values


def _windows(
    given: dict[str, Any], adaptive: bool, plane: tuple[int, ...], out_shape: tuple[int, ...]
) -> Any:
    """Which of a pool's indices lie inside their output place's window: `plane` the input's spatial
    sizes, `out_shape` the indices' shape as the op made them (spatial dims last). Max pooling: the
    window of output o along a dim starts at o·stride − padding and takes every dilation-th place,
    kernel_size of them; adaptive pooling: [⌊o·L/O⌋, ⌈(o+1)·L/O⌉) (PyTorch's pooling kernels)."""
    import torch

    nd = len(plane)
    out_sp = out_shape[-nd:]
    if not adaptive:
        kernel = _per_dim(given.get("kernel_size"), nd, [1] * nd)
        stride = _per_dim(given.get("stride"), nd, kernel)
        padding = _per_dim(given.get("padding", 0), nd, [0] * nd)
        dilation = _per_dim(given.get("dilation", 1), nd, [1] * nd)

    def within(cc: Any) -> Any:
        full = cc.reshape(out_shape)
        ok = torch.ones(full.shape, dtype=torch.bool, device=full.device)
        coords, rest = [], full
        for size in reversed(plane):  # the flat place unravelled, row-major over the plane
            coords.append(torch.remainder(rest, size))
            rest = torch.div(rest, size, rounding_mode="floor")
        coords.reverse()
        for i in range(nd):
            axis = len(out_shape) - nd + i
            o = torch.arange(out_sp[i], device=full.device).view(
                [-1 if d == axis else 1 for d in range(full.dim())]
            )
            h = coords[i]
            if adaptive:
                size, outs = plane[i], out_sp[i]
                ok &= (h >= torch.div(o * size, outs, rounding_mode="floor")) & (
                    h < torch.div((o + 1) * size + outs - 1, outs, rounding_mode="floor")
                )
            else:
                rel = h - (o * stride[i] - padding[i])
                ok &= (rel >= 0) & (torch.remainder(rel, dilation[i]) == 0) & (rel < kernel[i] * dilation[i])
        return ok.reshape(cc.shape)

    return within


class _Selections:
    """A TorchDispatchMode (made lazily: torch is imported late) that refuses random ops and keeps,
    by the indices' place (`_key`), the `TieSet` of every selecting op: the tensor it selected
    from (a copy: the forward may change it later), the dim, and how its indices are laid out.
    Pooling indices squeezed along an output dim (`F.max_pool1d` squeezes the 2d op's) keep theirs."""

    def __new__(cls) -> Any:
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode

        aten = torch.ops.aten
        # op -> its layout (the indices are its second result). Argmax, argmin and max/min over a dim
        # are not here: PyTorch documents the first of equal values as their answer, so only near-ties
        # that the nudges break may go the other way
        selecting: dict[Any, Layout] = {
            aten.kthvalue.default: _reduced,
            aten.median.dim: _reduced,
            aten.nanmedian.dim: _reduced,
            aten.mode.default: _reduced,
            aten.sort.default: _permuted,
            aten.sort.stable: _permuted,  # unless stable=True: then one order is right
            aten.topk.default: _permuted,
            aten.cummax.default: _scanned,
            aten.cummin.default: _scanned,
        }
        # pooling op -> how many trailing dims of its input a plane has (`_plane_set`)
        pools = {
            aten.max_pool2d_with_indices.default: 2,
            aten.max_pool3d_with_indices.default: 3,
            aten.adaptive_max_pool2d.default: 2,
            aten.adaptive_max_pool3d.default: 3,
        }
        adaptive_pools = (aten.adaptive_max_pool2d.default, aten.adaptive_max_pool3d.default)
        squeezes = (aten.squeeze.dim, aten.squeeze.dims)

        class Selections(TorchDispatchMode):  # type: ignore[no-untyped-call]
            def __init__(self) -> None:
                super().__init__()  # type: ignore[no-untyped-call]
                # place -> (tie set, the indices as the op made them)
                self.sets: dict[tuple[int, int, tuple[int, ...], tuple[int, ...]], tuple[TieSet, Any]] = {}
                self.held: list[Any] = []  # every recorded indices tensor: no other takes its place
                # a pool's indices, by place -> (its input as (*lead, places), how many lead dims, and
                # its window rule on the indices as the op made them)
                self.planes: dict[
                    tuple[int, int, tuple[int, ...], tuple[int, ...]], tuple[Any, int, Any]
                ] = {}

            def record(self, indices: Any, tie: TieSet) -> None:
                self.sets[_key(indices)] = (tie, indices.detach().clone())
                self.held.append(indices)

            def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
                kwargs = kwargs or {}
                if torch.Tag.nondeterministic_seeded in func.tags and not seeded_but_off(func, args, kwargs):
                    raise NoExact(f"the reference's forward draws random numbers ({func.name()})")
                out = func(*args, **kwargs)
                if (func in selecting or func in pools) and _ties_are_rounding(args[0]):
                    indices, source = out[1], args[0].detach().clone()
                    given = {
                        a.name: (args[k] if k < len(args) else kwargs.get(a.name, a.default_value))
                        for k, a in enumerate(func._schema.arguments)
                    }
                    given.update(kwargs)
                    if not isinstance(indices, torch.Tensor) or given.get("stable") is True:
                        return out
                    if func in selecting:
                        self.record(indices, selecting[func](given, source))
                    else:
                        num_lead = source.dim() - pools[func]
                        flat = source.reshape(*source.shape[:num_lead], -1)
                        adaptive = func in adaptive_pools
                        within = _windows(
                            given, adaptive, tuple(source.shape[num_lead:]), tuple(indices.shape)
                        )
                        self.planes[_key(indices)] = (flat, num_lead, within)
                        self.record(indices, _plane_set(flat, num_lead, tuple(indices.shape), within))
                elif func in squeezes and isinstance(out, torch.Tensor) and _key(args[0]) in self.planes:
                    flat, num_lead, within = self.planes[_key(args[0])]
                    # a view without some output dims of size 1 (`F.max_pool1d`'s squeeze): the same
                    # flat places, seen from fewer dims (the window rule reads them in the op's shape);
                    # not where a lead dim went
                    if tuple(out.shape[:num_lead]) == tuple(flat.shape[:num_lead]) and out.dim() > num_lead:
                        self.record(out, _plane_set(flat, num_lead, tuple(out.shape), within))
                return out

        return Selections()
