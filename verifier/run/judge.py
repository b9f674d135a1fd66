"""The judge: `python -m cudice.verifier.run.judge --result-fd FD [--cache-dir DIR] [--no-timing]`,
job on stdin.

The process that holds the verdict. It never executes the candidate's code: two runner
processes (run/runner_link.py → run/runner.py, inside the OS boundary of run/boundary.py) serve `ModelNew`
and, for timing under identical conditions, the reference's `Model`. The judge keeps the
reference, the inputs and their secret seeds, the comparison, the clock and the verdict, and
writes the result (a dict of `VerifyResult` fields) to `FD`, a pipe the parent created.
The runners start while the job is still on its way (a warm spare for the persistent runner).

Phases: 1. torch, precision pinned (no TF32), the reference built after a secret seed;
2. the runners load their models after the same seed (their `load_inline` builds here, through
the cache); 3. correctness: per trial a fresh secret seed and one input distribution
(run/inputs.py), the reference run here, the candidate's outputs fetched and compared (run/tolerance.py),
in-runner observations, one randomly chosen trial profiled; then a repeated call (determinism),
constancy across trials, guards; 4. timing (run/judge_timing.py): the reference's time per call
by CUDA events in the judge (as an in-process harness measures it; the reference is trusted code),
the candidate's as that time plus the difference of the two runners' per-call times by the judge's clock. Each
call is one binary message of a stream, timed from the message to its answer: it runs on a fresh
input set staged sealed before the clock (run/seal.py) and unsealed inside it, and its answer must
carry a keyed digest of its outputs (run/witness.py), checked against the reference's, so calls can
neither overlap nor end after their answer; two outputs of each repetition are compared in full
afterwards. Both runners do
the same work around each call (round trip, unsealing, digest), so it cancels in the difference.
Timed work runs alone on the GPU (run/gpu_lease.py) once a probe finds no other process's work queued
on it; threads are counted from /proc outside the runners.

Where the phases live: run/judge_state.py (the session, the state every phase shares, the
requests to a runner), run/judge_load.py (1 and 2), run/judge_correctness.py (3),
run/judge_timing.py with its clock in run/judge_clock.py (4), run/judge_evidence.py (profiles,
guards, threads). This module runs them in order (`judge`) and is the process's entry point
(`main`); it re-exports `Session`, `promised_fidelity`, `interval_too_wide`, `estimates_disagree` and
`bias_too_large`.

What the judge still trusts from the candidate's process: nothing for a verdict of `correct` or
for a time. Profiler records, guard reports and in-runner observations can add rejections only;
they come from the candidate's process and can be forged there (docs/anticheat.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from cudice.verifier.run.judge_correctness import correctness
from cudice.verifier.run.judge_load import Reference, load_runners, reference
from cudice.verifier.run.judge_state import JudgeState, Session, alone, new_state, release_memory
from cudice.verifier.run.judge_timing import (
    bias_too_large,
    estimates_disagree,
    interval_too_wide,
    promised_fidelity,
    timing,
)
from cudice.verifier.run.judging import Stop, crash_result, write_result
from cudice.verifier.source.result import Diagnostic, Stage, Verdict

__all__ = [
    "Session",
    "bias_too_large",
    "estimates_disagree",
    "interval_too_wide",
    "judge",
    "main",
    "promised_fidelity",
]


def judge(job: dict[str, Any], session: Session) -> dict[str, Any]:
    """Run one verification job; returns VerifyResult fields as a dict (never raises for bad code)."""
    walls: dict[str, float] = {}
    out: dict[str, Any] = {"stage_wall_s": walls}
    diags: list[Diagnostic] = []
    try:
        _run(new_state(job, session, out, diags, walls), timed=not job.get("skip_timing"))
    except Stop as stop:
        out.update(verdict=stop.verdict.value, stage=stop.stage.value, error=stop.error)
        diags += stop.diagnostics
    out["diagnostics"] = [d.to_dict() for d in diags]
    return out


def _run(st: JudgeState, *, timed: bool) -> None:
    """The phases in order, each one's wall time recorded; the last one sets the verdict."""
    t = time.perf_counter()
    ref = reference(st)
    st.walls["init"] = time.perf_counter() - t
    # 2. the runners load their models after the same seed (same parameters as the reference)
    t = time.perf_counter()
    load_runners(st, ref.init, ref.seed, timed=timed)
    st.walls["load"] = time.perf_counter() - t
    # the retry of a run that ran out of GPU memory beside others holds the GPU from here on (not
    # through the load: the builds a load asks for take CPU time, and no one would wait on them);
    # waiting at most a third of the run's time for it, else it runs as any run does
    wait_s = st.config.timeout_s / 3
    with alone(st, wait_s) if st.config.run_alone else contextlib.nullcontext():
        _measure(st, ref, timed=timed)


def _measure(st: JudgeState, ref: Reference, *, timed: bool) -> None:
    """Phases 3 and 4, after the runners' load."""
    # 3. correctness
    t = time.perf_counter()
    st.out["stage"] = Stage.CORRECTNESS.value
    last_ref = correctness(st, ref)
    st.walls["correctness"] = time.perf_counter() - t
    if not timed:
        raise Stop(Verdict.CORRECT, Stage.CORRECTNESS, [])
    release_memory(st, Stage.CORRECTNESS)  # the trials' tensors, before the timing's sets
    # 4. timing by the judge's clock
    t = time.perf_counter()
    st.out["stage"] = Stage.TIMING.value
    timing(st, ref.module, ref.model, last_ref)
    st.walls["timing"] = time.perf_counter() - t
    st.out.update(verdict=Verdict.CORRECT.value, stage=Stage.TIMING.value)


def _warm() -> None:
    """Import what every job uses and create this process's CUDA context before the job arrives."""
    import torch  # noqa: F401 - the import is the point
    from cudice.verifier.build import compile, generated  # noqa: F401
    from cudice.verifier.run.runner import warm_gpu

    warm_gpu()


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    result_fd = int(args[args.index("--result-fd") + 1])
    cache = Path(args[args.index("--cache-dir") + 1]) if "--cache-dir" in args else None
    sandboxed = "--no-boundary" not in args
    work = Path.cwd()
    timed = "--no-timing" not in args
    from cudice.verifier.process import gpu_node_cpus

    near = gpu_node_cpus()
    if near:  # before torch is imported: the judge's memory near the GPU, as its runners' is
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, near)
    session = Session(cache, work, sandboxed=sandboxed, with_reference=timed) if cache is not None else None
    try:
        t = time.perf_counter()
        _warm()  # while the runners start and the job is on its way (a warm spare waits here)
        warmed = time.perf_counter()
        job = json.loads(sys.stdin.read())
        # this process's own start-up and its wait for the job (a spare's idle time), not in its phases
        start = {"judge_warm_up": warmed - t, "judge_idle": time.perf_counter() - warmed}
        wanted = Path(job["config"]["cache_dir"])
        if session is None or session.cache_dir != wanted:
            if session is not None:
                session.close()
            session = Session(wanted, work, sandboxed=sandboxed, with_reference=not job.get("skip_timing"))
        result = judge(job, session)
        result["stage_wall_s"].update(start)
    except BaseException as exc:  # last resort: report instead of dying silently
        result = crash_result(exc, "judge: ")
    write_result(result_fd, result)
    if session is not None:
        session.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
