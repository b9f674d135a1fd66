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
- `check_kernels_ran`        — the candidate's own kernels ran, and PyTorch kernels did not do
  the work (a decoy kernel defined but not launched); `profile_kernels` collects the names;
- `check_streams`            — GPU-side evidence of side streams: a profiled forward's kernels ran
  on a stream other than the current one (the judge's check; host load cannot trigger it);
- `check_side_stream`        — host wall time with a device-wide sync is not far above the
  event time on the current stream (the older in-process worker's check);
- `check_thread_count`, `check_guarded_intact` — no new OS threads, timers/comparison
  functions not replaced.

The judge (judge.py) calls the output checks on what it fetched and the others inside the
runner process (candidate.py), where they are observations native code could forge. Not
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
from cudice.verifier.result import Diagnostic, Location, Severity, Stage

# Kernels PyTorch launches for allocation-side glue (fills, copies), not for computing.
_GLUE_KERNEL = re.compile(r"(?i)fill|memset|memcpy|copy|zero_|CatArrayBatched")


def _diag(code: str, message: str, where: Location | None, severity: Severity = Severity.ERROR) -> Diagnostic:
    return Diagnostic(severity, message, code, Stage.CORRECTNESS, where)


def flatten_outputs(out: object) -> list[object]:
    """A forward's result as a flat list (tensor → [tensor]; tuples/lists/dict values flattened)."""
    if isinstance(out, (list, tuple)):
        return [x for o in out for x in flatten_outputs(o)]
    if isinstance(out, Mapping):
        return [x for o in out.values() for x in flatten_outputs(o)]
    return [out]


def snapshot_inputs(inputs: Sequence[object]) -> list[object]:
    """Clones of the tensor inputs (other values kept as they are), taken before the call."""
    return [x.detach().clone() if isinstance(x, torch.Tensor) else x for x in inputs]


def check_inputs_unchanged(
    before: Sequence[object], after: Sequence[object], where: Location | None = None
) -> list[Diagnostic]:
    """Inputs must be bit-identical after the call (NaNs compare equal to NaNs in the same place)."""
    diags: list[Diagnostic] = []
    for i, (b, a) in enumerate(zip(before, after, strict=True)):
        if not isinstance(b, torch.Tensor) or not isinstance(a, torch.Tensor):
            continue
        same = (
            b.shape == a.shape
            and b.dtype == a.dtype
            and bool(
                torch.equal(b, a)
                or (
                    b.is_floating_point()
                    and torch.equal(b.isnan(), a.isnan())
                    and torch.equal(b.nan_to_num(0.0), a.nan_to_num(0.0))
                )
            )
        )
        if not same:
            diags.append(
                _diag(
                    "dynamic.input_mutated",
                    f"ModelNew.forward changed input #{i} in place: the reference would then run on "
                    "altered data (zeroed inputs make any output match). Write only to outputs.",
                    where,
                )
            )
    return diags


def check_outputs_plain(
    outputs: object, reference: object, where: Location | None = None
) -> list[Diagnostic]:
    """Outputs are plain, dense, materialised tensors like the reference's (type, layout, device, dtype)."""
    diags: list[Diagnostic] = []
    outs, refs = flatten_outputs(outputs), flatten_outputs(reference)
    for i, o in enumerate(outs):
        r = refs[i] if i < len(refs) else None
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


def _is_constant(t: torch.Tensor) -> bool:
    if t.numel() <= 1:
        return False
    flat = t.reshape(-1)
    return bool(torch.equal(flat, flat[:1].expand_as(flat)))


def check_not_constant(
    candidate_trials: Sequence[object], reference_trials: Sequence[object], where: Location | None = None
) -> list[Diagnostic]:
    """Per trial: all-zero or single-valued outputs where the reference's are not; across trials:
    identical outputs for different inputs where the reference's differ."""
    diags: list[Diagnostic] = []
    cands = [[x for x in flatten_outputs(c) if _dense(x)] for c in candidate_trials]
    refs = [[x for x in flatten_outputs(r) if _dense(x)] for r in reference_trials]
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
            if _is_constant(c[k]) and not _is_constant(r[k]):
                diags.append(
                    _diag(
                        "dynamic.constant_output",
                        f"output #{k} holds a single value in trial {t} while the reference's varies.",
                        where,
                    )
                )
                break
        pairs = [(c[k], r[k]) for c, r in zip(cands, refs, strict=False) if k < len(c) and k < len(r)]
        if len(pairs) >= 2:
            cand_same = all(
                p[0].shape == pairs[0][0].shape and torch.equal(p[0], pairs[0][0]) for p in pairs[1:]
            )
            ref_same = all(
                p[1].shape == pairs[0][1].shape and torch.equal(p[1], pairs[0][1]) for p in pairs[1:]
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
    first: object, second: object, atol: float, rtol: float, where: Location | None = None
) -> list[Diagnostic]:
    """Two calls on the same inputs agree within the tolerance (NaN only where the other has NaN)."""
    for i, (a, b) in enumerate(zip(flatten_outputs(first), flatten_outputs(second), strict=False)):
        if not (_dense(a) and _dense(b)):
            continue
        if a.shape != b.shape or not bool(torch.allclose(a, b, atol=atol, rtol=rtol, equal_nan=True)):
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
    """The candidate's own kernels (names from its CUDA source) ran during forward, and PyTorch
    compute kernels (not fills/copies) took at most `max_foreign_share` of the GPU time.

    `max_foreign_share=0.0` (the judge's default policy) makes any PyTorch compute kernel an
    error, so padding the GPU time with a spin kernel of one's own does not help; the `lenient`
    policy passes 0.5 (PyTorch kernels below half of the time are a warning)."""
    own = set(defined)
    mine = [r for r in runs if kernel_identifier(r.name) in own]
    foreign = [r for r in runs if kernel_identifier(r.name) not in own and not _GLUE_KERNEL.search(r.name)]
    diags: list[Diagnostic] = []
    if own and not mine:
        ran = ", ".join(sorted({kernel_identifier(r.name) for r in runs})[:5]) or "none"
        diags.append(
            _diag(
                "dynamic.kernel_not_launched",
                f"none of this file's kernels ({', '.join(sorted(own))}) ran during ModelNew.forward "
                f"(kernels that ran: {ran}): the CUDA code is a decoy.",
                where,
            )
        )
    total = sum(r.device_time_us for r in mine + foreign)
    share = sum(r.device_time_us for r in foreign) / total if total > 0 else 0.0
    if foreign and (share > max_foreign_share or not mine or max_foreign_share == 0.0):
        names = ", ".join(sorted({kernel_identifier(r.name) for r in foreign})[:5])
        diags.append(
            _diag(
                "dynamic.torch_kernels_did_work",
                f"PyTorch/library kernels ({names}) took {share:.0%} of forward's GPU time: they, not the "
                "candidate's kernel, did the work.",
                where,
            )
        )
    elif foreign:
        names = ", ".join(sorted({kernel_identifier(r.name) for r in foreign})[:5])
        diags.append(
            _diag(
                "dynamic.torch_kernels_did_work",
                f"PyTorch kernels ({names}) also ran in forward ({share:.0%} of its GPU time).",
                where,
                Severity.WARNING,
            )
        )
    return diags


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


def profile_kernels(fn: Callable[..., Any], args: Sequence[object]) -> list[KernelRun]:
    """Run `fn(*args)` once under `torch.profiler` and list the CUDA kernels it launched (GPU only)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn(*args)
        torch.cuda.synchronize()
    runs: list[KernelRun] = []
    for evt in prof.events():
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
