"""The judge's timing phase (run/judge.py, phase 4): the candidate's time per call by the judge's clock.

`timing` warms both runners up, sizes the batches, then repeats: fresh sealed input sets staged in
both runners (run/seal.py), the reference's calls timed here by CUDA events, each runner's calls
streamed alone on an idle GPU (run/judge_clock.py), every digest checked (run/witness.py) and two
outputs compared in full afterwards. The candidate's time is the reference's event time plus the
difference of the two runners' per-call times; `record_timing` (run/judging.py) writes it.
`interval_too_wide` and `bias_too_large` say when that difference is too noisy or too small for
the clock to resolve (`promised_fidelity`).

Contract: a timed call that is wrong, incomplete at its reply or that changed its inputs ends the
job with a `Stop`; a time the clock cannot resolve is recorded as unresolved, never as a speed-up.
Not covered: the clock's means (run/judge_clock.py), the statistics of the final comparison
(run/timing.py), the profiler's evidence (run/judge_evidence.py).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import secrets
import statistics
import time
import types
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from cudice.verifier.run import channel
from cudice.verifier.run.judge_clock import (
    TRACE,
    Clock,
    event_times,
    paused_runner,
    pinned_cpus,
    probe_s,
    sharing,
    stage,
    stream,
    swapped_pins,
    wait_gpu_idle,
)
from cudice.verifier.run.judge_evidence import even_profiles, guards, profile_batch, thread_growth
from cudice.verifier.run.judge_state import (
    JudgeState,
    add_wall,
    ask,
    exclusive,
    fetch,
    memory_is_short,
    release_memory,
    shared,
    stop_on_errors,
)
from cudice.verifier.run.judging import call_or_stop, diag, record_timing
from cudice.verifier.run.runner_link import RunnerLink
from cudice.verifier.source.result import Diagnostic, Location, Stage

# a folder: the judge writes every timing's per-call samples there as JSON (bench/timing_fidelity.py)
SAMPLES_DIR = os.environ.get("CUDICE_TIMING_SAMPLES", "")
MIN_REPETITIONS = 5
TIMING_BUDGET_S = 20.0  # past this, and past MIN_REPETITIONS, a resolved timing stops repeating
# on a GPU, an interval still wider than the promised fidelity keeps a timing repeating past its
# planned repetitions and past TIMING_BUDGET_S, up to these (`stop_repeating`)
EXTENDED_TIMING_S = 60.0
MAX_REPETITIONS_FACTOR = 3  # at most this many times `timing_num_trials` counted repetitions
WARMUP_CHUNK = 16  # timed calls per warm-up stream
EVENT_WARMUP_S = 0.025  # untimed reference calls before each repetition's event-timed ones (`warm_up`)
SETTLING_REPETITIONS = 1  # repetitions run first and not counted (`timing`)
TIMING_BLOCKS = 4  # blocks per runner and repetition (`blocks`)
MIN_BLOCK_CALLS = 4  # fewer calls than this in a block, and a repetition has fewer blocks
_rng = secrets.SystemRandom()


class _WarmedUp(NamedTuple):
    """What the warm-up leaves for the repetitions."""

    warm: list[Any]  # the one input set of the warm-up
    calls: int  # timed calls per runner and repetition
    event_inputs: list[Any]  # the set the reference's event-timed calls use
    floor_ms: float  # one launch of a tiny kernel, alone on the GPU


@dataclass(slots=True)
class TimingSamples:
    """What the repetitions gather."""

    ref_events: list[float] = field(default_factory=list)
    # every timed request, s
    requests: dict[str, list[float]] = field(default_factory=lambda: {"reference": [], "candidate": []})
    # per block of calls, in time order (`blocks_per_repetition` of them per repetition), s
    per_call: dict[str, list[list[float]]] = field(default_factory=lambda: {"reference": [], "candidate": []})
    staging: dict[str, list[float]] = field(default_factory=lambda: {"reference": [], "candidate": []})
    busy: list[str] = field(default_factory=list)
    # how many of `per_call`'s lists (blocks, in time order) make one repetition
    blocks_per_repetition: int = 1
    # the settling repetition's per-block call times (not counted), s
    settling: dict[str, list[list[float]]] = field(default_factory=dict)
    # per runner, over its timed blocks: [ns on a CPU, ns waiting for one, calls], read by the
    # kernel from outside the runner (`process.tree_schedstat`); reported, never used
    sched: dict[str, list[int]] = field(default_factory=dict)
    # per block, as `per_call`: each call's run-queue wait of the runner's main thread, ns (the
    # kernel's count, read outside it); reported, never used
    waits: dict[str, list[list[int]]] = field(default_factory=lambda: {"reference": [], "candidate": []})


def timing(st: JudgeState, ref_mod: types.ModuleType, model: Any, last_ref: Any) -> None:
    """The reference's time by CUDA events here; the candidate's as the reference's plus the
    difference of the two runners' per-call times by the judge's clock.

    The reference is trusted code and the judge its process, so its time per call is measured as an
    in-process CUDA-event harness does (`judge_clock.event_times`). The candidate's time cannot come
    from its own process, so each repetition stages fresh sealed input sets in both runners
    (run/seal.py) and then, holding the GPU's lease exclusively, streams each runner its calls one
    at a time (`judge_clock.stream`), in blocks ordered A B B A A B B A (`blocks`), each block on an
    idle GPU with the other runner stopped (`judge_clock.wait_gpu_idle`,
    `judge_clock.paused_runner`). A call's seal key arrives with its message and its reply must
    carry the keyed digest of the outputs (run/witness.py), so no call can start before its message
    or end after its reply: calls cannot overlap or be deferred, whatever the runner's Python does,
    and a call's time is round trip + unsealing + the forward + the digest, in sequence. Within a
    block nothing else touches the GPU (no probe of the judge's, no other runner), so no call pays a
    switch between GPU contexts. Both runners do the same work around the forward, pinned to their
    own cores (`judge_clock.pinned_cpus`), so the difference of their calls' lower quartiles
    (`estimate`) is the difference of the two forwards, and the candidate's time is the reference's
    event time plus that difference. Two outputs per repetition, chosen afterwards, are compared in
    full.
    """
    from cudice.verifier.run.timing import from_samples, tensor_bytes

    cfg = st.config
    cuda = st.device.startswith("cuda")
    clock = Clock(flush_mib=cfg.l2_flush_mib if cfg.l2_policy == "cold" and cuda else 0)
    links = (st.session.ref, st.session.cand)
    warm, calls, event_inputs, floor_ms = _warm_up(st, clock, links, ref_mod, model, last_ref)
    # 2. repetitions
    t_rounds = time.perf_counter()
    samples = TimingSamples()
    found: list[Diagnostic] = []
    profiled = _rng.randrange(cfg.timing_num_trials)
    events_per_rep = max(5, 100 // cfg.timing_num_trials)
    for rep in itertools.count(-SETTLING_REPETITIONS):
        # the first repetition on sealed sets is checked like any other but not counted: its calls
        # run slower than the later ones' in either runner while the allocator and the clocks
        # settle (docs/benchmarks.md; the samples' file keeps it, as `settling`)
        into = samples if rep >= 0 else TimingSamples()
        # the GPU's lease held alone from the draw to the checks: only the verification that times
        # uses a repetition's sets (up to `timing_stage_mib` in the judge and each runner). Where the
        # GPU's memory is short after it (other verifications hold it) that memory is given back, so
        # none stays reserved in a caching allocator while the others run; with memory to spare it
        # stays cached, so the next repetition's timed calls allocate nothing new (that would be timed)
        with exclusive(st):
            found += _repetition(
                st, clock, ref_mod, model, calls, event_inputs, into, events_per_rep, rep == profiled
            )
            if memory_is_short(st):
                release_memory(st, Stage.TIMING, collect=False)
                st.walls["timing.released_repetitions"] = st.walls.get("timing.released_repetitions", 0.0) + 1
        if into is not samples:
            samples.busy += into.busy
            samples.settling = into.per_call
            continue
        if rep < profiled:
            continue
        ref_now, cand_now, _ = candidate_times(samples)
        if stop_repeating(
            rep + 1, time.perf_counter() - t_rounds, cand_now, ref_now, cfg.timing_num_trials, extend=cuda
        ):
            break
    add_wall(st, "timing.rounds", t_rounds)
    if TRACE:  # the runners' own account of their timed calls: reported, never used
        for link in links:
            said, _ = ask(st, link, {"op": "trace"}, Stage.TIMING)
            for name, us in (said.get("trace") or {}).items():
                if isinstance(us, (int, float)):
                    st.walls[f"timing.trace_{link.role}_{name}_us"] = float(us)
    found += guards(st)
    found += thread_growth(st)
    stop_on_errors(st, found, Stage.TIMING)
    for role, times in samples.staging.items():  # reported only: sealed sets give nothing to precompute
        st.walls[f"timing.staging_{role}_median"] = statistics.median(times)
    for role, xs in samples.requests.items():
        xs = sorted(xs)
        st.walls[f"timing.request_{role}_ms"] = statistics.median(xs) * 1e3
        st.walls[f"timing.request_{role}_min_ms"] = xs[0] * 1e3
        st.walls[f"timing.request_{role}_q10_ms"] = xs[len(xs) // 10] * 1e3
        st.walls[f"timing.request_{role}_q25_ms"] = _q25(xs) * 1e3
    st.walls["timing.launch_floor_ms"] = floor_ms
    for role, (run_ns, wait_ns, n) in samples.sched.items():  # where a call's host time went
        st.walls[f"timing.cpu_{role}_us_per_call"] = run_ns / max(n, 1) / 1e3
        st.walls[f"timing.runqueue_{role}_us_per_call"] = wait_ns / max(n, 1) / 1e3
    for role, blocks_waits in samples.waits.items():  # calls the scheduler held up, and without them
        flat = [w for ws in blocks_waits for w in ws]
        if flat:
            st.walls[f"timing.preempted_{role}_share"] = sum(w > 0 for w in flat) / len(flat)
    if (unheld := unpreempted(samples)) is not None:
        st.walls["timing.candidate_unpreempted_ms"] = statistics.median(candidate_times(unheld)[1])
    ref_ms, cand_ms, by_medians = candidate_times(samples)
    st.walls["timing.candidate_by_medians_ms"] = by_medians
    st.walls["timing.candidate_by_q25_ms"] = statistics.median(cand_ms)
    if SAMPLES_DIR:  # every per-call time, for bench/timing_fidelity.py; reported, never used
        dump_samples(Path(SAMPLES_DIR), st.cand_path, samples, cand_ms, by_medians)
    unresolved = list(dict.fromkeys(samples.busy))
    cand_med = statistics.median(cand_ms)
    if cand_med < 0.5 * floor_ms:
        unresolved.append(
            f"the candidate's time per call ({cand_med:.4f} ms: the reference's {ref_ms:.4f} ms plus "
            f"the difference of the two runners' calls) is below half the cost of launching one "
            f"kernel ({floor_ms:.4f} ms): the runner's own loop was bypassed, or the difference is noise"
        )
    spread = interval_too_wide(cand_ms, ref_ms)
    if spread is not None:
        st.walls["timing.candidate_ci95_ms"] = spread[0]
        if spread[1]:
            unresolved.append(spread[1])
    if not unresolved and (apart := estimates_disagree(cand_med, by_medians, ref_ms)):
        unresolved.append(apart)
    if not unresolved and (bias := bias_too_large(cand_med, ref_ms, cfg.timing_runner_bias_us / 1e3)):
        unresolved.append(bias)
    cand_ms = [max(x, 1e-6) for x in cand_ms]
    st.out["l2_policy"] = cfg.l2_policy
    st.walls["timing.lease_wait"] = st.lease.waited_s if st.lease is not None else 0.0
    cmp_t = from_samples(
        samples.ref_events,
        cand_ms,
        input_bytes=tensor_bytes(warm),
        output_bytes=tensor_bytes(last_ref),
        suspicious_speedup=cfg.suspicious_speedup,
        peak_bandwidth_gb_s=cfg.peak_bandwidth_gb_s,
        extra_reasons=unresolved,
    )
    clock_name = "CUDA events" if cuda else "the host clock"
    record_timing(
        cmp_t,
        st.where,
        st.out,
        st.diags,
        f"; L2 {cfg.l2_policy}; the reference timed by {clock_name} in the judge, the candidate as that "
        f"plus the difference of the two runners' times per call, {calls} calls on fresh inputs "
        f"per runner and repetition, {len(cand_ms)} repetitions",
    )


def dump_samples(
    folder: Path, name: str, samples: TimingSamples, cand_ms: list[float], by_medians: float
) -> Path:
    """Write one timing's samples to `folder` as `<name>-<pid>-<ns>.json`: the reference's event
    times (ms), each runner's per-call times by block (s, in order), staging and request
    times, the per-repetition candidate estimates (ms) and the medians' estimate. For studying the
    clock's noise offline; nothing reads it back. Returns the file written."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{Path(name).stem}-{os.getpid()}-{time.monotonic_ns()}.json"
    row = {**asdict(samples), "candidate_by_repetition_ms": cand_ms, "candidate_by_medians_ms": by_medians}
    path.write_text(json.dumps(row))
    return path


def _warm_up(
    st: JudgeState,
    clock: Clock,
    links: tuple[RunnerLink, RunnerLink],
    ref_mod: types.ModuleType,
    model: Any,
    last_ref: Any,
) -> _WarmedUp:
    """Both runners warmed up on one staged set, the batches sized, the clock's probe, pins and
    launch floor measured."""
    from cudice.verifier.run.timing import tensor_bytes

    cfg = st.config
    # 1. warm-up by time on one set, then a rough per-call time to size the batches
    t0 = time.perf_counter()
    with shared(st):  # drawn on the GPU
        warm = _draw_set(st, ref_mod)
    for link in links:
        stage(st, clock, link, [warm], sealed=False)
    even_profiles(st, clock.flush_mib)  # the correctness phase profiled the candidate's runner
    per_call_s = []
    for link in links:  # short warm-ups under-report: https://github.com/triton-lang/triton/issues/2306
        deadline = time.perf_counter() + cfg.timing_warmup_ms / 1000.0
        while True:
            n = WARMUP_CHUNK
            times, _ = stream(st, clock, link, [0] * n, [secrets.randbits(64) for _ in range(n)], None)
            if time.perf_counter() >= deadline:
                break
        per_call_s.append(_q25(times))
    per_request = max(per_call_s)
    set_bytes = tensor_bytes(warm) + tensor_bytes(last_ref)
    fit = max(1, _stage_budget_bytes(st) // max(set_bytes, 1))
    calls = int(min(max(3, math.ceil(cfg.timing_batch_ms / 1000.0 / max(per_request, 1e-7))), fit, 4096))
    clock.probe_solo_s = probe_s(st, clock, best_of=10)
    clock.pins = pinned_cpus(st)  # once: the runners and the GPU stay the same
    event_inputs = [x.clone() if _is_tensor(x) else x for x in warm]
    event_times(st, clock, model, event_inputs, 3)  # the harness's own warm-up
    with exclusive(st):  # one launch of a tiny kernel, alone on the GPU like the timed calls
        wait_gpu_idle(st, clock, [])
        floor_ms = statistics.median(event_times(st, clock, None, [], 20))
    add_wall(st, "timing.warmup", t0)
    return _WarmedUp(warm, calls, event_inputs, floor_ms)


def _stage_budget_bytes(st: JudgeState) -> int:
    """Bytes of input and output sets one repetition may stage: the configured bound, at most an
    eighth of the GPU memory free now (two runners and the judge hold copies)."""
    budget = st.config.timing_stage_mib << 20
    if st.device.startswith("cuda"):
        import torch

        free, _ = torch.cuda.mem_get_info()
        budget = min(budget, int(free) // 8)
    return max(int(budget), 1)


def _repetition(
    st: JudgeState,
    clock: Clock,
    ref_mod: types.ModuleType,
    model: Any,
    total: int,
    event_inputs: list[Any],
    samples: TimingSamples,
    events: int,
    profile: bool,
) -> list[Diagnostic]:
    """One repetition, the GPU's lease held alone by the caller: fresh sealed sets; on an idle GPU,
    `events` event-timed calls of the reference here and the timed calls of both runners; then the
    digests and two full checks."""
    import torch
    from cudice.verifier.run import seal, witness
    from cudice.verifier.run.dynamic_checks import discrete as is_discrete
    from cudice.verifier.run.dynamic_checks import flatten_outputs
    from cudice.verifier.run.judge_correctness import judged, note_ties
    from cudice.verifier.run.timing import tensor_bytes

    busy = samples.busy
    sets: list[list[Any]] = []
    seals: list[int] = []
    keys: list[int] = []
    expected: list[list[float]] = []
    bounds: list[list[float]] = []
    num_outputs = 0
    discrete: list[bool] = []
    t0 = time.perf_counter()
    with torch.no_grad(), shared(st):
        for _ in range(total):  # 1. fresh inputs, the reference's digests, then sealed copies
            inputs = _draw_set(st, ref_mod)
            key = secrets.randbits(64)
            ref_out = flatten_outputs(
                model(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs])
            )
            # the outputs' digests, then the inputs' as drawn (the runner digests its inputs after
            # the call: one changed in place, or returned as the output and changed, no longer matches)
            expected.append(witness.digest(ref_out + list(inputs), key, st.device).cpu().tolist())
            bounds.append(
                [_digest_bound(st, r, j) for j, r in enumerate(ref_out)]
                + [witness.bound(x, 0.0, 0.0) if isinstance(x, torch.Tensor) else 0.0 for x in inputs]
            )
            num_outputs = len(ref_out)
            discrete = [is_discrete(r) for r in ref_out]
            seal_key = secrets.randbits(63)  # below channel.NO_SEAL
            sealed = [x.contiguous().clone() if isinstance(x, torch.Tensor) else x for x in inputs]
            seal.toggle(sealed, seal_key)
            sets.append(sealed)
            seals.append(seal_key)
            keys.append(key)
        links = (st.session.ref, st.session.cand)
    add_wall(st, "timing.rep_draw", t0)  # where a repetition's wall goes: drawing and digesting sets,
    t0 = time.perf_counter()  # staging, the clocked calls, the checks afterwards (summed over all)
    # once, for both runners (shared staging copies on the GPU; `stage` encodes if it falls back)
    encoded = None if sharing(st, clock) else channel.encode(sets)
    for link in links:  # 2. staging (its time is reported, not judged)
        samples.staging[link.role].append(stage(st, clock, link, sets, sealed=True, encoded=encoded))
    add_wall(st, "timing.rep_stage", t0)
    t0 = time.perf_counter()
    digests: dict[str, list[list[float]]] = {"reference": [], "candidate": []}
    from cudice.verifier.process import pinned, tree_schedstat

    # 3. the reference's event times, then each runner's calls streamed, the other runner stopped
    # and the GPU idle (nothing of the other runner's beside it), every process on its own core
    with pinned(clock.pins) as took:
        # every repetition's pins took (the wall is the smallest over the repetitions)
        now = float(bool(took) and all(took.values()))
        st.walls["timing.pinned"] = min(st.walls.get("timing.pinned", 1.0), now)
        with paused_runner(st.session.cand, busy):
            wait_gpu_idle(st, clock, busy)
            samples.ref_events += event_times(st, clock, model, event_inputs, events, EVENT_WARMUP_S)
        # each runner's calls in blocks, ordered A B B A A B B A: a drift of the GPU's clocks
        # during the repetition weighs on both runners alike; the runners swap cores every other
        # pair of blocks, so that a slower core (interrupts, its clock) weighs on both alike too;
        # and a block that runs slow as a whole (every call of it, at random; docs/benchmarks.md)
        # is outvoted by its runner's other blocks (`estimate`)
        first, second = links if _rng.random() < 0.5 else links[::-1]
        parts = blocks(total)
        samples.blocks_per_repetition = len(parts)
        got_by: dict[str, list[list[float]]] = {"reference": [], "candidate": []}
        for b, part in enumerate(parts):
            with pinned(swapped_pins(clock.pins) if b % 2 else {}):
                for link in (first, second) if b % 2 == 0 else (second, first):
                    with paused_runner(links[1] if link is links[0] else links[0], busy):
                        wait_gpu_idle(st, clock, busy)  # nothing left running by the other runner
                        sched0 = tree_schedstat(link.proc.pid)
                        waited: list[int] = []
                        got, call_digests = stream(
                            st,
                            clock,
                            link,
                            list(part),
                            [keys[i] for i in part],
                            [seals[i] for i in part],
                            waited,
                        )
                        sched1 = tree_schedstat(link.proc.pid)
                    samples.waits[link.role].append(waited)
                    acc = samples.sched.setdefault(link.role, [0, 0, 0])
                    acc[0] += sched1[0] - sched0[0]
                    acc[1] += sched1[1] - sched0[1]
                    acc[2] += len(part)
                    got_by[link.role].append(got)
                    digests[link.role] += call_digests
    add_wall(st, "timing.rep_clocked", t0)
    t0 = time.perf_counter()
    try:  # the checks, whichever way they end
        for role, bs in got_by.items():
            samples.per_call[role] += bs
            samples.requests[role] += [x for xs in bs for x in xs]
        unsealed: set[int] = set()

        def in_full(i: int) -> tuple[Any, Any, str]:
            """Set `i`'s reference outputs, recomputed on the judge's own copy (unsealed once), the
            candidate's outputs of that call as kept and fetched, and "" when they are the ones its
            digests described during the call (else what differs)."""
            with torch.no_grad(), shared(st):
                if i not in unsealed:  # the judge's own copy, unsealed to recompute the reference
                    seal.toggle(sets[i], seals[i])
                    unsealed.add(i)
                want = model(*[x.clone() if isinstance(x, torch.Tensor) else x for x in sets[i]])
                got = fetch(
                    st,
                    st.session.cand,
                    {"op": "kept", "index": i},
                    Stage.TIMING,
                    max_bytes=2 * tensor_bytes(want) + (1 << 20),
                )
            return want, got, _kept_matches_its_digest(st, got, digests["candidate"][i], keys[i], num_outputs)

        def compared(i: int, want: Any, got: Any) -> Any:
            return judged(st, model, sets[i], want, got)

        def changed_after(i: int, bound_to: str, how: str) -> list[Diagnostic]:
            return [
                diag(
                    "correctness.timed_call_mismatch",
                    f"Timed call {i + 1} ({how}): its output as fetched is not the output its digests "
                    f"described during the call ({bound_to}): the output changed after the call's reply "
                    "(lazily completed, or rewritten when read). Return plain tensors, complete when "
                    "forward returns.",
                    Stage.TIMING,
                    st.where,
                )
            ]

        def digest_missed(i: int, index: int, excess: float) -> list[Diagnostic]:
            return [
                diag(
                    "correctness.timed_call_digest",
                    f"Timed call {i + 1} of {total} in one repetition: the digest of output "
                    f"{index} is {excess:.3g}x beyond what the tolerance allows "
                    "when the reply arrived: the outputs were not complete (work deferred past "
                    "the call, a skipped synchronisation, lazy or cached outputs) or not correct "
                    "(e.g. computed in lower precision than the reference: TF32, fp16, bf16).",
                    Stage.TIMING,
                    st.where,
                )
            ]

        # 4. every digest of the candidate's batches, then two outputs in full, chosen now. A call
        # whose output misses its digest is compared in full instead, as a chosen one is: an honest
        # kernel breaks the reference's ties its own way (a discrete output: argmax, indices, a
        # mask), or lands a rounding the reference takes between near inputs one step off (a
        # floating one: fake quantisation; run/tolerance.py `_excused_at_jumps`). The fetched output
        # must be the one its digests described during the call, so work deferred past the reply
        # still fails. That costs two reference forwards per such call (the recompute and the
        # tie-set run; eight where the output needs the nudges): about one set in a hundred of
        # randn-drawn argmax inputs has a tie, inputs made with ties every set
        for i, (digest, exp, bd) in enumerate(zip(digests["candidate"], expected, bounds, strict=True)):
            verdict = witness.check(digest, exp, bd)
            if not verdict.ok and verdict.index < num_outputs:
                missed = digest_missed(i, verdict.index, verdict.excess)
                want, got, bound_to = in_full(i)
                if bound_to:
                    if not discrete[verdict.index]:
                        return missed
                    return changed_after(i, bound_to, "its digest of a discrete output differed")
                cmp = compared(i, want, got)
                if not cmp.ok:
                    if not discrete[verdict.index]:
                        return missed
                    return [
                        diag(
                            "correctness.timed_call_mismatch",
                            f"Timed call {i + 1} of {total} in one repetition: {cmp.why}. The kernel must "
                            "be correct on every call, not only while it is checked.",
                            Stage.TIMING,
                            st.where,
                        )
                    ]
                if cmp.tie_note:
                    note_ties(st, f"Timed call {i + 1} of {total}: {cmp.tie_note}.")
                # its outputs were compared in full: its inputs' digests are what is left to check
                k = num_outputs * witness.NUM_DIGESTS
                verdict = witness.check([0.0] * k + list(digest[k:]), [0.0] * k + list(exp[k:]), bd)
            if not verdict.ok and verdict.index >= num_outputs:
                return [
                    diag(
                        "dynamic.input_mutated",
                        f"Timed call {i + 1} of {total} in one repetition changed its input "
                        f"{verdict.index - num_outputs} (its digest after the call differs from the input "
                        "the judge sent): forward must leave its inputs as they are. Write results to a "
                        "new tensor.",
                        Stage.TIMING,
                        st.where,
                    )
                ]
            if not verdict.ok:
                return digest_missed(i, verdict.index, verdict.excess)
        found: list[Diagnostic] = []
        for i in _rng.sample(range(total), k=min(2, total)):
            want, got, bound_to = in_full(i)
            if bound_to:
                return changed_after(i, bound_to, "checked afterwards, chosen at random")
            cmp = compared(i, want, got)
            if cmp.ok and cmp.tie_note:
                note_ties(st, f"Timed call {i + 1} of {total}: {cmp.tie_note}.")
            if not cmp.ok:
                return [
                    diag(
                        "correctness.timed_call_mismatch",
                        f"Timed call {i + 1} (checked afterwards, chosen at random): {cmp.why}. The kernel "
                        "must be correct on every call, not only while it is checked.",
                        Stage.TIMING,
                        st.where,
                    )
                ]
    finally:
        add_wall(st, "timing.rep_check", t0)
    if profile:
        t0 = time.perf_counter()
        found += profile_batch(st, list(range(min(2, total))), clock.flush_mib)
        add_wall(st, "timing.rep_profile", t0)
    return found


def _draw_set(st: JudgeState, ref_mod: types.ModuleType) -> list[Any]:
    from cudice.verifier.run.inputs import make_inputs, secret_seed

    return list(
        call_or_stop(
            lambda: make_inputs(
                ref_mod.get_inputs, secret_seed(), "as_given", st.device, draw_on_device=True
            ),
            Stage.TIMING,
            Location(st.ref_path, 1, 1),
        )
    )


def _kept_matches_its_digest(st: JudgeState, got: Any, sent: list[float], key: int, num_outputs: int) -> str:
    """Whether a kept output, fetched after the clocked calls, is the one whose digests the runner
    sent during its call under `key` (`sent`: its outputs' and inputs' digests): "" when it is,
    else what differs. Only the summation order may differ (the runner's digest kernel and the
    judge's add the same float64 products), so the slack is `witness.bound(t, 0, 0)`."""
    import torch
    from cudice.verifier.run import witness
    from cudice.verifier.run.dynamic_checks import flatten_outputs

    outs = flatten_outputs(got)
    if len(outs) != num_outputs:
        return f"{len(outs)} outputs, {num_outputs} when digested"
    # a number among the outputs has no digest (its slot stays 0 on both sides); it is compared by value
    placed = [t.to(st.device) if isinstance(t, torch.Tensor) else None for t in outs]
    mine = witness.digest(placed, key, st.device).cpu().tolist()
    slack = [2.0 * witness.bound(t, 0.0, 0.0) if isinstance(t, torch.Tensor) else 0.0 for t in outs]
    found = witness.check(sent[: len(mine)], mine, slack)  # a NaN on either side fails
    return "" if found.ok else f"output {found.index}'s digests differ from those sent with the call"


def _digest_bound(st: JudgeState, ref: Any, index: int) -> float:
    import torch
    from cudice.verifier.run import witness

    if not isinstance(ref, torch.Tensor):
        return 0.0
    if not (ref.is_floating_point() or ref.is_complex()):
        return witness.bound(ref, 0.0, 0.0)
    from cudice.verifier.run.tolerance import (
        EXACT_SLACK,
        FP32_REL_NORM_BOUND,
        HELD_TO_FP32,
        NORM_SHARE,
        finite_real,
        output_scale,
        rtol_floor,
    )

    # the norm check's own terms (run/tolerance.py), so the digest accepts what the comparison
    # accepts. For an output that cancels (correctness judged it against the float64 reference),
    # also what that comparison accepts: (EXACT_SLACK + 1) times the reference's own error in norm
    # (the candidate's distance to the exact output, and the reference's), twice the largest share
    # seen in correctness for new inputs; capped at 1/18 of the output's norm, so that a digest
    # still tells an output that was not computed (off by about its own norm) from one that was.
    # NaN and Inf count as 0 in a digest (run/witness.py): the bound is the finite elements' too
    finite = finite_real(ref)
    scale = output_scale(finite)
    share = min(2.0 * (EXACT_SLACK + 1.0) * st.exact_own_shares.get(index, 0.0), 1.0 / 18.0)
    atol, rtol = st.config.atol * scale, max(st.config.rtol, rtol_floor(ref.dtype))
    n, norm = finite.numel(), float(finite.norm())
    if st.config.precision == "fp32" and str(ref.dtype).removeprefix("torch.") in HELD_TO_FP32 and norm > 0:
        # the precision rule's bound where it is the tighter one (run/tolerance.py rule 3): a timed
        # call computed in bf16 or TF32 is as far off as that rule rejects, so its digest is too
        # (or the 16-bit format's, where correctness held the output to it: its reference
        # computes in 16 bits inside)
        held = max(FP32_REL_NORM_BOUND, st.lower_bounds.get(index, 0.0))
        nu = min(NORM_SHARE * (rtol * norm + atol * n**0.5), held * norm)
        atol, rtol = 0.0, nu / (NORM_SHARE * norm)
    return witness.bound(ref, atol + share * scale / NORM_SHARE, rtol)


def stop_repeating(
    done: int, elapsed_s: float, cand_ms: list[float], ref_ms: float, planned: int, *, extend: bool
) -> bool:
    """Whether a timing stops after `done` counted repetitions, `elapsed_s` into them, with these
    per-repetition candidate times (ms, `candidate_times`).

    Never before MIN_REPETITIONS (or `planned`, when fewer are planned). Then it stops at the
    `planned` repetitions (`timing_num_trials`) or, with large inputs whose staging dominates, once
    past TIMING_BUDGET_S — as long as the 95 % interval of the candidate's time is within the
    promised fidelity (`interval_too_wide`). Under load (twelve verifications sharing a GPU) five
    repetitions of a correct 0.34 ms kernel gave an interval of +-12 % around a median 1.5 % from
    an event harness's; a few more repetitions resolve it. So where `extend` (a GPU timing) and
    the interval is still too wide, it goes on until it resolves, EXTENDED_TIMING_S pass or
    MAX_REPETITIONS_FACTOR x `planned` repetitions are done; what is still too wide then is
    reported unresolved, as before. A candidate that makes its own times noisy only spends its own
    verification's time and stays unresolved.

    It does not go on where going on cannot help: once MIN_REPETITIONS are done, an interval that
    would need more than the most repetitions allowed to shrink within the fidelity (it narrows as
    one over the square root of their number) stops at once. Alone on an H100 a 4 us ReLU's
    interval was still +-35 % (+-25 % promised) after 30 repetitions and 60 s; from its first ten
    the rule predicts ~110 needed of the 30 allowed, so it stops there."""
    if done < min(MIN_REPETITIONS, planned):
        return False
    if done < planned and (elapsed_s <= TIMING_BUDGET_S or done < MIN_REPETITIONS):
        return False
    most = MAX_REPETITIONS_FACTOR * planned
    if not extend or elapsed_s > EXTENDED_TIMING_S or done >= most:
        return True
    spread = interval_too_wide(cand_ms, ref_ms)
    if spread is None or not spread[1]:
        return True
    allowed = promised_fidelity(ref_ms) * statistics.median(cand_ms)
    return done >= MIN_REPETITIONS and (allowed <= 0 or done * (spread[0] / allowed) ** 2 > most)


def promised_fidelity(ref_ms: float) -> float:
    """The relative error the clock promises for a candidate's time: +-10 % where the reference
    takes 50 us or more per call, +-25 % below."""
    return 0.10 if ref_ms >= 0.05 else 0.25


def interval_too_wide(cand_ms: list[float], ref_ms: float) -> tuple[float, str] | None:
    """(half-width of the 95 % interval of the candidate's mean time per call over repetitions, ms;
    why that is too wide to count, or ""), or None with fewer than 3 repetitions. The bound is the
    fidelity the clock promises: +-10 % where the reference takes 50 us or more, +-25 % below."""
    if len(cand_ms) < 3:
        return None
    mid = statistics.median(cand_ms)
    half = 2.0 * statistics.stdev(cand_ms) / math.sqrt(len(cand_ms))
    allowed = promised_fidelity(ref_ms)
    if half <= allowed * max(mid, 1e-9):
        return half, ""
    return half, (
        f"the candidate's time per call is {mid:.4f} +- {half:.4f} ms (95 %, {len(cand_ms)} "
        f"repetitions), wider than the +-{allowed:.0%} this clock promises at this size: the two "
        "runners' call times differ by less than their noise"
    )


def estimates_disagree(by_q25_ms: float, by_medians_ms: float, ref_ms: float) -> str:
    """Why two estimates of the candidate's time are too far apart to count, or "".

    The candidate's time is the reference's plus the difference of the two runners' per-call
    times. Where the two runners' call times differ by a shift (the forwards' difference), every
    quantile moves by it, so the difference of their lower quartiles (the estimate used) and of
    their medians agree. Where they disagree, the two distributions differ in shape (a fast mode
    one runner has and the other lacks, a process-level bias that comes and goes), and no single
    difference is the forwards': when they differ by more than the fidelity promised at this size
    (`promised_fidelity`), the time is unresolved."""
    allowed = promised_fidelity(ref_ms)
    if by_q25_ms > 0 and abs(by_q25_ms - by_medians_ms) <= allowed * by_q25_ms:
        return ""
    return (
        f"the candidate's time per call is {by_q25_ms:.4f} ms by the two runners' lower quartiles but "
        f"{by_medians_ms:.4f} ms by their medians: the runners' call times differ by more than a "
        f"shift, beyond the +-{allowed:.0%} promised at this size"
    )


def bias_too_large(cand_ms: float, ref_ms: float, bias_ms: float) -> str:
    """Why a candidate time is too short for the clock to resolve, or "".

    The candidate's time is the reference's plus the difference of two runner processes' calls,
    and two processes differ by a bias that repeats in every call (memory placement, what each
    loaded): the difference of their means converges to it, so the 95 % interval does not see it.
    `bias_ms` bounds it (VerifyConfig.timing_runner_bias_us). The candidate's true time may then be
    as short as `cand_ms - bias_ms`, and the promise (+-10 % where the reference takes 50 us or more,
    +-25 % below) must hold for that one too: a bias that inflated the estimate must not also
    widen the error it is allowed. Where the bound is beyond it, the time is unresolved."""
    allowed = promised_fidelity(ref_ms)
    if bias_ms <= allowed * max(cand_ms - bias_ms, 0.0):
        return ""
    return (
        f"the candidate's time per call ({cand_ms:.4f} ms) is too short for this clock: two runner "
        f"processes' calls can differ by up to {bias_ms * 1e3:.0f} us for reasons that are not the "
        f"kernel's, beyond the +-{allowed:.0%} promised at this size"
    )


def blocks(total: int) -> list[range]:
    """A repetition's `total` calls per runner cut into `TIMING_BLOCKS` blocks (fewer when a
    block would hold fewer than `MIN_BLOCK_CALLS` calls), in order, sizes differing by at most one."""
    n = max(1, min(TIMING_BLOCKS, total // MIN_BLOCK_CALLS))
    edges = [round(k * total / n) for k in range(n + 1)]
    return [range(a, b) for a, b in itertools.pairwise(edges) if b > a]


def candidate_times(samples: TimingSamples) -> tuple[float, list[float], float]:
    """(the reference's event time per call, the candidate's time per repetition, the candidate's
    time by the medians' estimate), in ms: the reference's time plus `estimate`'s differences."""
    ref_ms = statistics.median(samples.ref_events)
    deltas, by_medians_s = estimate(samples)
    return ref_ms, [ref_ms + d * 1e3 for d in deltas], ref_ms + by_medians_s * 1e3


def estimate(samples: TimingSamples) -> tuple[list[float], float]:
    """Per repetition, the difference of the two runners' lower quartiles over all of the
    repetition's calls, pooled across its blocks (s); and the median over repetitions of the
    difference of their medians (s), reported beside it. What a call costs beyond the forward is
    the same in both runners, and its noise (a wake-up, an interrupt, a block run slow) only ever
    adds, so the pooled lower quartile shifts by the forward's difference: as long as a quarter of
    a runner's calls in a repetition ran in the usual state, a block run slow as a whole leaves it
    where it was (it moved a per-block quartile by its whole slowdown)."""
    per = max(1, samples.blocks_per_repetition)
    cand, ref = samples.per_call["candidate"], samples.per_call["reference"]
    deltas: list[float] = []
    medians: list[float] = []
    for k in range(0, min(len(cand), len(ref)), per):
        c = [x for xs in cand[k : k + per] for x in xs]
        r = [x for xs in ref[k : k + per] for x in xs]
        if c and r:
            deltas.append(_q25(c) - _q25(r))
            medians.append(statistics.median(c) - statistics.median(r))
    return deltas, statistics.median(medians)


def unpreempted(samples: TimingSamples) -> TimingSamples | None:
    """`samples` with only the calls whose runner never waited for a CPU (`waits` 0), or None
    where a repetition would keep fewer than 4 calls of a runner. For studying whether the
    scheduler's hold-ups explain the clock's noise under load (docs/benchmarks.md); not used."""
    kept: dict[str, list[list[float]]] = {}
    for role in ("reference", "candidate"):
        times, waits = samples.per_call[role], samples.waits[role]
        if len(times) != len(waits):
            return None
        kept[role] = [
            [t for t, w in zip(ts, ws, strict=True) if w == 0] for ts, ws in zip(times, waits, strict=True)
        ]
        per = max(1, samples.blocks_per_repetition)
        for k in range(0, len(kept[role]), per):
            if sum(len(b) for b in kept[role][k : k + per]) < 4:
                return None
    return TimingSamples(
        ref_events=samples.ref_events, per_call=kept, blocks_per_repetition=samples.blocks_per_repetition
    )


def _q25(xs: list[float]) -> float:
    """The lower quartile of `xs` (linear between order statistics, as run/timing.py's quartiles)."""
    return statistics.quantiles(xs, n=4, method="inclusive")[0] if len(xs) > 1 else xs[0]


def _is_tensor(x: Any) -> bool:
    import torch

    return isinstance(x, torch.Tensor)
