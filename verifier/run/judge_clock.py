"""The judge's clock (run/judge_timing.py's means): staged sets, streamed calls, event times, an idle GPU.

`stage` sends a repetition's input sets to a runner before any clock runs (over its socket, or
under `timing_staging="shared"` through a GPU buffer made for that runner alone:
run/shared_staging.py); `stream` times a runner's calls one binary message at a time, from each
call's message to its digests (run/channel.py); `event_times` times the reference in the judge
by CUDA events, as an in-process harness does. Around the timed calls: `wait_gpu_idle` probes
until no other process's work is queued on the GPU, `paused_runner` stops the runner that is not
timed, `pinned_cpus` puts the judge's thread and each runner's main thread on a physical core of
its own.

`Clock` holds what one timing phase keeps between these calls (the L2 flush size, the judge's own
flush buffer and probe tensor, the idle GPU's probe time, the pins); the timing phase makes it and
passes it, nothing of it lives on the judge's state.

Contract: a runner that fails, dies or stalls in a timed call ends the job through
run/judge_state.py; a GPU that stays busy or a runner that cannot be paused is appended to `busy`
(the timing is then unresolved), never silently ignored. Not covered: what the numbers mean
(run/judge_timing.py), the lease (run/gpu_lease.py), pinning and pausing themselves
(verifier/process.py).
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import select
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cudice.verifier.run import channel
from cudice.verifier.run.judge_state import (
    JudgeState,
    add_wall,
    ask,
    limit_s,
    refused,
    reply_to,
    send_shared,
    shared,
    talking,
    transfer_deadline_s,
)
from cudice.verifier.run.runner_link import RunnerLink, RunnerTimeout
from cudice.verifier.source.result import Stage

if TYPE_CHECKING:
    import torch

TRACE = bool(os.environ.get("CUDICE_TIMING_TRACE"))  # runners report where timed calls spend time
SPIN_S = 0.05  # how long the judge and a runner poll for the next message while calls are timed
GPU_IDLE_WAIT_S = 5.0  # how long timed calls wait for work of other processes to leave the GPU


@dataclass(slots=True)
class Clock:
    """What one timing phase keeps between its timed calls (made by the timing phase)."""

    flush_mib: int  # the L2 flush before each timed call (cold policy), 0 for none
    flush: torch.Tensor | None = None  # the judge's own L2-flush buffer (cold policy)
    tiny: torch.Tensor | None = None  # a one-element tensor: the probe's and the launch floor's kernel
    probe_solo_s: float = 0.0  # the idle GPU's probe time (`wait_gpu_idle`)
    pins: dict[int, int] = field(
        default_factory=dict
    )  # thread id -> CPU while calls are timed (`pinned_cpus`)
    staging_why: str = ""  # why the last shared staging fell back to the socket (`stage`), "" if none did
    # the judge's side cannot share (no GPU, no cuda-bindings, a driver error): the rest of this
    # timing stages over the socket without trying again, its sets encoded once for both runners
    shared_off: bool = False


def stage(
    st: JudgeState,
    clock: Clock,
    link: RunnerLink,
    sets: list[list[Any]],
    *,
    sealed: bool,
    encoded: Any = None,
) -> float:
    """Send the input sets of the next batches; returns how long the runner took (s).

    Under `VerifyConfig.timing_staging == "shared"` the sets go through a GPU buffer made for this
    runner alone (run/shared_staging.py, `_stage_shared`); without a GPU, cuda-bindings or a driver
    that exports POSIX fds, or when the runner cannot map it, over the socket as always (once the
    judge's side found it cannot share, the rest of the timing does not try again). Which path
    each staging took is counted in the walls (`timing.staging_path_shared`: the fraction shared)."""
    header = {"op": "stage", "flush_mib": clock.flush_mib, "sealed": sealed}
    t_shared = time.perf_counter()
    trying = sharing(st, clock)
    if trying and _stage_shared(st, clock, link, sets, header):
        _count_staging(st, "shared")
        return time.perf_counter() - t_shared
    tried_s = time.perf_counter() - t_shared if trying else 0.0
    _count_staging(st, "socket")
    tree, blobs = encoded if encoded is not None else channel.encode(sets)
    t0 = time.perf_counter()
    ask(
        st,
        link,
        {**header, "sets": tree},
        Stage.TIMING,
        blobs,
        deadline_s=transfer_deadline_s(sum(len(b) for b in blobs)),
    )
    return tried_s + time.perf_counter() - t0


def sharing(st: JudgeState, clock: Clock) -> bool:
    """Whether `stage` tries shared GPU memory first (else its sets go over the socket at once)."""
    return st.config.timing_staging == "shared" and not clock.shared_off


def _count_staging(st: JudgeState, path: str) -> None:
    """Count a staging by its path ("shared" or "socket") and update the shared fraction."""
    w = st.walls
    w[f"timing.staging_{path}_count"] = w.get(f"timing.staging_{path}_count", 0.0) + 1.0
    done = w.get("timing.staging_shared_count", 0.0) + w.get("timing.staging_socket_count", 0.0)
    w["timing.staging_path_shared"] = w.get("timing.staging_shared_count", 0.0) / done


def _stage_shared(
    st: JudgeState, clock: Clock, link: RunnerLink, sets: list[list[Any]], header: dict[str, Any]
) -> bool:
    """Stage `sets` through a GPU buffer made for `link`'s runner alone (`send_shared`). False (the
    reason in `clock.staging_why`, a fallback counted in the walls) when either side cannot: the
    caller then stages over the socket."""
    sent = send_shared(st, link, header, "sets", sets, Stage.TIMING)
    if sent.taken:
        return True
    clock.staging_why = sent.why
    clock.shared_off = clock.shared_off or sent.unavailable
    name = f"timing.staging_fallback_{sent.side}"
    st.walls[name] = st.walls.get(name, 0.0) + 1
    return False


def stream(
    st: JudgeState,
    clock: Clock,
    link: RunnerLink,
    indices: list[int],
    keys: list[int],
    seals: list[int] | None,
    waited: list[int] | None = None,
) -> tuple[list[float], list[list[float]]]:
    """Timed calls on staged sets `indices`, one at a time: (seconds from each call's message to
    its digests, the digests); with `waited`, each call's run-queue wait of the runner's main
    thread (ns, read from the kernel outside it: `_RunQueueClock`) is appended to it. The first
    call's message leaves once the runner said it is ready (its preparation is no call's time: it
    was ~0.16 s in every first call of a block), the next only once the last one's digests are
    here, so no call can start early, overlap another or finish after its reply; both ends poll
    instead of sleeping meanwhile (`SPIN_S`; on a GPU only: on a small CPU box spinning processes
    would starve each other). Outputs stay in the runner (`kept`)."""
    spin = SPIN_S if st.device.startswith("cuda") else 0.0
    limit = limit_s(st, 1)
    most = 4 * 4096  # digests of one call: NUM_DIGESTS per output and input tensor, far below
    times: list[float] = []
    digests: list[list[float]] = []
    sock = link.sock
    with _no_collection(), talking(st, link, Stage.TIMING), shared(st), contextlib.ExitStack() as stack:
        channel.send(
            sock,
            {
                "op": "stream",
                "count": len(indices),
                "flush_mib": clock.flush_mib,
                "spin_s": spin,
                "trace": TRACE and seals is not None,
            },
        )
        t_ready = time.perf_counter()
        ready = reply_to(link, limit)
        add_wall(st, "timing.ready_wait", t_ready)
        count = ready.get("ready")
        if ready.get("ok") is not True or type(count) is not int or count != len(indices):
            if ready.get("ok") is True:  # an answer that is neither ready nor a failure
                said = f"answered a stream of {len(indices)} calls with {ready!r:.200}"
                ready = {"ok": False, "error": said}
            refused(st, link, ready, Stage.TIMING)
        wait_clock = _RunQueueClock(link.runner_pid or link.proc.pid) if waited is not None else None
        if wait_clock is not None:
            stack.callback(wait_clock.close)
        for j, (index, key) in enumerate(zip(indices, keys, strict=True)):
            seal = seals[j] if seals is not None else channel.NO_SEAL
            if wait_clock is not None:
                wait_clock.since_last()  # from here: the wait of this call alone
            t0 = time.perf_counter()
            channel.send_call(sock, index, key, seal)
            if spin > 0:
                channel.poll_readable(sock, spin)
            if not select.select([sock], [], [], limit)[0]:
                raise RunnerTimeout(limit)
            values = channel.recv_digests(sock, most)
            elapsed = time.perf_counter() - t0  # the clock stops when the call's digests are here
            if values is None:  # the runner failed this call; its reasons follow
                if not select.select([sock], [], [], limit)[0]:
                    raise RunnerTimeout(limit)
                rep, _ = channel.recv(sock, 0)
                refused(st, link, rep, Stage.TIMING)
            times.append(elapsed)
            digests.append(values if values is not None else [math.nan])
            if waited is not None and wait_clock is not None:
                waited.append(wait_clock.since_last())
    return times, digests


class _RunQueueClock:
    """The nanoseconds a process's main thread spent runnable but waiting for a CPU, read from the
    kernel (/proc/<pid>/schedstat, its second field) from outside the process; `since_last` gives
    the wait since the previous reading (0 where the kernel keeps no schedstat or the process is
    gone). One descriptor, read from offset 0 each time: a few microseconds, between calls."""

    def __init__(self, pid: int) -> None:
        try:
            self.fd: int | None = os.open(f"/proc/{pid}/schedstat", os.O_RDONLY)
        except OSError:
            self.fd = None
        self.last = self._read()

    def _read(self) -> int:
        if self.fd is None:
            return 0
        try:
            return int(os.pread(self.fd, 128, 0).split()[1])
        except (OSError, ValueError, IndexError):
            return 0

    def since_last(self) -> int:
        now = self._read()
        took, self.last = max(0, now - self.last), now
        return took

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def event_times(
    st: JudgeState, clock: Clock, model: Any, inputs: list[Any], calls: int, warm_up_s: float = 0.0
) -> list[float]:
    """Per-call ms of `model(*inputs)` as an in-process CUDA-event harness measures it (start and
    end events around each call, then a synchronisation; the L2 flushed first under the cold
    policy); the host clock without CUDA. `model=None` times one tiny kernel (a launch's cost).

    `warm_up_s` > 0 first runs untimed calls, each synchronised, until at least
    `EVENT_WARMUP_CALLS` calls and `warm_up_s` have passed (or 4 x `warm_up_s` once one call ran),
    as a harness warms up before its timed loop: after the GPU sat idle (staging, another
    runner's block), the first calls run slower while its clocks come back up (`warm_up`)."""
    import torch

    cuda = st.device.startswith("cuda")
    if clock.flush is None and clock.flush_mib:
        clock.flush = torch.empty(clock.flush_mib << 18, dtype=torch.int32, device=st.device)
    tiny = _tiny_tensor(st, clock)
    call = (lambda: model(*inputs)) if model is not None else (lambda: tiny.add_(1.0))
    out = []
    with torch.no_grad():
        if warm_up_s > 0:
            warm_up(call, cuda, warm_up_s)
        for _ in range(calls):
            if clock.flush is not None:
                clock.flush.fill_(1)
            if cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
                start.record()
                call()
                end.record()
                torch.cuda.synchronize()
                out.append(float(start.elapsed_time(end)))
            else:
                t0 = time.perf_counter()
                call()
                out.append((time.perf_counter() - t0) * 1e3)
    return out


EVENT_WARMUP_CALLS = 5  # untimed calls before the reference's event-timed ones, at least (`warm_up`)


def warm_up(call: Callable[[], Any], cuda: bool, seconds: float) -> int:
    """Run `call` untimed, synchronising after each, until `EVENT_WARMUP_CALLS` calls are done and
    `seconds` have passed, or 4 x `seconds` have passed once one call ran; returns the calls made.

    Why (one H100, 2026-12-05, docs/benchmarks.md): without it, alone on the GPU, the first of a
    repetition's ten event-timed reference calls ran 1.03-1.9x the median of the others, and those
    ran 12-18 % over an in-process harness's (5 warm-up calls, then 100 timed back to back) on the
    8192^2 kernels, though they matched it with twelve verifications keeping the GPU busy. The
    harness's warm-up is the difference this copies; whether it closes the whole gap is measured
    by bench/gpu_staging.sh."""
    import torch

    t0 = time.perf_counter()
    done = 0
    while True:
        call()
        if cuda:
            torch.cuda.synchronize()
        done += 1
        elapsed = time.perf_counter() - t0
        if (done >= EVENT_WARMUP_CALLS and elapsed >= seconds) or elapsed >= 4 * seconds:
            return done


def probe_s(st: JudgeState, clock: Clock, best_of: int = 1) -> float:
    """Host time of one tiny kernel and a device synchronisation in the judge (best of `best_of`)."""
    import torch

    if not st.device.startswith("cuda"):
        return 0.0
    tiny = _tiny_tensor(st, clock)
    best = math.inf
    for _ in range(best_of):
        t0 = time.perf_counter()
        tiny.add_(1.0)
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return best


def _tiny_tensor(st: JudgeState, clock: Clock) -> torch.Tensor:
    """The one-element tensor the probe and the launch floor add to (allocated once)."""
    import torch

    if clock.tiny is None:
        clock.tiny = torch.zeros(1, device=st.device)
    return clock.tiny


@contextlib.contextmanager
def paused_runner(link: RunnerLink, busy: list[str]) -> Iterator[None]:
    """`link`'s runner and everything it started, stopped (SIGSTOP) for the body, then continued
    and scheduled again. The candidate's runner is stopped while the reference is timed, so its
    code cannot launch work beside the reference's calls once the GPU is found idle; the
    reference's is stopped while the candidate is timed, so that both runners come to every
    timed call the same way (just continued, nothing else of theirs running). A runner that
    cannot be stopped marks the timing unresolved."""
    from cudice.verifier.process import paused

    with paused(link.proc.pid) as ok:
        if not ok:
            busy.append(f"the {link.role}'s runner could not be paused while the other one was timed")
        yield


def pinned_cpus(st: JudgeState) -> dict[int, int]:
    """Thread id -> CPU for the timed requests: the judge's thread and each runner's main thread
    on its own physical core, near the GPU where /sys tells which NUMA node it hangs on. A
    process that shares a core's hardware threads with a spinning one, or migrates, is slower
    by tens of microseconds per request, and differently for the two runners."""
    from cudice.verifier.process import cpus_of_node, distinct_cpus

    prefer: set[int] | None = None
    if st.device.startswith("cuda"):
        with contextlib.suppress(Exception):
            import torch

            props = torch.cuda.get_device_properties(torch.device(st.device))
            ids = [getattr(props, f"pci_{k}_id") for k in ("domain", "bus", "device")]
            pci = f"{ids[0]:04x}:{ids[1]:02x}:{ids[2]:02x}.0"
            with open(f"/sys/bus/pci/devices/{pci}/numa_node") as f:
                node = int(f.read().strip())
            prefer = cpus_of_node(node) if node >= 0 else None
    cpus = distinct_cpus(3, prefer)
    if len(cpus) < 3:
        return {}
    pids = [link.runner_pid for link in st.session.links()]  # found before any candidate code ran
    found = [p for p in pids if p is not None]
    if len(found) < len(pids):
        return {}
    return dict(zip([0, *found], cpus, strict=False))


def swapped_pins(pins: dict[int, int]) -> dict[int, int]:
    """The timing pins with the two runners' CPUs exchanged (the judge's thread stays)."""
    runners = [tid for tid in pins if tid != 0]
    if len(runners) != 2:
        return {}
    a, b = runners
    return {a: pins[b], b: pins[a]}


def wait_gpu_idle(st: JudgeState, clock: Clock, busy: list[str]) -> None:
    """Wait (bounded) until no other process's work is queued on the GPU: a kernel of another
    context (a runner's work left running after its reply) delays the judge's probe by a time
    slice. Timed work on a busy GPU would be slowed, and a candidate could slow the reference's
    calls that way; a GPU still busy after `GPU_IDLE_WAIT_S` marks the timing unresolved."""
    if not st.device.startswith("cuda"):
        return
    limit = max(10 * clock.probe_solo_s, clock.probe_solo_s + 500e-6)
    deadline = time.perf_counter() + GPU_IDLE_WAIT_S
    t0 = time.perf_counter()
    while True:
        took = probe_s(st, clock)
        if took <= limit:
            break
        if time.perf_counter() > deadline:
            busy.append(
                f"the GPU stayed busy with work of another process for {GPU_IDLE_WAIT_S:g} s before "
                f"a timed call (a probe kernel took {took * 1e3:.2f} ms, "
                f"alone {clock.probe_solo_s * 1e3:.3f} ms)"
            )
            break
    add_wall(st, "timing.idle_wait", t0)


@contextlib.contextmanager
def _no_collection() -> Iterator[None]:
    """No garbage collection pause of the judge's inside a call's clock; the collector as it was after."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()
