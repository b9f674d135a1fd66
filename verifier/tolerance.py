"""Output comparison with a tolerance that follows the dtype and the output's magnitude.

An element passes when `|c - r| <= atol_eff + rtol_eff * |r|` (as `torch.testing.assert_close`),
where `rtol_eff = max(rtol, floor of the dtype)` and `atol_eff = atol * scale`, `scale` being the
root mean square of the reference output (at least the dtype's smallest normal number): an
absolute 1e-2 would accept `1e-6 * x` wherever every true value is below 1e-2 (a softmax over
65536 columns is ~1.5e-5: https://github.com/ScalingIntelligence/KernelBench/issues/165). On top,
the whole output must pass a relative-norm check at a quarter of what the element bound allows,
`||c - r||_2 <= (rtol_eff * ||r||_2 + atol_eff * sqrt(n)) / 4`, so an error spread evenly over all
elements just under the element tolerance (a systematic bias, a lower-precision computation) does
not pass either; honest fp32 kernels sit orders of magnitude below it.
Integer and boolean outputs must be equal. NaN or Inf in a candidate output never passes.

Not covered: ULP-level comparison, outputs whose reference is itself non-finite (the judge
skips such an input distribution instead of comparing).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# dtype name -> rtol floor: the rounding error of a few accumulations in that format
NORM_SHARE = 0.25
_RTOL_FLOOR = {"float16": 1e-3, "bfloat16": 1.6e-2, "float32": 0.0, "float64": 0.0}


@dataclass(frozen=True, slots=True)
class Comparison:
    ok: bool
    why: str
    max_abs_err: float
    max_rel_err: float
    rel_norm_err: float  # ||c - r|| / ||r|| over all outputs, worst one


def _flatten(out: object) -> list[object]:
    from cudice.verifier.dynamic_checks import flatten_outputs

    return flatten_outputs(out)


def compare_outputs(ref: Any, cand: Any, atol: float, rtol: float) -> Comparison:
    """Compare a forward's outputs (nested tuples/lists/dicts of tensors and plain values)."""
    import torch

    refs, cands = _flatten(ref), _flatten(cand)
    if len(refs) != len(cands):
        return Comparison(False, f"{len(cands)} outputs, the reference returns {len(refs)}", 0.0, 0.0, 0.0)
    max_abs = max_rel = max_norm = 0.0
    for i, (r, c) in enumerate(zip(refs, cands, strict=True)):
        if not isinstance(r, torch.Tensor) or not isinstance(c, torch.Tensor):
            if r != c:
                return Comparison(False, f"output {i} is {c!r}, expected {r!r}", max_abs, max_rel, max_norm)
            continue
        if tuple(c.shape) != tuple(r.shape):
            return Comparison(
                False,
                f"output {i} has shape {tuple(c.shape)}, expected {tuple(r.shape)}",
                max_abs,
                max_rel,
                max_norm,
            )
        if c.dtype != r.dtype:
            return Comparison(
                False, f"output {i} has dtype {c.dtype}, expected {r.dtype}", max_abs, max_rel, max_norm
            )
        if c.device != r.device:
            c = c.to(r.device)
        if not (r.is_floating_point() or r.is_complex()):
            if not torch.equal(c, r):
                bad = int((c != r).sum())
                return Comparison(
                    False,
                    f"output {i} differs from the reference in {bad} of {r.numel()} elements "
                    "(integer outputs must be equal)",
                    max_abs,
                    max_rel,
                    max_norm,
                )
            continue
        cf, rf = c.double(), r.double()
        if not bool(torch.isfinite(cf).all()):
            where = "where the reference is finite" if bool(torch.isfinite(rf).all()) else "(never accepted)"
            return Comparison(False, f"output {i} contains NaN/Inf {where}", max_abs, max_rel, max_norm)
        if cf.numel() == 0:
            continue
        name = str(r.dtype).removeprefix("torch.")
        tiny = float(torch.finfo(r.dtype).tiny) if r.is_floating_point() else 1e-300
        scale = max(float(rf.abs().pow(2).mean().sqrt()), tiny)
        atol_eff, rtol_eff = atol * scale, max(rtol, _RTOL_FLOOR.get(name, 0.0))
        diff = (cf - rf).abs()
        a = float(diff.max())
        rel = float(
            (diff / rf.abs().clamp_min(max(tiny, 1e-3 * scale))).max()
        )  # relative to 0.1% of rms at least
        ref_norm = float(torch.linalg.vector_norm(rf))
        norm = float(torch.linalg.vector_norm(cf - rf))
        rel_norm = norm / ref_norm if ref_norm > 0 else (0.0 if norm == 0 else float("inf"))
        max_abs, max_rel, max_norm = max(max_abs, a), max(max_rel, rel), max(max_norm, rel_norm)
        bad = int((diff > atol_eff + rtol_eff * rf.abs()).sum())
        if bad:
            return Comparison(
                False,
                (
                    f"output {i} differs from the reference: max |err| {a:.3g}, {bad} of {diff.numel()} "
                    f"elements beyond atol={atol_eff:.3g} (= {atol:g} x rms {scale:.3g}), "
                    f"rtol={rtol_eff:g}"
                ),
                max_abs,
                max_rel,
                max_norm,
            )
        if norm > NORM_SHARE * (rtol_eff * ref_norm + atol_eff * diff.numel() ** 0.5):
            return Comparison(
                False,
                (
                    f"output {i} differs from the reference: relative norm error {rel_norm:.3g} is "
                    f"above rtol={rtol_eff:g} (every element is off by a little)"
                ),
                max_abs,
                max_rel,
                max_norm,
            )
    return Comparison(True, "", max_abs, max_rel, max_norm)
