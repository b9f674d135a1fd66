"""Dynamic anti-cheat checks: pure functions the GPU worker calls around `ModelNew.forward`.

Each `check_*` takes what the worker observed and returns `Diagnostic`s (stage `correctness`,
codes `dynamic.*`, docs/diagnostics.md); an ERROR among them means the candidate is not
`correct` whatever `allclose` says. Most work on CPU tensors too (and are tested there):

- `check_inputs_unchanged`   — inputs equal their pre-call clones (zeroing inputs makes the
  reference agree with anything; KernelBench `zero_out_kernel`);
- `check_outputs_plain`      — outputs are plain dense `torch.Tensor`s with storage, on the
  reference's device and dtype (lazy subclasses compute when the checker reads them);
- `check_no_aliasing`        — outputs share no memory with the inputs or the reference's outputs;
- `check_not_constant`       — outputs vary with the input when the reference's do, and are not
  all zero when the reference's are not (KernelBench #165: zeros passed softmax);
- `check_deterministic`      — two calls on the same inputs agree (garbage read after a failed
  launch, or stale memory, differs between calls);
- `check_own_kernels_did_work` — the candidate's own kernels (those compiled into its library,
  kernel_symbols.own_kernels) ran, and PyTorch or library kernels did no work beyond glue (fills,
  copies, scalar-sized ops); names in PyTorch's and vendor libraries' namespaces are never own;
  `check_kernels_ran` is its variant on kernel names parsed from the source; `profile_kernels`
  collects the runs, in a `profiler_session`;
- `check_streams`            — GPU-side evidence of side streams: a profiled forward's kernels ran
  on a stream other than the current one (the judge's check; host load cannot trigger it);
- `check_side_stream`        — host wall time with a device-wide sync is not far above the
  event time on the current stream (the older in-process worker's check);
- `check_thread_count`, `check_guarded_intact` — no new OS threads, timers/comparison
  functions not replaced.

The judge (run/judge.py) calls the output checks on what it fetched and the others inside the
runner process (run/runner.py), where they are observations native code could forge. Not
covered: an exploit that behaves honestly while observed by an in-process profiler — its
outputs are still checked on unprofiled calls. This module imports torch; only the worker
processes import it.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

import torch
from cudice.verifier.source.result import Diagnostic, Location, Severity, Stage

# Kernels PyTorch launches to fill, zero or copy memory (the profiler's `Memcpy`/`Memset` records,
# `FillFunctor`, `direct_copy_kernel_cuda`, `CatArrayBatchedCopy`): glue around the work, not work.
_GLUE_KERNEL = re.compile(r"(?i)fill|memset|memcpy|copy(?!sign)|zero_|CatArrayBatched")

# Foreign compute kernels are negligible (glue) below these (negligible_foreign): the bound is
# about what a scalar op on a 0-d tensor (`sum / n` on the host side of a reduction) takes on a
# data-center GPU. No absolute allowance: ATen computing a whole small ReLU takes about as long as
# such a scalar op.
GLUE_KERNEL_MAX_US = 2.0
GLUE_SHARE = 0.05

# Names that are never the candidate's (reserved_kernel_name): PyTorch's namespaces (torch builds
# its CUB as `at_cuda_detail::cub`, its flash attention as `pytorch_flash`) and vendor libraries'
# kernels, by namespace, by prefix (cuBLAS's `sm90_xmma_*`, `ampere_sgemm_*`, `nvjet_*`,
# `gemv2T_kernel_val`, `gemmSN_TN_kernel`, `splitKreduce_kernel`) or by a vendor type in the
# template arguments (`cublasGemvParams<...>`). Plain `gemm`/`gemv` prefixes are left to the
# candidate: honest kernels are often called `gemm_kernel`.
_RESERVED: tuple[tuple[re.Pattern[str], str, str], ...] = (
    (
        # demangled, or mangled as the profiler leaves symbols over 1,024 characters
        re.compile(
            r"^(?:\(anonymous namespace\)::)?(?:at|c10|at_cuda_detail|torch|caffe2|pytorch_flash)::"
            r"|^_ZN(?:2at|3c10|14at_cuda_detail|5torch|6caffe2|13pytorch_flash)(?=\d|I)"
        ),
        "ATen",
        "PyTorch's namespaces `at::`, `c10::`, `at_cuda_detail::`, `torch::`, `caffe2::`",
    ),
    (
        re.compile(
            r"^(?:cublas\w*::|sm\d+_xmma|(?:ampere|volta|turing|maxwell|hopper|blackwell)_\w*gemm|"
            r"nvjet_|gemv(?:2[NT]|NSP|x)|gemm(?:SN_|k1_)|splitKreduce_kernel)|cublas"
        ),
        "cuBLAS",
        "cuBLAS's kernel names",
    ),
    (re.compile(r"^(?:cudnn\w*::|cask\w*::|xmma\w*::)|cudnn"), "cuDNN", "cuDNN's kernel names"),
    (re.compile(r"(?i)cutlass"), "CUTLASS", "CUTLASS's kernel names"),
    (
        re.compile(r"^(?:cusparse|cufft|curand|magma)|cusparse|cufft"),
        "a CUDA library",
        "vendor library names",
    ),
)


def _diag(code: str, message: str, where: Location | None, severity: Severity = Severity.ERROR) -> Diagnostic:
    return Diagnostic(severity, message, code, Stage.CORRECTNESS, where)


def _keys(m: Mapping[Any, object]) -> list[Any]:
    """A mapping's keys in one order that does not depend on insertion order, by their text (the
    runner's channel carries keys as strings)."""
    return sorted(m, key=str)


def flatten_outputs(out: object) -> list[object]:
    """A forward's result as a flat list (tensor → [tensor]; tuples/lists flattened in order, dict
    values by sorted key, so that two dicts with the same keys pair up whatever their order)."""
    if isinstance(out, (list, tuple)):
        return [x for o in out for x in flatten_outputs(o)]
    if isinstance(out, Mapping):
        return [x for k in _keys(out) for x in flatten_outputs(out[k])]
    return [out]


def output_structure(out: object) -> str:
    """How a forward's result nests, leaves written `x`: `(x, {'a': x})`. Tuples and lists read
    alike (a caller indexes both the same way); dicts by sorted key, keys as text."""
    if isinstance(out, (list, tuple)):
        inner = ", ".join(output_structure(o) for o in out)
        return f"({inner},)" if len(out) == 1 else f"({inner})"
    if isinstance(out, Mapping):
        return "{" + ", ".join(f"{str(k)!r}: {output_structure(out[k])}" for k in _keys(out)) + "}"
    return "x"


def snapshot_inputs(inputs: Sequence[object]) -> list[object]:
    """Clones of the tensor inputs (other values kept as they are), taken before the call."""
    return [x.detach().clone() if isinstance(x, torch.Tensor) else x for x in inputs]


def bit_identical(a: torch.Tensor, b: torch.Tensor) -> bool:
    """The same shape, dtype and values (NaNs compare equal to NaNs in the same place); `b` is
    compared on `a`'s device."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    b = b.to(a.device)
    return bool(
        torch.equal(a, b)
        or (
            a.is_floating_point()
            and torch.equal(a.isnan(), b.isnan())
            and torch.equal(a.nan_to_num(0.0), b.nan_to_num(0.0))
        )
    )


def check_inputs_unchanged(
    before: Sequence[object], after: Sequence[object], where: Location | None = None
) -> list[Diagnostic]:
    """Inputs must be bit-identical after the call (NaNs compare equal to NaNs in the same place)."""
    diags: list[Diagnostic] = []
    for i, (b, a) in enumerate(zip(before, after, strict=True)):
        if not isinstance(b, torch.Tensor) or not isinstance(a, torch.Tensor):
            continue
        if not bit_identical(b, a):
            diags.append(
                _diag(
                    "dynamic.input_mutated",
                    f"ModelNew.forward changed input #{i} in place: the reference would then run on "
                    "altered data (zeroed inputs make any output match). Write only to outputs.",
                    where,
                )
            )
    return diags


# immutable, exactly these types (no subclass): nothing to compute when read; compared exactly, a
# float within the tolerance (run/tolerance.py `compare_outputs`)
_PLAIN_SCALARS = (int, float, bool, str, type(None))


def check_outputs_plain(
    outputs: object, reference: object, where: Location | None = None
) -> list[Diagnostic]:
    """Outputs are plain, dense, materialised tensors like the reference's (type, layout, device, dtype),
    or plain Python ints, floats, bools, strings or None where the reference has one of the same type."""
    diags: list[Diagnostic] = []
    outs, refs = flatten_outputs(outputs), flatten_outputs(reference)
    for i, o in enumerate(outs):
        r = refs[i] if i < len(refs) else None
        if type(o) in _PLAIN_SCALARS and type(o) is type(r):
            continue  # a number (a count, a flag) where the reference returns one: compared by value
        if type(o) is not torch.Tensor:
            diags.append(
                _diag(
                    "dynamic.output_not_plain_tensor",
                    f"output #{i} is a `{type(o).__module__}.{type(o).__qualname__}`, not a plain "
                    "`torch.Tensor`: a subclass or lazy object can compute when the checker reads it, "
                    "outside the timed call. Return the tensor the kernel wrote.",
                    where,
                )
            )
            continue
        if o.layout is not torch.strided or o.is_meta or (o.numel() > 0 and o.data_ptr() == 0):
            diags.append(
                _diag(
                    "dynamic.output_not_plain_tensor",
                    f"output #{i} is not a dense tensor with storage (layout {o.layout}, device {o.device}).",
                    where,
                )
            )
        elif isinstance(r, torch.Tensor) and o.device != r.device:
            diags.append(
                _diag(
                    "dynamic.output_not_plain_tensor",
                    f"output #{i} is on {o.device}, the reference's on {r.device}.",
                    where,
                )
            )
        if isinstance(r, torch.Tensor) and o.dtype != r.dtype:
            diags.append(
                _diag(
                    "dynamic.output_dtype_mismatch",
                    f"output #{i} has dtype {o.dtype}, the reference's {r.dtype}: a lower precision "
                    "can pass the tolerance while computing less.",
                    where,
                )
            )
    return diags


def _span(t: torch.Tensor) -> tuple[int, int] | None:
    if not _dense(t) or t.numel() == 0:  # sparse/meta/subclass outputs are reported by check_outputs_plain
        return None
    st = t.untyped_storage()
    return st.data_ptr(), st.data_ptr() + st.nbytes()


def _overlaps(a: tuple[int, int] | None, b: tuple[int, int] | None) -> bool:
    return a is not None and b is not None and a[0] < b[1] and b[0] < a[1]


def check_no_aliasing(
    outputs: object, inputs: Sequence[object], reference_outputs: object = (), where: Location | None = None
) -> list[Diagnostic]:
    """No output's storage overlaps an input's or a (still alive) reference output's storage.

    The worker must keep the reference outputs alive while the candidate runs: then an
    overlap means the candidate returned (a view of) the reference's result instead of its own.
    """
    diags: list[Diagnostic] = []
    ins = [_span(x) for x in inputs if isinstance(x, torch.Tensor)]
    refs = [_span(x) for x in flatten_outputs(reference_outputs) if isinstance(x, torch.Tensor)]
    for i, o in enumerate(flatten_outputs(outputs)):
        if not isinstance(o, torch.Tensor):
            continue
        s = _span(o)
        if any(_overlaps(s, x) for x in ins):
            diags.append(
                _diag(
                    "dynamic.output_aliases_input",
                    f"output #{i} shares memory with an input: the kernel wrote into (or returned) its "
                    "input, so the reference's own result or the next trial is corrupted. Allocate a "
                    "fresh output (`torch::empty_like`).",
                    where,
                )
            )
        if any(_overlaps(s, x) for x in refs):
            diags.append(
                _diag(
                    "dynamic.output_aliases_reference",
                    f"output #{i} shares memory with the reference's output: the candidate returns the "
                    "reference's result instead of computing its own.",
                    where,
                )
            )
    return diags


def _dense(x: object) -> TypeGuard[torch.Tensor]:
    # `type(...) is`: a subclass's attribute access may run the candidate's code (__torch_function__)
    return type(x) is torch.Tensor and x.layout is torch.strided and not x.is_meta


def _floating(t: torch.Tensor) -> bool:
    return t.is_floating_point() or t.is_complex()


def discrete(t: object) -> TypeGuard[torch.Tensor]:
    """A tensor of integers or bools (indices, a mask): compared exactly, up to the reference's
    ties (run/tolerance.py), never within a tolerance."""
    return isinstance(t, torch.Tensor) and not _floating(t)


def _is_constant(t: torch.Tensor) -> bool:
    if t.numel() <= 1:
        return False
    flat = t.reshape(-1)
    return bool(torch.equal(flat, flat[:1].expand_as(flat)))


# a reference output "varies" when its spread is above this share of its root mean square: below,
# it may differ only by its own rounding (a per-row variance of rows that differ by a shift, an
# fp32 E[x^2] - E[x]^2), and a kernel that computes it more accurately is single-valued honestly
VARIES_SHARE = 1e-3


def _differ(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two outputs of the same shape differ by more than `VARIES_SHARE` of their root mean
    square (their finite elements; a NaN or Inf in one place but not the other differs)."""
    if torch.equal(a, b):
        return False
    if a.is_complex():
        a, b = torch.view_as_real(a), torch.view_as_real(b)
    x, y = a.reshape(-1).double(), b.reshape(-1).double()
    finite = torch.isfinite(x) & torch.isfinite(y)
    if not bool((torch.isfinite(x) == torch.isfinite(y)).all()):
        return True
    if not bool(finite.any()):
        return False
    x, y = x[finite], y[finite]
    rms = float(torch.maximum(x.abs(), y.abs()).pow(2).mean().sqrt())
    return float((x - y).abs().max()) > VARIES_SHARE * rms


def _varies(t: torch.Tensor) -> bool:
    if t.numel() <= 1 or _is_constant(t):
        return False
    if not (t.is_floating_point() or t.is_complex()):
        return True
    v = t.reshape(-1)
    v = v[torch.isfinite(v)] if not t.is_complex() else v[torch.isfinite(torch.view_as_real(v)).all(-1)]
    if v.numel() <= 1:
        return bool(t.numel() > 1 and not _is_constant(t))
    spread = float((v - v[:1]).abs().max())
    rms = float(v.abs().double().pow(2).mean().sqrt())
    return spread > VARIES_SHARE * rms


def check_not_constant(
    candidate_trials: Sequence[object], reference_trials: Sequence[object], where: Location | None = None
) -> list[Diagnostic]:
    """Per trial: all-zero or single-valued outputs where the reference's are not (single-valued:
    where the reference's spread is above `VARIES_SHARE` of its rms, not its rounding alone);
    across trials: identical outputs for different inputs where the reference's differ. Floating
    outputs only: a discrete one was compared exactly, up to the reference's own ties
    (run/reference_ties.py), where an honest argmax that keeps the last of saturated maxima is
    constant while the reference's first index varies."""
    diags: list[Diagnostic] = []
    cands = [[x for x in flatten_outputs(c) if _dense(x) and _floating(x)] for c in candidate_trials]
    refs = [[x for x in flatten_outputs(r) if _dense(x) and _floating(x)] for r in reference_trials]
    for k in range(min((len(c) for c in cands), default=0)):
        for t, (c, r) in enumerate(zip(cands, refs, strict=False)):
            if k >= len(r) or c[k].shape != r[k].shape or c[k].numel() == 0:
                continue
            if not bool(c[k].any()) and bool(r[k].any()):
                diags.append(
                    _diag(
                        "dynamic.zero_output",
                        f"output #{k} is all zeros in trial {t} while the reference's is not (max |ref| = "
                        f"{float(r[k].abs().max()):.3g}): with tiny reference values an all-zero output "
                        "passes `allclose` (KernelBench #165).",
                        where,
                    )
                )
                break
            if _is_constant(c[k]) and _varies(r[k]):
                diags.append(
                    _diag(
                        "dynamic.constant_output",
                        f"output #{k} holds a single value in trial {t} while the reference's varies "
                        f"(by more than {VARIES_SHARE:g} of its root mean square).",
                        where,
                    )
                )
                break
        pairs = [(c[k], r[k]) for c, r in zip(cands, refs, strict=False) if k < len(c) and k < len(r)]
        if len(pairs) >= 2:
            cand_same = all(
                p[0].shape == pairs[0][0].shape and torch.equal(p[0], pairs[0][0]) for p in pairs[1:]
            )
            # the reference's trials count as different only beyond their rounding (a softmax's
            # row sums are 1 +- 1 ulp for every input; an exact 1.0 kernel is not "constant")
            ref_same = all(
                p[1].shape == pairs[0][1].shape and not _differ(p[1], pairs[0][1]) for p in pairs[1:]
            )
            if cand_same and not ref_same:
                diags.append(
                    _diag(
                        "dynamic.constant_output",
                        f"output #{k} is identical for all {len(pairs)} trials although the inputs (and the "
                        "reference's outputs) differ: the result does not depend on the input.",
                        where,
                    )
                )
    return diags


def check_deterministic(
    first: object,
    second: object,
    atol: float,
    rtol: float,
    where: Location | None = None,
    scales: Sequence[float] = (),
) -> list[Diagnostic]:
    """Two calls on the same inputs agree within the tolerance (NaN only where the other has NaN).
    `atol` is multiplied by `scales[i]` for output `i` where given: the judge passes the root mean
    square of the reference's output for those inputs (run/tolerance.py `finite_scale`), as in the
    comparison with the reference, since an honest kernel whose atomic adds land in another order
    differs between calls by rounding, which an absolute 1e-2 rejected on outputs of magnitude 1e5.
    Floating outputs only: a tolerance means nothing for indices or masks, which the judge holds to
    the reference's answer on both calls instead (run/judge_correctness.py `_second_call_discrete`)."""
    for i, (a, b) in enumerate(zip(flatten_outputs(first), flatten_outputs(second), strict=False)):
        if not (_dense(a) and _dense(b)) or not _floating(a):
            continue
        scaled = atol * scales[i] if i < len(scales) else atol
        if a.shape != b.shape or not bool(torch.allclose(a, b, atol=scaled, rtol=rtol, equal_nan=True)):
            return [
                _diag(
                    "dynamic.nondeterministic",
                    f"output #{i} differs between two calls on the same inputs: the kernel reads memory it "
                    "did not write (e.g. after a failed launch) or races. Initialise and synchronise.",
                    where,
                )
            ]
    return []


@dataclass(frozen=True, slots=True)
class KernelRun:
    """One GPU kernel the profiler saw: its (demangled) name, device time in microseconds and the
    profiler's id of the CUDA stream it ran on (-1: unknown)."""

    name: str
    device_time_us: float
    stream: int = -1


def kernel_identifier(profiled_name: str) -> str:
    """`void ns::softmax_kernel<512>(float const*, ...)` → `softmax_kernel`."""
    name = profiled_name.strip()
    name = re.sub(r"^(?:void|__global__)\s+", "", name)
    name = re.split(r"[(<]", name, maxsplit=1)[0]
    return name.rsplit("::", 1)[-1].strip()


def check_kernels_ran(
    runs: Sequence[KernelRun],
    defined: Iterable[str],
    max_foreign_share: float = 0.5,
    where: Location | None = None,
) -> list[Diagnostic]:
    """The source-name variant of `check_own_kernels_did_work`, for callers without the built library
    (the in-process worker): a kernel is own iff its bare identifier is one of `defined` (names of
    the `__global__` functions in the source) and its name is not reserved. Weaker: it misses
    kernels the candidate compiles without writing them (CUB, templates from headers)."""
    own = set(defined)

    def is_own(name: str) -> bool:
        return kernel_identifier(name) in own and reserved_kernel_name(name) is None

    desc = f"this file's kernels: {_listed(sorted(own))}" if own else "this file defines no kernel"
    return _did_work(runs, is_own, desc, max_foreign_share, where, notes=[])


def check_own_kernels_did_work(
    runs: Sequence[KernelRun],
    own_kernels: Iterable[str],
    max_foreign_share: float = 0.0,
    where: Location | None = None,
) -> list[Diagnostic]:
    """The candidate's own kernels ran during a profiled forward and did its work.

    `runs`: the kernels of one profiled forward (names as the profiler reports them, device µs).
    `own_kernels`: `kernel_symbols.own_kernels(library)` — the kernels compiled into the built
    library, in the profiler's form. A run is own iff its name is in that set and not reserved
    (`reserved_kernel_name`: PyTorch's namespaces and vendor-library names are never own, since a
    kernel of the same name launched by PyTorch could not be told apart). Of the rest, fills,
    copies and negligible kernels (`negligible_foreign`) are glue; what remains is foreign work:
    an error above `max_foreign_share` of forward's GPU time or when no own kernel ran, else a
    warning. `max_foreign_share=0.0` is the judge's default policy (any foreign work is an error, so
    padding with a spin kernel of one's own does not help); `lenient` passes 0.5.

    Codes: `dynamic.kernel_not_launched` (no own kernel ran), `dynamic.torch_kernels_did_work`.
    A library that compiles no kernel is checked too: then nothing is own."""
    own = {_normal(n) for n in own_kernels}
    notes = sorted(
        {
            f"`{_short(r.name)}` is compiled into your library but named like a kernel of {label} "
            f"({why}), so it counts as theirs: give it a name of your own outside that namespace"
            for r in runs
            if _normal(r.name) in own
            for label, why in [reserved_kernel_name(r.name) or ("", "")]
            if label
        }
    )

    def is_own(name: str) -> bool:
        return _normal(name) in own and reserved_kernel_name(name) is None

    shown = sorted({_short(n) for n in own if not n.startswith("_Z")})
    desc = f"your library compiles {_listed(shown)}" if shown else "your library compiles no kernel"
    return _did_work(runs, is_own, desc, max_foreign_share, where, notes)


def reserved_kernel_name(profiled_name: str) -> tuple[str, str] | None:
    """(library, reason) when a kernel name belongs to PyTorch or a vendor library, else None.

    Such names are never the candidate's: a kernel compiled into the candidate's library under one
    of them is indistinguishable in the profiler from the library's own (fails closed)."""
    qualified = _qualified(profiled_name)
    for pattern, library, why in _RESERVED:
        if pattern.search(qualified):
            return library, why
    return None


def negligible_foreign(foreign: Sequence[KernelRun], total_us: float) -> bool:
    """Foreign compute kernels too small to have done the work: scalar-sized ops on tiny tensors,
    each under `GLUE_KERNEL_MAX_US` and together under `GLUE_SHARE` of forward's GPU time.

    A small share alone is not enough: a spin kernel of one's own can make a cuBLAS matmul 0.03 %
    of forward (corpus `adv_rt_spin_padding`); such a kernel takes microseconds itself."""
    spent = sum(r.device_time_us for r in foreign)
    if total_us <= 0:
        return not foreign  # no durations recorded: nothing shows the kernels were small
    tiny = all(r.device_time_us < GLUE_KERNEL_MAX_US for r in foreign)
    return tiny and spent < GLUE_SHARE * total_us


def _did_work(
    runs: Sequence[KernelRun],
    is_own: Callable[[str], bool],
    own_desc: str,
    max_foreign_share: float,
    where: Location | None,
    notes: list[str],
) -> list[Diagnostic]:
    # 1. split forward's kernels: own, glue (fills, copies), foreign compute
    mine = [r for r in runs if is_own(r.name)]
    others = [r for r in runs if not is_own(r.name)]
    foreign = [r for r in others if not _GLUE_KERNEL.search(_qualified(r.name))]
    total_us = sum(r.device_time_us for r in runs)
    diags: list[Diagnostic] = []
    note = "".join(f" Note: {n}." for n in notes)
    # 2. an own kernel must have run
    if not mine:
        ran = _listed(sorted({_short(r.name) for r in runs})) if runs else "none"
        diags.append(
            _diag(
                "dynamic.kernel_not_launched",
                f"no kernel of the candidate ran during ModelNew.forward ({own_desc}; kernels that ran: "
                f"{ran}): the CUDA code is a decoy or forward never reaches it. Launch your kernel from "
                f"the extension function forward calls.{note}",
                where,
            )
        )
    # 3. foreign compute beyond glue did (part of) the work
    if not foreign or negligible_foreign(foreign, total_us):
        return diags
    foreign_us = sum(r.device_time_us for r in foreign)
    share = foreign_us / total_us if total_us > 0 else 1.0
    mine_us = sum(r.device_time_us for r in mine)
    theirs = _breakdown(foreign, total_us, with_library=True)
    yours = (
        f"your kernels {_breakdown(mine, total_us)} {_pct(mine_us / total_us if total_us > 0 else 0.0)}"
        if mine
        else "no kernel of yours"
    )
    did = (
        f"PyTorch or library kernels did {_pct(share)} of forward's GPU time ({foreign_us:.1f} µs of "
        f"{total_us:.1f} µs): {theirs}; {yours}."
    )
    if not mine or share > max_foreign_share:
        rule = (
            f"Under `lenient` they may take up to {_pct(max_foreign_share)}, and your kernels must run. "
            "Move the computation into your kernel."
            if max_foreign_share > 0
            else "The result must come from your kernels: beyond fills, copies and scalar-sized ops, "
            "any PyTorch or library compute in forward is an error under the default policy (padding "
            "the time with kernels of your own does not help). Move the computation into your kernel, "
            'or set static_policy="lenient" (library kernels up to 50 % of the time).'
        )
        diags.append(_diag("dynamic.torch_kernels_did_work", f"{did} {rule}{note}", where))
    else:
        diags.append(
            _diag(
                "dynamic.torch_kernels_did_work",
                f"{did} Allowed under `lenient` (up to {_pct(max_foreign_share)}).{note}",
                where,
                Severity.WARNING,
            )
        )
    return diags


def _breakdown(runs: Sequence[KernelRun], total_us: float, with_library: bool = False) -> str:
    """Kernels by short name, largest first: ATen's `vectorized_elementwise_kernel` 87 %, ..."""
    spent: dict[str, float] = {}
    for r in runs:
        label = _short(r.name)
        if with_library:
            label = f"{_library_of(r.name)}'s `{label}`"
        else:
            label = f"`{label}`"
        spent[label] = spent.get(label, 0.0) + r.device_time_us
    top = sorted(spent.items(), key=lambda kv: -kv[1])
    parts = [f"{k} {_pct(v / total_us) if total_us > 0 else ''}".rstrip() for k, v in top[:4]]
    if len(top) > 4:
        parts.append(f"and {len(top) - 4} more")
    return ", ".join(parts) if with_library else _listed([k for k, _ in top])


def _library_of(profiled_name: str) -> str:
    reserved = reserved_kernel_name(profiled_name)
    return reserved[0] if reserved is not None else "a library"


def _pct(share: float) -> str:
    """87 %; 0.4 % or 0.03 % below 1 % (a share never reads as 0 % while it is not)."""
    if 0 < share < 0.01:
        return f"{share * 100:.2g} %"
    return f"{share * 100:.0f} %"


def _listed(names: Sequence[str], limit: int = 5) -> str:
    shown = ", ".join(f"`{n.strip('`')}`" for n in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _normal(name: str) -> str:
    return " ".join(name.split())


def _qualified(profiled_name: str) -> str:
    """The name without its `void ` return type: `at::native::k<4>(int)`."""
    return re.sub(r"^(?:void|__global__)\s+", "", _normal(profiled_name))


def _short(profiled_name: str) -> str:
    return kernel_identifier(profiled_name) or _normal(profiled_name)[:60]


def check_streams(
    runs: Sequence[KernelRun], current_stream: int, where: Location | None = None
) -> list[Diagnostic]:
    """GPU-side evidence of side streams: kernels of forward recorded on a stream other than the
    current one (`current_stream`, the stream of a marker kernel launched just before the call).
    Host load cannot produce this (unlike a wall-clock gap); unknown streams (-1) are ignored."""
    if current_stream < 0:
        return []
    other = sorted({r.stream for r in runs if r.stream >= 0 and r.stream != current_stream})
    if not other:
        return []
    names = ", ".join(sorted({kernel_identifier(r.name) for r in runs if r.stream in other})[:5])
    return [
        _diag(
            "dynamic.side_stream",
            f"kernels of forward ({names}) ran on stream(s) {', '.join(map(str, other))}, not on the current "
            f"stream {current_stream}: work on another stream escapes stream timing and ordering.",
            where,
        )
    ]


def profiler_session() -> Any:
    """A profiler session over CPU and (where CUDA is available) CUDA activity: the Kineto session
    `torch.profiler.profile(activities=[CPU, CUDA])` opens, without that class's first use's import
    of `torch._inductor`. Its `prepare_trace` asks `hasattr(torch, "_inductor")`, and torch's lazy
    submodules make that an import of inductor, dynamo and sympy (and Triton where installed):
    1.1 s on the 2-core CPU box, about all of the 3.4-3.7 s the runners' profiler warm-up took on an
    H100 (bench/runner_start.py). A context manager; after it, `function_events` holds what
    `torch.profiler.profile.events()` returns."""
    from torch.autograd import profiler

    return profiler.profile(
        use_cpu=True, use_device="cuda" if torch.cuda.is_available() else None, use_kineto=True
    )


def profile_kernels(fn: Callable[..., Any], args: Sequence[object]) -> list[KernelRun]:
    """Run `fn(*args)` once in a `profiler_session` and list the CUDA kernels it launched (GPU only)."""
    with profiler_session() as prof:
        fn(*args)
        torch.cuda.synchronize()
    runs: list[KernelRun] = []
    for evt in prof.function_events:
        if str(getattr(evt, "device_type", "")).endswith("CUDA") and evt.name:
            us = float(getattr(evt, "device_time", None) or getattr(evt, "cuda_time", 0.0) or 0.0)
            runs.append(KernelRun(evt.name, us))
    return runs


def measure_stream_escape(
    fn: Callable[..., Any], args: Sequence[object], repeats: int = 3
) -> tuple[float, float]:
    """(event_ms, synced_wall_ms), minima over `repeats` calls (GPU only).

    `event_ms` spans the call on the current stream, waited for with the end event alone;
    `synced_wall_ms` is host time from before the call until a device-wide synchronize returns.
    """
    best_event, best_wall = float("inf"), float("inf")
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        t0 = time.perf_counter()
        start.record()
        fn(*args)
        end.record()
        end.synchronize()  # current stream only
        event_ms = start.elapsed_time(end)
        torch.cuda.synchronize()  # every stream
        wall_ms = (time.perf_counter() - t0) * 1000
        best_event, best_wall = min(best_event, event_ms), min(best_wall, wall_ms)
    return best_event, best_wall


def check_side_stream(
    event_ms: float,
    synced_wall_ms: float,
    min_gap_ms: float = 0.5,
    where: Location | None = None,
    baseline_gap_ms: float = 0.0,
) -> list[Diagnostic]:
    """Work that only a device-wide sync waits for ran on another stream (or thread).

    `baseline_gap_ms` is the same wall-minus-event gap measured for the PyTorch reference in
    the same process: host noise (a loaded CPU, slow synchronisation) widens every call's gap,
    and only what the candidate adds beyond the reference's gap counts as hidden work.
    """
    own_wall = synced_wall_ms - max(baseline_gap_ms, 0.0)
    if own_wall - event_ms > min_gap_ms and event_ms < 0.5 * own_wall:
        return [
            _diag(
                "dynamic.side_stream",
                f"the call took {synced_wall_ms:.3f} ms until the device was idle but only "
                f"{event_ms:.3f} ms on the current stream (the PyTorch reference's gap: "
                f"{baseline_gap_ms:.3f} ms): work ran on another stream or thread, hidden from stream "
                "timing.",
                where,
            )
        ]
    return []


def count_threads() -> int:
    """OS threads of this process (native `std::thread`s included; Linux /proc)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        import threading

        return threading.active_count()


def check_thread_count(before: int, after: int, where: Location | None = None) -> list[Diagnostic]:
    """Compare `count_threads()` before and after the candidate's (warmed-up) calls."""
    if after > before:
        return [
            _diag(
                "dynamic.thread_spawned",
                f"the process had {after - before} more thread(s) after ModelNew ran: work deferred to a "
                "background thread escapes the timed call.",
                where,
            )
        ]
    return []


def _guarded() -> dict[str, object]:
    objs: dict[str, object] = {
        "time.perf_counter": time.perf_counter,
        "time.time": time.time,
        "time.monotonic": time.monotonic,
        "torch.allclose": torch.allclose,
        "torch.isclose": torch.isclose,
        "torch.equal": torch.equal,
        "torch.testing.assert_close": torch.testing.assert_close,
        "torch.cuda.synchronize": torch.cuda.synchronize,
        "torch.cuda.Event": torch.cuda.Event,
    }
    for attr in ("elapsed_time", "record", "synchronize", "query", "wait"):
        objs[f"torch.cuda.Event.{attr}"] = getattr(torch.cuda.Event, attr, None)
    return objs


def snapshot_guarded() -> dict[str, object]:
    """The timing/comparison functions the verifier relies on (take it before importing the candidate)."""
    return _guarded()


def check_guarded_intact(before: Mapping[str, object], where: Location | None = None) -> list[Diagnostic]:
    """Whether any function recorded by `snapshot_guarded()` was replaced since (compared by identity)."""
    now = _guarded()
    changed = sorted(k for k, v in before.items() if now.get(k) is not v)
    if changed:
        return [
            _diag(
                "dynamic.timer_patched",
                f"the candidate replaced {', '.join(changed)}: patched timers or comparisons fake the "
                "measurement or the correctness check.",
                where,
            )
        ]
    return []


def poison_allocator(nbytes: int, device: torch.device | str) -> None:
    """Fill `nbytes` of the caching allocator's free memory with NaN: an output the kernel never
    writes then reads NaN (caught by the correctness check), not stale correct values."""
    buf = torch.full((max(nbytes // 4, 1),), float("nan"), dtype=torch.float32, device=device)
    del buf
