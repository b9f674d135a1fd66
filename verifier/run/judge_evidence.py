"""What the judge learns from the candidate's process besides its outputs (run/judge.py's evidence).

The profiled calls (`profile` in correctness, `profile_batch` in a timed repetition) and whose
kernels they show did the work (`kernel_evidence`); the runner's guard reports (`guards`); the
threads the candidate's runner gained, counted from /proc outside it (`thread_growth`); and the
profiler sessions of the reference's runner that keep the two runners' per-launch costs even
(`even_profiles`).

Contract: everything here can only add rejections. Profiler records and guard reports come from
the candidate's process and can be forged there, so they never make a verdict `correct`; a missing
profile on a GPU fails closed. Not covered: the checks themselves (run/dynamic_checks.py), what
native code hides from the profiler (docs/anticheat.md).
"""

from __future__ import annotations

import secrets
import time
from typing import Any

from cudice.verifier.run.judge_state import JudgeState, add_wall, ask, limit_s, reported_diagnostics
from cudice.verifier.run.judging import diag
from cudice.verifier.source.result import Diagnostic, Stage


def profile(st: JudgeState) -> list[Diagnostic]:
    t0 = time.perf_counter()
    rep, _ = ask(st, st.session.cand, {"op": "profile"}, Stage.CORRECTNESS)
    st.profiled_candidate += 1
    add_wall(st, "profile", t0)
    return kernel_evidence(st, rep)


def profile_batch(st: JudgeState, indices: list[int], flush_mib: int) -> list[Diagnostic]:
    """The kernels of an untimed batch (the same request as a timed one, profiled)."""
    # seals None: these sets were unsealed by the timed calls
    header = _batch_request(indices, None, flush_mib, profile=True)
    t0 = time.perf_counter()
    rep, _ = ask(st, st.session.cand, header, Stage.TIMING, deadline_s=limit_s(st, len(indices)))
    st.profiled_candidate += 1
    add_wall(st, "profile", t0)
    even_profiles(st, flush_mib)
    return kernel_evidence(st, rep)


def even_profiles(st: JudgeState, flush_mib: int) -> None:
    """As many profiler sessions in the reference's runner as in the candidate's, on staged set 0.

    A profiler session leaves CUPTI's callbacks on every later kernel launch of its process
    (https://github.com/pytorch/pytorch/issues/144455), so each one the candidate's runner ran
    makes its later calls slower; the reference's runner must carry the same cost for the
    difference of their call times to be the difference of the two forwards."""
    while st.profiled_reference < st.profiled_candidate:
        header = _batch_request([0], None, flush_mib, profile=True)
        ask(st, st.session.ref, header, Stage.TIMING, deadline_s=limit_s(st, 1))
        st.profiled_reference += 1


def _batch_request(
    indices: list[int], seals: list[int] | None, flush_mib: int, keys: list[int] | None = None, **flags: bool
) -> dict[str, Any]:
    """A `batch` request over staged sets `indices` (fresh digest keys unless given)."""
    return {
        "op": "batch",
        "sets": indices,
        "keys": keys if keys is not None else [secrets.randbits(64) for _ in indices],
        "seals": seals,
        "flush_mib": flush_mib,
        **flags,
    }


def kernel_evidence(st: JudgeState, rep: dict[str, Any]) -> list[Diagnostic]:
    """What a profiled call or batch says about whose kernels did the work; it can only reject.

    The records come from the candidate's process, so they never make a verdict `correct`: a
    missing profile fails closed (the evidence is required), a present one may reject."""
    from cudice.verifier.run import dynamic_checks as dyn

    if not rep.get("supported"):
        if not st.device.startswith("cuda"):
            return []
        why = rep.get("error") or "no reason given"
        return [
            diag(
                "dynamic.profiler_unavailable",
                f"The profiler gave no kernel records in the candidate's process ({why}): which kernels "
                "did the work cannot be shown, so the kernel is not counted "
                "correct. Run where CUPTI is allowed (e.g. NVreg_RestrictProfilingToAdminUsers=0).",
                Stage.CORRECTNESS,
                st.where,
            )
        ]
    runs = [
        dyn.KernelRun(str(k[0]), float(k[1]), int(k[2]))
        for k in rep.get("kernels", [])
        if isinstance(k, list) and len(k) == 3
    ]
    if st.own_kernels_error:
        return [
            diag(
                "dynamic.profiler_unavailable",
                f"The kernels compiled into the candidate's library could not be listed "
                f"({st.own_kernels_error}), so whose kernels did the work cannot be shown.",
                Stage.CORRECTNESS,
                st.where,
            )
        ]
    found = dyn.check_own_kernels_did_work(runs, st.own_kernels, 0.5 if st.lenient else 0.0, st.where)
    return found + dyn.check_streams(runs, int(rep.get("marker_stream", -1)), st.where)


def guards(st: JudgeState) -> list[Diagnostic]:
    t0 = time.perf_counter()
    rep, _ = ask(st, st.session.cand, {"op": "guards"}, Stage.CORRECTNESS)
    add_wall(st, "guards", t0)
    return reported_diagnostics(st.session.cand, rep)


def thread_growth(st: JudgeState) -> list[Diagnostic]:
    """Threads the candidate's runner gained since it was ready, beyond what the reference's gained.

    Counted from /proc, outside the runner, so the candidate cannot hide a thread it started at
    import, in `__init__` or from native code."""
    grown = {
        link.role: link.threads() - link.threads_at_ready
        for link in st.session.links()
        if link.threads_at_ready
    }
    extra = grown.get("candidate", 0) - max(grown.get("reference", 0), 0)
    if extra <= 0:
        return []
    return [
        diag(
            "dynamic.thread_spawned",
            f"The candidate's process runs {extra} more thread(s) than when it started (seen from "
            "outside the process, beyond the reference's runner): work on another thread "
            "escapes the timed call. "
            "Launch all work from forward on the calling thread.",
            Stage.TIMING,
            st.where,
        )
    ]
