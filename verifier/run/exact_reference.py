"""The reference computed in float64: the comparison's second opinion on an fp32 output (run/tolerance.py).

`exact_outputs(model, inputs, ref_out, hold)` returns the reference's outputs for `inputs`
computed in float64, or raises `tolerance.NoExact` saying why that run could differ from the fp32
run that gave `ref_out` by more than rounding. Only then is the fp32 reference's distance to it
its own rounding error, which `tolerance._against_exact` widens the bounds by; anything else
would let a wrong output through. Refused:

1. a floating input, parameter or buffer that is not float32 (float64 would upcast fp16 inputs,
   and the "own error" would be fp16's rounding);
2. a forward that does not reproduce `ref_out` bit for bit from an fp32 copy made beside the
   float64 one (both from the module as it is now; the reference itself is left as it is): a
   forward that changes the module's state (a counter buffer) or is not deterministic;
3. under a dispatch mode (`_Watch`) in both runs: an op that draws random numbers
   (`torch.Tag.nondeterministic_seeded`: rand, dropout, bernoulli, multinomial, with any
   generator); a floating result of another precision than the run's (autocast, `.half()`,
   `.float()` inside the forward); and discrete results that differ between the two runs — a
   checksum of every bool or integer tensor (comparisons, masks, argmax, indices), of every
   thresholding op's output, in place or not (round, floor, ceil, trunc, frac, sign, sgn,
   floor_divide, threshold, hardshrink, softshrink, copysign, heaviside, histc, bucketize,
   division with a rounding mode), of the wraps of remainder and fmod, and of every non-float
   scalar read on the host (`if t.sum() > 0`, `torch.equal`). A branch or a mask decided on a
   value that rounds differently makes the two runs different computations. Random ops asked to
   draw nothing (dropout with p = 0 or outside training, as in scaled dot product attention)
   are let through.

`hold()` is entered around the GPU work (the judge's shared lease, run/judge_state.py `shared`).
The copies live only for the call. It runs only when an fp32 output has failed against the fp32
reference, so it costs nothing on the common path.

Not covered: Python-level branches on the dtype (`if x.dtype == torch.float32`) and constants
taken from it (`torch.finfo(x.dtype).eps`), and branches on a float read on the host
(`if x.sum().item() > 0`): tolerance.py's `OWN_MAX_SHARE` caps what such a difference can widen.
Complex parameters (refused by rule 1: `.double()` leaves them complex64). The memory a run
needs (two copies of the weights, float64 activations) is not checked beforehand: running out
of it refuses the second opinion.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable
from typing import Any

from cudice.verifier.run.dynamic_checks import bit_identical
from cudice.verifier.run.dynamic_checks import flatten_outputs as _flatten
from cudice.verifier.run.tolerance import NoExact


def exact_outputs(
    model: Any, inputs: list[Any], ref_out: Any, hold: Callable[[], contextlib.AbstractContextManager[Any]]
) -> Any:
    """`model`'s outputs for `inputs` in float64; `NoExact` with the reason where that run is not
    the fp32 run that gave `ref_out` up to rounding (module docstring)."""
    import torch

    if not isinstance(model, torch.nn.Module):
        raise NoExact("the reference is not a torch.nn.Module")
    tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
    state = [*model.parameters(), *model.buffers()]
    other = sorted(
        {str(t.dtype) for t in tensors + state if t.is_floating_point() or t.is_complex()} - {"torch.float32"}
    )
    if other:
        raise NoExact(f"the reference's inputs or weights are {', '.join(other)}, not float32 alone")
    with hold(), torch.no_grad():
        try:
            m32 = copy.deepcopy(model)
            m64 = copy.deepcopy(model).double()
        except Exception as exc:
            raise NoExact(f"the reference cannot be copied ({type(exc).__name__})") from exc
        try:
            out32, log32 = _run(m32, [_copy(x, None) for x in inputs], torch.float32)
            if not _same(_flatten(out32), _flatten(ref_out)):
                raise NoExact(
                    "the reference's forward gives another result on a copy of itself (it changes "
                    "its own state, or it is not deterministic)"
                )
            args = [_copy(x, torch.float64) for x in inputs]
            out64, log64 = _run(m64, args, torch.float64)
            if len(log32) != len(log64) or (
                log32 and not torch.equal(torch.stack(log32).cpu(), torch.stack(log64).cpu())
            ):
                raise NoExact(
                    "the reference decides something on its values (a comparison, a mask, a rounding, "
                    "an index) that comes out differently in float64"
                )
        except NoExact:
            raise
        except Exception as exc:  # an op with no float64 kernel, memory
            raise NoExact(
                f"the reference failed in float64 ({type(exc).__name__}: {str(exc)[:200]})"
            ) from exc
        finally:
            del m32, m64
            if torch.cuda.is_available():
                torch.cuda.empty_cache()  # the copies' memory back before the candidate's next call
        return out64


def _copy(x: Any, floating: Any) -> Any:
    """A copy of input `x` for one run (the judge's own inputs are never handed over): floating
    tensors in `floating` (None: as they are)."""
    import torch

    if not isinstance(x, torch.Tensor):
        return x
    if floating is not None and x.is_floating_point():
        return x.to(floating)
    return x.clone()


def _run(model: Any, args: list[Any], dtype: Any) -> tuple[Any, list[Any]]:
    import torch

    watch = _Watch(dtype)
    with watch:
        out = model(*args)
    if watch.other:
        # computed in 16 bits inside: refused. Where every floating output is a cast up from a
        # 16-bit result (`(a.half() @ b.half()).float()`), that format is what the output is held
        # to (tolerance.LOWER_REL_NORM_BOUND); a 16-bit op elsewhere (a mask) moves no bound
        # (the format each output was cast from, not the first 16-bit op seen: a bf16 mask beside an
        # fp16 matmul leaves that output held to fp16; outputs cast from both formats, to fp16's)
        floats = [t for t in _flatten(out) if isinstance(t, torch.Tensor) and t.is_floating_point()]
        held = [watch.cast_up.get(id(t), (None, "")) for t in floats]
        cast = bool(floats) and all(h[0] is t for h, t in zip(held, floats, strict=True))
        formats = {h[1] for h in held}
        lower = (formats.pop() if len(formats) == 1 else "float16") if cast else ""
        raise NoExact(f"the reference's forward computes in {watch.other}", lower=lower)
    return out, watch.log


def _same(a: list[object], b: list[object]) -> bool:
    import torch

    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            if not bit_identical(x, y):
                return False
        elif x != y:
            return False
    return True


def _rounding_ops() -> frozenset[Any]:
    """Ops with floating results that jump where their input crosses a threshold: their results
    are logged whole (a tie or a threshold decided differently in float64 changes them)."""
    import torch

    aten = torch.ops.aten
    return frozenset(
        [
            aten.round,
            aten.floor,
            aten.ceil,
            aten.trunc,
            aten.frac,
            aten.sign,
            aten.sgn,
            aten.floor_divide,
            aten.threshold,
            aten.hardshrink,
            aten.softshrink,
            aten.copysign,
            aten.heaviside,
            aten.histc,
            aten.bucketize,
        ]
    )


def _base_name(packet: Any) -> str:
    """An op's name without its namespace and without the in-place mark: `aten::round_` -> `round`."""
    return str(packet._qualified_op_name).split("::")[-1].rstrip("_")


def _quotient_ops() -> frozenset[Any]:
    """`remainder`, `fmod`: the result is continuous between wraps, so only the wraps are logged
    (the quotient `(a - result) / b`, rounded)."""
    import torch

    aten = torch.ops.aten
    return frozenset([aten.remainder, aten.fmod])


def seeded_but_off(func: Any, args: Any, kwargs: dict[str, Any]) -> bool:
    """A random op asked to draw nothing: dropout with p = 0 or outside training (scaled dot
    product attention's kernels carry the random tag for their dropout), RReLU in eval mode."""
    try:
        schema = func._schema.arguments
    except AttributeError:
        return False
    given = {
        a.name: (args[k] if k < len(args) else kwargs.get(a.name, a.default_value))
        for k, a in enumerate(schema)
    }
    given.update(kwargs)
    for name in ("dropout_p", "p"):
        if name in given:
            return given[name] == 0 or any(given.get(t) is False for t in ("train", "training"))
    return any(given.get(t) is False for t in ("train", "training"))


def _checksum(t: Any) -> Any:
    """Two float64 numbers on `t`'s device that differ, almost surely, when `t`'s values do."""
    import torch

    v = t.detach().reshape(-1).to(torch.float64)
    w = torch.arange(v.numel(), device=v.device, dtype=torch.float64).remainder_(65521).add_(1)
    shape = float(hash(tuple(t.shape)) % 65521)
    return torch.stack([v.sum() + shape, (v * w).sum()])


class _Watch:
    """A TorchDispatchMode (made lazily: torch is imported late) that refuses random ops and
    floating results of another precision than `dtype`, and logs checksums of discrete results."""

    def __new__(cls, dtype: Any) -> Any:
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils._pytree import tree_leaves

        rounding, quotients = _rounding_ops(), _quotient_ops()
        local_scalar = torch.ops.aten._local_scalar_dense.default
        host_results = {torch.ops.aten.equal.default, torch.ops.aten.is_nonzero.default}
        rounding_names = {_base_name(op) for op in rounding}
        quotient_names = {_base_name(op) for op in quotients}

        class Watch(TorchDispatchMode):  # type: ignore[no-untyped-call]
            def __init__(self) -> None:
                super().__init__()  # type: ignore[no-untyped-call]
                self.log: list[Any] = []
                # a 16-bit floating result (the run is then refused; `lower` says which format),
                # and the fp32 tensors cast from a 16-bit one, by id (the outputs are checked)
                self.other: str = ""
                # held, not only their ids: a freed tensor's id is given to the next one; with the
                # 16-bit format each was cast from
                self.cast_up: dict[int, tuple[Any, str]] = {}

            def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
                kwargs = kwargs or {}
                if torch.Tag.nondeterministic_seeded in func.tags and not seeded_but_off(func, args, kwargs):
                    raise NoExact(f"the reference's forward draws random numbers ({func.name()})")
                name = _base_name(func.overloadpacket)  # in-place variants too: round_ is round
                # the dividend as it was (an in-place remainder_ overwrites it)
                before = (
                    args[0].clone() if name in quotient_names and isinstance(args[0], torch.Tensor) else None
                )
                out = func(*args, **kwargs)
                if func is local_scalar or func in host_results:
                    if not isinstance(out, float):  # a bool or int read on the host decides something
                        self.log.append(torch.tensor([float(out), 0.0], dtype=torch.float64))
                    return out
                if before is not None and isinstance(out, torch.Tensor):
                    self.log.append(_checksum(torch.round((before - out) / args[1])).cpu())
                    return out
                if name == "div" and kwargs.get("rounding_mode", args[2] if len(args) > 2 else None):
                    self.log.append(_checksum(out).cpu())
                    return out
                for t in tree_leaves(out):
                    if not isinstance(t, torch.Tensor):
                        continue
                    if t.is_floating_point() or t.is_complex():
                        real = t.real.dtype if t.is_complex() else t.dtype
                        if t.dim() > 0 and real != dtype:
                            lower = str(real).removeprefix("torch.")
                            if lower not in ("float16", "bfloat16") or dtype != torch.float32:
                                raise NoExact(
                                    f"the reference's forward computes in {t.dtype} ({func.name()})"
                                )
                            self.other = self.other or f"{t.dtype} ({func.name()})"
                        elif name in ("_to_copy", "to", "type_as", "copy") and t.dim() > 0:
                            source = [
                                str(a.dtype).removeprefix("torch.")
                                for a in tree_leaves((args, kwargs))
                                if isinstance(a, torch.Tensor) and a.dtype in (torch.float16, torch.bfloat16)
                            ]
                            if source:
                                self.cast_up[id(t)] = (t, source[0])
                        if name in rounding_names:
                            self.log.append(_checksum(t).cpu())
                    else:
                        self.log.append(_checksum(t).cpu())
                return out

        return Watch()
