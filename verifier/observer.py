"""`CandidateObserver`: the dynamic anti-cheat checks wired as four hooks for the run worker.

The worker's correctness loop calls, in order:

    obs = CandidateObserver(kernels=defined_kernel_names(doc), atol=..., rtol=..., where=...)
    obs.before_import()                                  # before the candidate's module runs
    for each trial:
        inputs_before = obs.snapshot(inputs)            # before ModelNew.forward
        out = model_new(*inputs)
        obs.after_call(inputs_before, inputs, out, ref_out)   # ref_out still alive here
    obs.after_trials(model_new, last_inputs)            # GPU extras: determinism, profiler, streams, threads
    diags = obs.diagnostics()                           # any ERROR → the verdict is not `correct`

Every check is a pure function of `dynamic_checks.py`; this class only keeps what they need
between calls (clones, per-trial outputs, snapshots) so the worker's call sites stay one line each.
It does not decide the verdict, time anything or catch exceptions: a check that raises is a bug
in the verifier, not the candidate's fault, and must surface as such.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from cudice.verifier import dynamic_checks as dc
from cudice.verifier.result import Diagnostic, Location


def defined_kernel_names(cuda_texts: Iterable[str]) -> list[str]:
    """Names of the `__global__` kernels in the candidate's CUDA sources (for the profiler check)."""
    from cudice.verifier.static_cuda import blank_comments_and_strings, find_kernels

    names: list[str] = []
    for text in cuda_texts:
        names += [n for n, _ in find_kernels(blank_comments_and_strings(text)) if n not in names]
    return names


class CandidateObserver:
    """Collects dynamic findings across one candidate's correctness trials (see module docstring)."""

    def __init__(self, *, kernels: Sequence[str], atol: float, rtol: float, where: Location | None = None,
                 profile: bool = True) -> None:
        self.kernels, self.atol, self.rtol, self.where, self.profile = list(kernels), atol, rtol, where, profile
        self._diags: list[Diagnostic] = []
        self._guarded: dict[str, object] | None = None
        self._cand_outputs: list[object] = []
        self._ref_outputs: list[object] = []

    def before_import(self) -> None:
        """Record the timing/comparison functions before the candidate's code can replace them."""
        self._guarded = dc.snapshot_guarded()

    def snapshot(self, inputs: Sequence[object]) -> list[object]:
        return dc.snapshot_inputs(inputs)

    def after_call(self, inputs_before: Sequence[object], inputs_after: Sequence[object], output: object,
                   reference_output: object) -> None:
        """Per trial: inputs untouched, outputs plain and not aliasing inputs or the (live) reference output."""
        w = self.where
        self._add(dc.check_inputs_unchanged(inputs_before, inputs_after, w))
        self._add(dc.check_outputs_plain(output, reference_output, w))
        self._add(dc.check_no_aliasing(output, inputs_after, reference_output, w))
        self._cand_outputs.append(_detach(output))
        self._ref_outputs.append(_detach(reference_output))

    def after_trials(self, candidate: Callable[..., Any], inputs: Sequence[object]) -> None:
        """After the trials: outputs vary like the reference's; on a GPU also determinism, which
        kernels ran, side-stream work and new threads (each call on fresh clones of `inputs`)."""
        w = self.where
        self._add(dc.check_not_constant(self._cand_outputs, self._ref_outputs, w))
        on_gpu = any(isinstance(x, torch.Tensor) and x.is_cuda for x in inputs)
        threads_before = dc.count_threads()
        first = candidate(*dc.snapshot_inputs(inputs))
        second = candidate(*dc.snapshot_inputs(inputs))
        self._add(dc.check_deterministic(first, second, self.atol, self.rtol, w))
        if on_gpu:
            torch.cuda.synchronize()
            if self.profile and self.kernels:
                runs = dc.profile_kernels(candidate, dc.snapshot_inputs(inputs))
                self._add(dc.check_kernels_ran(runs, self.kernels, where=w))
            event_ms, wall_ms = dc.measure_stream_escape(candidate, dc.snapshot_inputs(inputs))
            self._add(dc.check_side_stream(event_ms, wall_ms, where=w))
        self._add(dc.check_thread_count(threads_before, dc.count_threads(), w))
        if self._guarded is not None:
            self._add(dc.check_guarded_intact(self._guarded, w))

    def diagnostics(self) -> list[Diagnostic]:
        """All findings so far, each (code, message) once."""
        seen: set[tuple[str, str]] = set()
        out = []
        for d in self._diags:
            if (d.code, d.message) not in seen:
                seen.add((d.code, d.message))
                out.append(d)
        return out

    def _add(self, diags: list[Diagnostic]) -> None:
        self._diags += diags


def _detach(out: object) -> object:
    if isinstance(out, torch.Tensor):
        return out.detach().clone() if type(out) is torch.Tensor else out
    if isinstance(out, (list, tuple)):
        return type(out)(_detach(o) for o in out) if type(out) in (list, tuple) else out
    return out
