"""The reference on slightly moved inputs: the comparison's second opinion on a discrete output.

An integer or bool output (argmax, indices, a mask) is held to equality. Where the reference's own
answer is decided by a tie or a near-tie, an honest kernel may decide it the other way: two
fp32 values that round to the same number (random draws do, about once in 10^7 pairs), an argmax
that keeps the last of equal maxima, a mask over a value computed in another summation order.
`nudged_outputs(model, inputs, hold)` runs the reference four more times, each on a copy of
itself, with every floating input multiplied by `1 + u * NUDGE_REL` and then by `1 - u * NUDGE_REL`
(`u` uniform in [-1, 1], drawn per element from the OS), for two draws of `u`, so that each tie
is broken both ways. One pair leaves a tie of two equal fp32 values unbroken when their two `u`
round alike, about 5e-4 of the time (`|u_i - u_j| * 2^-12` under fp32's step of 2^-23); two
pairs, about 2.5e-7. `tolerance.compare_outputs` then accepts an element of a discrete output
that differs from the reference only where the reference's own result changed between these runs
and the kernel's value is one of the values the reference gave there, and only for up to
`NUDGE_MAX_SHARE` of the output (run/tolerance.py `_excused_by_nudge`). The judge asks for them
on a trial's mismatch and, during timing, for each call whose discrete output missed its digest.

What a kernel can gain from it: at most a value the reference itself gives for inputs moved by
2^-12 of their values, at elements where the answer is that close to a tie. A kernel that decides
in lower precision (a bf16 argmax) differs at far more elements than that and fails.

`hold()` is entered around the GPU work (the judge's shared lease). The runs happen only after a
discrete output has failed, so they cost nothing on the common path; each costs four reference
forwards and, per run, a copy of the reference. Not covered: 16-bit inputs
(a nudge of 2^-12 is below their rounding step for bf16, about one step for fp16: ties among them
stay ties, and a kernel must break them as PyTorch does); inputs that are not tensors; ties created
inside the forward from values that are not inputs (weights). A reference with random ops gives
other values on every run: its discrete outputs get the same excuse, bounded by the share.
"""

from __future__ import annotations

import contextlib
import copy
import secrets
from collections.abc import Callable
from typing import Any

from cudice.verifier.run.dynamic_checks import flatten_outputs
from cudice.verifier.run.tolerance import NoExact

NUDGE_REL = 2.0**-12  # how far each floating input value moves, relative to itself, at most
NUDGE_DRAWS = 2  # draws of `u`, each run both ways
Hold = Callable[[], contextlib.AbstractContextManager[Any]]  # the judge's shared lease


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
    """The reference's flattened outputs on the nudges of `inputs` (module docstring),
    each run on its own copy of `model` (the reference's state stays as the trials left it);
    `NoExact` with the reason where there are none."""
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
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
    return runs
