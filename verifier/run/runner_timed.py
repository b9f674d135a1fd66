"""A runner's timed calls and profiles (run/runner.py's `stage`, `stream`, `batch`, `trace`, `profile`).

`op_stage` keeps the input sets of the next timed calls (sent by the judge before its clock
starts, over the socket or through a GPU buffer shared for that staging: run/shared_staging.py)
and works out their seal plans; `op_stream` runs timed calls one binary message each
(run/channel.py): unseal a staged set inside the clock (run/seal.py), forward, the keyed digests
of its outputs and inputs (run/witness.py), sent back at once, every output kept; `op_batch` runs
the same calls in one request (warm-up; with `profile`, under the profiler); `op_trace` reports
where traced calls spent their time; `op_profile` runs one forward under the profiler
(dynamic_checks.profiler_session: torch's Kineto session) and
`profiled` replies with the kernels that ran (name, device time, stream).

Contract: a call that fails answers its stream message with "failed", then the usual failure
reply follows (run/runner_state.py). Everything here runs in the candidate's process and can be
replaced by it: the judge trusts only its own clock and the digests' keys (docs/anticheat.md).
Not covered: the untimed requests (run/runner.py), what the judge makes of the replies.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

from cudice.verifier.run import channel
from cudice.verifier.run.runner_state import RunnerFailure, RunnerState, guard, received, reply, sync
from cudice.verifier.source.result import Diagnostic, Severity, Stage, Verdict

DIGEST_SLOTS = 64  # output and input tensors of a call whose digests have room made beforehand


def op_stage(st: RunnerState, req: dict[str, Any], blobs: list[bytearray]) -> None:
    """Keep the sets of the next timed calls: from the request's blobs, or (`"shared"`) cloned out
    of the GPU buffer whose fd follows the request (run/shared_staging.py `take`). A shared buffer
    this process cannot map is answered `"staged": false` (the judge then stages over the socket)."""
    from cudice.verifier.run import seal

    st.sets, st.seal_plans, st.kept = [], [], {}  # the last repetition's, freed first
    taken, sets = received(st, req, blobs, "sets")
    if not taken:
        return
    st.sets = [list(x) for x in sets]
    st.seal_plans = [seal.plan(s) for s in st.sets]  # worked out now, outside the clock
    st.kept = {}
    mib = int(req.get("flush_mib", 0))
    if mib and st.device.startswith("cuda") and (st.flush is None or st.flush.numel() * 4 != mib << 20):
        import torch

        st.flush = torch.empty(mib * 1024 * 1024 // 4, dtype=torch.int32, device=st.device)
    sync(st)
    reply(st, {"ok": True, "staged": True})


def op_batch(st: RunnerState, req: dict[str, Any], blobs: list[bytearray]) -> None:
    if req.get("profile"):
        profiled(st, lambda: _run_batch(st, req), str(req.get("stage", "timing")))
        return
    reply(st, {"ok": True, "digests": _run_batch(st, req)})


def op_stream(st: RunnerState, req: dict[str, Any], blobs: list[bytearray]) -> None:
    """`count` timed calls, each a binary message answered by its digests (run/channel.py).

    The runner first prepares (collection off, room for the digests) and answers `ready`; the
    judge sends the first call only then, so none of that is in a call's time. The judge sends
    the next call only when the last one's digests are in, so calls never overlap; its clock runs
    from each call's message to its digests. Every output is kept (`kept`). A call that fails
    answers "failed", then the usual JSON failure reply follows."""
    cuda = st.device.startswith("cuda")
    flush = st.flush if cuda and int(req.get("flush_mib", 0)) else None
    spin = float(req.get("spin_s") or 0.0)
    trace = bool(req.get("trace"))
    count = int(req["count"])
    import torch

    # no collection pauses inside the calls: the young generations now (a full collection of a
    # process holding torch takes ~0.16 s, every block of every repetition), none until the end
    gc.collect(1)
    gc.disable()
    try:
        # zeroed room for every call's digests, made before the calls (one launch fewer in each)
        st.digest_room = torch.zeros(count, 4 * DIGEST_SLOTS, dtype=torch.float64, device=st.device)
        sync(st)  # the zeroing done before the first call's clock starts
        reply(st, {"ok": True, "ready": count})
        _stream_calls(st, count, flush, spin, trace)
    finally:
        gc.enable()
        st.digest_room = None


def _stream_calls(st: RunnerState, count: int, flush: Any, spin: float, trace: bool) -> None:
    for call in range(count):
        if spin > 0:  # the next call comes within microseconds: wait awake, not asleep
            channel.poll_readable(st.sock, spin)
        index, key, seal_key = channel.recv_call(st.sock)
        stamps: list[Any] | None = [time.perf_counter()] if trace else None
        try:
            digest, out = _timed_call(st, index, key, seal_key, flush, stamps, call)
            values = _to_host(st, [digest])[0]
        except BaseException:
            channel.send_digests(st.sock, None)
            raise
        st.kept[index] = out
        st.last = out
        if stamps is not None:
            stamps.append(time.perf_counter())
        channel.send_digests(st.sock, values)
        if stamps is not None:
            stamps.append(time.perf_counter())
            st.trace.append(stamps)


def op_trace(st: RunnerState, req: dict[str, Any], blobs: list[bytearray]) -> None:
    """Medians (us) of where the traced timed calls spent their time, as this process saw it: a
    diagnostic for the benchmarks, never evidence (the candidate's process can say anything)."""
    import statistics

    names = (
        "unseal_host",
        "forward_host",
        "digest_launch",
        "wait_host",
        "reply",
        "unseal_gpu",
        "forward_gpu",
    )
    rows = []
    for s in st.trace:
        t0, t1, t2, t3, e0, e1, e2, t4, t5 = s
        rows.append(
            (
                t1 - t0,
                t2 - t1,
                t3 - t2,
                t4 - t3,
                t5 - t4,
                e0.elapsed_time(e1) / 1e3 if e0 is not None else 0.0,
                e1.elapsed_time(e2) / 1e3 if e1 is not None else 0.0,
            )
        )
    st.trace = []
    reply(
        st,
        {
            "ok": True,
            "trace": {n: statistics.median(r[i] for r in rows) * 1e6 for i, n in enumerate(names)},
        }
        if rows
        else {"ok": True, "trace": {}},
    )


def _timed_call(
    st: RunnerState,
    index: int,
    key: int,
    seal_key: int | None,
    flush: Any,
    stamps: list[Any] | None = None,
    room: int = -1,
) -> tuple[Any, Any]:
    """Unseal staged set `index`, evict L2 under the cold policy, forward, and the keyed digests
    of the outputs and then of the inputs (one changed in place no longer matches); no sync.
    `stamps` (tracing only) gets host times and CUDA events between the steps."""
    from cudice.verifier.run import seal, witness
    from cudice.verifier.run.dynamic_checks import flatten_outputs

    if not 0 <= index < len(st.sets):
        raise ValueError(f"timed call on set {index}, but {len(st.sets)} are staged")
    args = st.sets[index]
    import torch

    events = None
    if stamps is not None and st.device.startswith("cuda"):
        events = [torch.cuda.Event(enable_timing=True) for _ in range(3)]  # type: ignore[no-untyped-call]
        events[0].record()
    with torch.no_grad():
        if seal_key is not None and seal_key != channel.NO_SEAL:
            seal.toggle_planned(st.seal_plans[index], int(seal_key))  # usable only now, in the clock
        if flush is not None:
            flush.fill_(1)  # evict L2 (cold policy)
        if stamps is not None:
            stamps.append(time.perf_counter())
            if events is not None:
                events[1].record()
        out = guard(st, lambda: st.model(*args), Stage.TIMING)
        if stamps is not None:
            if events is not None:
                events[2].record()
            stamps.append(time.perf_counter())
        into = st.digest_room[room] if room >= 0 and st.digest_room is not None else None
        digest = witness.digest(flatten_outputs(out) + list(args), int(key), st.device, into)
        if stamps is not None:
            stamps.append(time.perf_counter())
            stamps += events if events is not None else [None, None, None]
        return digest, out


def _run_batch(st: RunnerState, req: dict[str, Any]) -> list[list[float]]:
    cuda = st.device.startswith("cuda")
    flush = st.flush if cuda and int(req.get("flush_mib", 0)) else None
    seals = req.get("seals") or [None] * len(req["sets"])
    digests, last = [], st.last
    for index, key, seal_key in zip(req["sets"], req["keys"], seals, strict=True):
        digest, last = _timed_call(st, int(index), int(key), seal_key, flush)
        digests.append(digest)
    st.last = last
    return _to_host(st, digests)


def _to_host(st: RunnerState, digests: list[Any]) -> list[list[float]]:
    """The digests on the host: the one synchronisation of a call or batch."""
    import torch

    try:
        if len(digests) == 1:  # a streamed call: no stacking copy
            return [[float(v) for v in digests[0].cpu().tolist()]]
        values = torch.stack(digests).cpu() if digests else torch.zeros(0, 1)
    except Exception as exc:  # a sticky CUDA error from the kernel
        raise RunnerFailure(
            Verdict.RUNTIME_ERROR.value,
            [
                Diagnostic(
                    Severity.ERROR,
                    f"CUDA error in a timed call: {exc}".strip(),
                    "runtime.cuda_error",
                    Stage.TIMING,
                    st.where,
                )
            ],
            str(exc),
        ) from None
    return [[float(v) for v in row] for row in values.tolist()]


def op_profile(st: RunnerState, req: dict[str, Any], blobs: list[bytearray]) -> None:
    def one_call() -> None:
        st.last = guard(st, lambda: st.model(*st.inputs), Stage.CORRECTNESS)

    profiled(st, one_call, "correctness")


def profiled(st: RunnerState, body: Callable[[], object], stage: str) -> None:
    """Run `body` under the profiler and reply with the kernels that ran: name, device µs, stream."""
    import torch

    if not st.device.startswith("cuda"):
        body()
        reply(st, {"ok": True, "kernels": [], "marker_stream": -1, "supported": False})
        return
    from cudice.verifier.run.dynamic_checks import profiler_session

    marker = torch.zeros(1, device=st.device)
    try:
        with torch.no_grad(), profiler_session() as prof:
            marker.fill_(1.0)  # a (glue) kernel on the current stream: its stream id is the one forward uses
            body()
            torch.cuda.synchronize()
        events = list(prof.function_events)
    except RunnerFailure:
        raise
    except Exception as exc:  # no CUPTI here (permissions, driver): the judge decides what that means
        reply(
            st,
            {
                "ok": True,
                "kernels": [],
                "marker_stream": -1,
                "supported": False,
                "error": f"{type(exc).__name__}: {exc}",
            },
        )
        return
    kernels: list[list[object]] = []
    marker_stream = -1
    for evt in events:
        if not str(getattr(evt, "device_type", "")).endswith("CUDA") or not evt.name:
            continue
        if evt.name == "cudice_witness":  # the judge's digest, not the candidate's work
            continue
        us = float(getattr(evt, "device_time", None) or getattr(evt, "cuda_time", 0.0) or 0.0)
        rid = getattr(evt, "device_resource_id", None)
        stream = int(rid) if isinstance(rid, int) else -1  # CUPTI's stream id (0 is a valid one)
        if marker_stream == -1 and "fill" in evt.name.lower() and not kernels:
            marker_stream = stream
            continue
        kernels.append([evt.name, us, stream])
    reply(
        st,
        {
            "ok": True,
            "kernels": kernels,
            "marker_stream": marker_stream,
            "supported": True,
            "stage": stage,
        },
    )
