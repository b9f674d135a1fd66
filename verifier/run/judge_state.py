"""What the judge's phases share (run/judge.py): the runners, one small state, and the requests.

`Session` holds the two runner processes of one job; `JudgeState` what every phase reads or adds
to: the job's configuration, device and parsed documents, the session, the result being written
(`out`, `diags`, `walls`), the GPU's lease and the few values one phase leaves for a later one (the
reference's time per call, the candidate's own kernels, the profiler sessions run so far). The
phases (run/judge_load.py, run/judge_correctness.py, run/judge_timing.py with run/judge_clock.py,
run/judge_evidence.py) are plain functions over it; what only one phase uses stays in that phase.

Contract of the request functions here (`ask`, `talking`, `refused`): a runner that dies, times out
or breaks the protocol, or refuses a request, ends the job with a `Stop` carrying the candidate's
verdict, never an exception of the judge's own. `shared` and `exclusive` hold the GPU's lease
(run/gpu_lease.py) with the nesting rule every phase relies on.

Not covered here: the phases themselves, the comparison, the clock and the verdict logic.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from cudice.verifier.run import channel
from cudice.verifier.run.gpu_lease import GpuLease, LeaseTimeout
from cudice.verifier.run.judging import Stop, diag
from cudice.verifier.run.runner_link import RunnerLink, RunnerTimeout, runner_env
from cudice.verifier.source.result import Diagnostic, Location, Severity, Stage, Verdict

if TYPE_CHECKING:
    from cudice.verifier.config import VerifyConfig
    from cudice.verifier.source.document import Document

# anything else a runner claims is ignored; `static_violation`: a module built at run time whose host
# objects call what the checks forbid (judge_load._build's reply, forwarded; a rejection, never a pass)
RUNNER_VERDICTS = {"runtime_error", "compile_error", "incorrect", "static_violation"}
# Codes that say the verifier failed (its toolchain, sandbox, GPU or profiler, a worker, the judge or
# the reference's runner), not the kernel: only trusted code writes them, and the RL reward leaves
# such verdicts unscored (model/train/reward.py `infrastructure_failure`). The candidate's runner
# runs the candidate's Python, which can send any reply: where one of its diagnostics carries such
# a code, the judge records `runtime.exception` instead (`reported_diagnostics`).
VERIFIER_FAULT_CODES = frozenset(
    {
        "compile.cancelled",
        "compile.toolchain",
        "compile.headers_unavailable",
        "runtime.worker_error",
        "runtime.crash",
        "runtime.timeout",
        "dynamic.profiler_unavailable",
    }
)
VERIFIER_FAULT_PREFIXES = ("verify.", "sandbox.", "dist.", "timing.")
CANDIDATE_SAYS = "The candidate's process reported: "


class Session:
    """The runners of one job: started at once (the reference's lazily without timing), closed with
    the judge."""

    def __init__(
        self, cache_dir: Path, work: Path, *, sandboxed: bool = True, with_reference: bool = True
    ) -> None:
        self.cache_dir, self.work, self.sandboxed = cache_dir, work, sandboxed
        cache_dir.mkdir(
            parents=True, exist_ok=True
        )  # the boundary binds only paths that exist (run/boundary.py)
        self._uid = (
            2_000_000_000 + (os.getpid() % 10_000_000) * 2
        )  # two uids per judge, unique among live judges
        self.cand = self._start("candidate", self._uid)
        self._ref = self._start("reference", self._uid + 1) if with_reference else None

    def _start(self, role: str, uid: int) -> RunnerLink:
        return RunnerLink(
            role,
            cache_dir=self.cache_dir,
            log_dir=self.work,
            uid=uid,
            env=runner_env(),
            sandboxed=self.sandboxed,
        )

    @property
    def ref(self) -> RunnerLink:
        """The reference's runner (started on first use when the session began without it)."""
        if self._ref is None:
            self._ref = self._start("reference", self._uid + 1)
        return self._ref

    def links(self) -> list[RunnerLink]:
        return [link for link in (self.cand, self._ref) if link is not None]

    def close(self) -> None:
        for link in self.links():
            link.close()


@dataclass(slots=True)
class JudgeState:
    """One job as the judge reads it, and what its phases share (made by `new_state`)."""

    config: VerifyConfig
    device: str
    session: Session
    out: dict[str, Any]
    diags: list[Diagnostic]
    walls: dict[str, float]
    cand_path: str
    cand_source: str
    ref_path: str
    ref_source: str  # what runs as the reference (its reference part alone for a self-contained file)
    doc: Document
    ref_doc: Document
    where: Location
    lenient: bool
    lease: GpuLease | None = None
    lease_depth: int = 0  # shared holds nest; an exclusive hold makes them no-ops
    alone: bool = False  # the rest of the run holds the lease exclusively (`alone`)
    # a correctness trial's inputs and the candidate's outputs go over the socket: GPU memory failed
    # once for them (`send_shared`, `fetch`)
    fetch_shared_off: bool = False
    ref_call_s: float = 0.0  # the reference's time per call, measured by the judge in correctness
    profiled_candidate: int = 0  # profiler sessions the candidate's runner ran for the judge
    profiled_reference: int = 0
    own_kernels: frozenset[str] = frozenset()  # kernels compiled into the candidate's libraries
    own_kernels_error: str = ""
    # output index -> the largest share of the fp32 reference's own error in that output (rms /
    # rms) where correctness judged it against the float64 reference (it cancels): the timed
    # digests allow for it (judge_timing.py `_digest_bound`)
    exact_own_shares: dict[int, float] = field(default_factory=dict)
    # output index -> the relative norm bound correctness held it to instead of fp32's (its
    # reference computes in 16 bits: tolerance.LOWER_REL_NORM_BOUND); the timed digests follow it
    lower_bounds: dict[int, float] = field(default_factory=dict)
    # the reference's weights that held a constant and were drawn (run/weights.py), as JSON for
    # the runners, which give the matching weights of their model the same values
    constant_keys: list[list[Any]] = field(default_factory=list)


def new_state(
    job: dict[str, Any],
    session: Session,
    out: dict[str, Any],
    diags: list[Diagnostic],
    walls: dict[str, float],
) -> JudgeState:
    """The state of one job: its configuration and documents read, nothing run yet."""
    from cudice.verifier.config import VerifyConfig
    from cudice.verifier.source.document import parse_document

    cfg = dict(job["config"])
    cfg["cache_dir"], cfg["arch_list"] = Path(cfg["cache_dir"]), tuple(cfg["arch_list"])
    config = VerifyConfig(**cfg)
    cand_path, ref_path = str(job["candidate_path"]), str(job["reference_path"])
    ref_source = str(job["reference_source"])
    if ref_path == cand_path and ref_source == job["candidate_source"]:
        # a self-contained candidate is its own reference: only its reference part runs here (and in
        # the reference's runner); its load_inline and ModelNew run in the candidate's runner alone
        from cudice.verifier.source.reference import reference_only_source

        ref_source = reference_only_source(ref_source)
    doc = parse_document(job["candidate_source"], cand_path)
    ref_doc = parse_document(job["reference_source"], ref_path)
    where = doc.index.location(doc.model_new.span, cand_path) if doc.model_new else Location(cand_path, 1, 1)
    return JudgeState(
        config=config,
        device=str(job.get("device", "cuda")),
        session=session,
        out=out,
        diags=diags,
        walls=walls,
        cand_path=cand_path,
        cand_source=str(job["candidate_source"]),
        ref_path=ref_path,
        ref_source=ref_source,
        doc=doc,
        ref_doc=ref_doc,
        where=where,
        lenient=config.static_policy == "lenient",
    )


def add_wall(st: JudgeState, name: str, t0: float) -> None:
    """Add the time since `t0` to the sub-phase `name` (summed over calls; stage_wall_s reports it)."""
    st.walls[name] = st.walls.get(name, 0.0) + time.perf_counter() - t0


def limit_s(st: JudgeState, calls: int) -> float:
    """How long a request of `calls` forward calls may take before the candidate is a timeout."""
    return max(10.0, 100.0 * st.ref_call_s * calls) + 10.0 * calls * st.ref_call_s


MEMORY_SHORT_SHARE = 0.25  # free share of the GPU's memory below which repetitions give theirs back


@contextlib.contextmanager
def shared(st: JudgeState) -> Iterator[None]:
    """Hold the GPU's lease shared (GPU work that may overlap other verifications' correctness);
    inside another hold, shared or exclusive, nothing more is taken."""
    outer = st.lease is not None and st.lease_depth == 0
    with st.lease.shared() if outer and st.lease is not None else contextlib.nullcontext():
        st.lease_depth += 1
        try:
            yield
        finally:
            st.lease_depth -= 1


@contextlib.contextmanager
def exclusive(st: JudgeState) -> Iterator[None]:
    """Hold the GPU's lease alone: nothing else of cudice's runs on this GPU meanwhile."""
    if st.alone:  # held exclusively for the whole run already
        yield
        return
    assert st.lease_depth == 0, "an exclusive hold cannot nest in a shared one"
    with st.lease.exclusive() if st.lease is not None else contextlib.nullcontext():
        st.lease_depth += 1  # shared holds inside are no-ops
        try:
            yield
        finally:
            st.lease_depth -= 1


@contextlib.contextmanager
def alone(st: JudgeState, wait_s: float) -> Iterator[bool]:
    """Hold the GPU's lease exclusively for the block (`VerifyConfig.run_alone`): no other
    verification's work on this GPU meanwhile; every shared or exclusive hold inside is a no-op.
    Yields whether it got the lease within `wait_s`; where not, the block runs as any run does
    (its holds taken as it goes), and `alone_lease_timeout` in the walls says so."""
    assert st.lease_depth == 0 and not st.alone, "the whole-run hold is taken once, outside any other"
    with contextlib.ExitStack() as stack:
        if st.lease is not None:
            try:
                stack.enter_context(st.lease.exclusive(timeout_s=wait_s))
            except LeaseTimeout:
                st.walls["alone_lease_timeout"] = 1.0
                yield False
                return
        st.lease_depth += 1
        st.alone = True
        try:
            yield True
        finally:
            st.alone = False
            st.lease_depth -= 1


# -- requests ----------------------------------------------------------------------------------------
@contextlib.contextmanager
def talking(st: JudgeState, link: RunnerLink, stage: Stage, *, outputs: bool = False) -> Iterator[None]:
    """A runner that dies or breaks the protocol is a crash of the candidate, never of the judge.
    With `outputs` (a request answered with the candidate's outputs), a reply carrying more bytes
    than outputs of the reference's shapes allow is `incorrect`, as through a shared buffer."""
    try:
        yield
    except RunnerTimeout as exc:
        raise Stop(
            Verdict.TIMEOUT,
            stage,
            [
                diag(
                    "runtime.timeout",
                    f"The {link.role} did not answer within {exc.limit_s:.1f} s (the limit is max(10 s, "
                    f"100 x the reference's {st.ref_call_s * 1e3:.3f} ms) per call): a kernel or "
                    "forward that hangs or loops. Check loop bounds and grid-stride conditions.",
                    stage,
                    st.where,
                )
            ],
            link.log_tail(),
        ) from None
    except channel.OversizeMessage as exc:
        if link.role != "candidate" or not outputs:
            _broke(st, link, stage, exc)
        raise Stop(  # as a shared buffer too large for the outputs is (`_take_shared`)
            Verdict.INCORRECT,
            stage,
            [
                diag(
                    "dynamic.output_not_plain_tensor",
                    f"The candidate's outputs could not be read: its reply carries {exc.sent} bytes, "
                    f"more than the {exc.allowed} that outputs of the reference's shapes and dtypes "
                    "allow. Return outputs shaped like the reference's.",
                    stage,
                    st.where,
                )
            ],
        ) from None
    except (channel.ChannelError, OSError) as exc:
        _broke(st, link, stage, exc)


def _broke(st: JudgeState, link: RunnerLink, stage: Stage, exc: Exception) -> NoReturn:
    """A runner that ended or broke the protocol: `crash`."""
    rc = link.proc.poll()
    why = f"exit status {rc}" if rc is not None else "it stopped answering"
    # the boundary's PID 1 passes on a runner killed by signal N as exit status 128 + N (a plain
    # child's is -N); a runner can also exit with 128 + N itself, hence "likely"
    with contextlib.suppress(ValueError):
        if rc is not None and rc < 0:
            why += f", killed by {signal.Signals(-rc).name}"
        elif rc is not None and 128 < rc < 128 + 65:
            why += f" (128 + {rc - 128}: likely killed by {signal.Signals(rc - 128).name})"
    raise Stop(
        Verdict.CRASH,
        stage,
        [
            diag(
                "runtime.crash",
                f"The {link.role} process ended or broke the protocol ({why}: {exc}); see the error "
                "text for its last output.",
                stage,
                st.where,
            )
        ],
        link.log_tail(),
    ) from None


def ask(
    st: JudgeState,
    link: RunnerLink,
    header: dict[str, Any],
    stage: Stage,
    blobs: Sequence[memoryview] = (),
    *,
    max_bytes: int = 0,
    on_build: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    deadline_s: float | None = None,
    spin_s: float = 0.0,
    outputs: bool = False,
) -> tuple[dict[str, Any], list[bytearray]]:
    if deadline_s is None and on_build is None:
        deadline_s = limit_s(st, 1)
    # a load holds no lease: the build it asks for may take minutes of CPU, not GPU
    lease = shared(st) if on_build is None else contextlib.nullcontext()
    with talking(st, link, stage, outputs=outputs), lease:
        rep, got = link.request(
            header, blobs, max_bytes=max_bytes, on_build=on_build, deadline_s=deadline_s, spin_s=spin_s
        )
    if not rep.get("ok"):
        refused(st, link, rep, stage)
    return rep, got


def release_memory(st: JudgeState, stage: Stage, *, collect: bool = True) -> None:
    """After a phase that held large tensors: both runners drop what it left and give their caching
    allocators' free blocks back to the driver (run/runner.py `op_release`), and so does the judge.
    Memory a process reserves and no longer uses is memory another verification on the same GPU
    cannot have: twelve at once on an H100, each process keeping its peak, ran out of it in 9 of
    21 runs. `collect`: full garbage collections too (~0.1 s each). Walls: `release_memory`
    (seconds, summed)."""
    import gc

    t0 = time.perf_counter()
    for link in (st.session.ref, st.session.cand):
        ask(st, link, {"op": "release", "collect": collect}, stage)
    if collect:
        gc.collect()
    if st.device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()
    add_wall(st, "release_memory", t0)


def memory_is_short(st: JudgeState) -> bool:
    """Whether less than `MEMORY_SHORT_SHARE` of the GPU's memory is free now (the driver's count,
    every process's included): then a timing repetition's memory is given back after it
    (`release_memory`), at the price of fresh allocations for the next one's outputs; with memory
    to spare it stays cached, and the next repetition's calls allocate nothing new."""
    if not st.device.startswith("cuda"):
        return False
    import torch

    free, total = torch.cuda.mem_get_info()
    return free < MEMORY_SHORT_SHARE * total


def reported_diagnostics(link: RunnerLink, rep: dict[str, Any]) -> list[Diagnostic]:
    """The diagnostics of a runner's reply. The candidate's are its own claims: a code that says the
    verifier failed (`VERIFIER_FAULT_CODES`, `VERIFIER_FAULT_PREFIXES`) becomes `runtime.exception`,
    and every `runtime.exception` message says that the candidate's process reported it, so no
    reply of the candidate's can pass for the judge's, the reference's or the sandbox's failure."""
    got = [Diagnostic.from_dict(d) for d in rep.get("diagnostics", []) if isinstance(d, dict)]
    if link.role != "candidate":
        return got
    out = []
    for d in got:
        code, message = d.code, d.message
        if code in VERIFIER_FAULT_CODES or code.startswith(VERIFIER_FAULT_PREFIXES):
            code, message = "runtime.exception", f"{code}: {message}"
        if code == "runtime.exception" and not message.startswith(CANDIDATE_SAYS):
            message = CANDIDATE_SAYS + message
        out.append(dataclasses.replace(d, code=code, message=message))
    return out


def refused(st: JudgeState, link: RunnerLink, rep: dict[str, Any], stage: Stage) -> None:
    """A runner's failure reply as the verdict it may claim (`RUNNER_VERDICTS`), else a runtime error;
    the candidate's diagnostics as `reported_diagnostics` reads them, its error text marked as its."""
    claimed = str(rep.get("verdict", ""))
    verdict = Verdict(claimed) if claimed in RUNNER_VERDICTS else Verdict.RUNTIME_ERROR
    got_diags = reported_diagnostics(link, rep)
    if not got_diags:
        got_diags = [
            diag(
                "runtime.exception",
                f"The {link.role} process reported: {rep.get('error')}",
                stage,
                st.where,
            )
        ]
    error = str(rep.get("error") or "")[-4000:]
    if error and link.role == "candidate":  # never an error text of the verifier's own ("cancelled")
        error = CANDIDATE_SAYS + error
    raise Stop(verdict, stage, got_diags, error or None)


def decode(st: JudgeState, rep: dict[str, Any], blobs: list[bytearray]) -> Any:
    try:
        return channel.decode(rep.get("outputs"), blobs, st.device)
    except channel.ChannelError as exc:
        raise Stop(
            Verdict.INCORRECT,
            Stage.CORRECTNESS,
            [
                diag(
                    "dynamic.output_not_plain_tensor",
                    f"The candidate's outputs could not be read: {exc}",
                    Stage.CORRECTNESS,
                    st.where,
                )
            ],
        ) from None


@dataclass(frozen=True, slots=True)
class SharedSend:
    """How `send_shared` went: `taken` by the runner, else `why` not and on which `side` ("judge"
    or "runner"); `unavailable`: this side cannot share at all (no GPU, no cuda-bindings, a driver
    without POSIX fds), so there is no point trying again."""

    taken: bool
    why: str = ""
    side: str = ""
    unavailable: bool = False


def transfer_deadline_s(nbytes: int) -> float:
    """How long a runner may take to take in `nbytes` of sets or inputs: moving the bytes, not the kernel."""
    return 30.0 + nbytes / 100e6


def send_shared(
    st: JudgeState, link: RunnerLink, header: dict[str, Any], key: str, value: object, stage: Stage
) -> SharedSend:
    """Send `value` as `header[key]` through a GPU buffer made for `link`'s runner alone
    (run/shared_staging.py `offer`): filled here, its POSIX fd passed after the request
    (run/channel.py `send_fd`), released once the runner replied and never read again. A runner
    that cannot map it answers `"staged": false` and the caller sends over the socket; a runner that
    dies or refuses ends the job as any request does; a value the channel cannot carry raises
    `ChannelError` (the socket would refuse it the same way)."""
    from cudice.verifier.run import shared_staging

    with shared(st):
        lay = shared_staging.layout(value)  # GPU copies of strided tensors: inside the lease
        try:
            buf, fd = shared_staging.offer(lay, st.device)
        except Exception as exc:  # no GPU, no cuda-bindings, a driver without POSIX fds, no memory
            unavailable = isinstance(exc, shared_staging.SharedUnavailable)
            return SharedSend(False, f"judge: {type(exc).__name__}: {exc}"[:500], "judge", unavailable)
        try:
            with talking(st, link, stage):
                try:
                    channel.send(link.sock, {**header, key: lay.tree, "shared": {"size": buf.size}})
                    channel.send_fd(link.sock, fd)
                finally:
                    os.close(fd)  # the runner has its own descriptor now
                rep = reply_to(link, transfer_deadline_s(lay.size))
        finally:
            buf.close()  # after the reply (or the runner's end): never read back
    if not rep.get("ok"):
        refused(st, link, rep, stage)
    if rep.get("staged") is True:
        return SharedSend(True)
    return SharedSend(False, f"the {link.role}'s runner: {rep.get('why')!s}"[:500], "runner")


def reply_to(link: RunnerLink, deadline_s: float) -> dict[str, Any]:
    """The runner's reply to a request already sent (a build it asks for meanwhile is refused, as
    `RunnerLink.request` refuses it without a builder); `RunnerTimeout` past `deadline_s`."""
    import select

    while True:
        if not select.select([link.sock], [], [], deadline_s)[0]:
            raise RunnerTimeout(deadline_s)
        rep, _ = channel.recv(link.sock, 0)
        if rep.get("op") != "build":
            return rep
        channel.send(link.sock, {"ok": False, "error": "no builds here"})


SHARED_FETCH_MIN_BYTES = 8 << 20  # outputs this large or larger come through GPU memory (`fetch`)


def fetch(st: JudgeState, link: RunnerLink, header: dict[str, Any], stage: Stage, *, max_bytes: int) -> Any:
    """Ask `link`'s runner for outputs (`header`: a `fetch` or `kept` request) and return them
    decoded on the judge's device.

    On a GPU with shared staging on (`VerifyConfig.timing_staging`), outputs that may take
    SHARED_FETCH_MIN_BYTES or more (`max_bytes`) may come through a GPU buffer the runner makes for
    this reply alone (run/shared_staging.py `offer`, its POSIX fd after the reply): the judge maps
    it only if it is no larger than a buffer for `max_bytes` (`buffer_bound`), clones every tensor
    the layout names into its own memory (`take`: each entry contiguous, inside the buffer, all of
    them within `max_bytes`) and releases it. Over the socket the same outputs cross host memory
    twice, about 2 s per GB each way; below the bound the socket takes milliseconds. What the
    buffer holds is only what the runner would have sent: a wrong or malformed layout is the
    candidate's, as over the socket. Where the judge cannot map what it got (a driver that refuses,
    a descriptor that is no GPU buffer, no memory for the clones), it asks again over the socket and
    keeps to the socket for this run (`fetch_shared_fallback` in the walls, and an information
    diagnostic with the reason)."""
    from cudice.verifier.run import shared_staging

    most = 0
    if shares_transfer(st, max_bytes):
        try:
            most = shared_staging.buffer_bound(max_bytes, st.device)
        except shared_staging.SharedUnavailable as exc:
            shared_fallback(st, stage, f"judge: {type(exc).__name__}: {exc}")
    asked = {**header, "shared": True} if most else header
    rep, blobs = ask(st, link, asked, stage, max_bytes=max_bytes, outputs=True)
    if not (most and "shared" in rep):
        return decode(st, rep, blobs)
    got = _take_shared(st, link, rep, stage, max_bytes, most)
    if got is not _NOT_MAPPED:
        return got
    rep, blobs = ask(st, link, header, stage, max_bytes=max_bytes, outputs=True)  # again, over the socket
    return decode(st, rep, blobs)


_NOT_MAPPED = object()


def _take_shared(
    st: JudgeState, link: RunnerLink, rep: dict[str, Any], stage: Stage, max_bytes: int, most: int
) -> Any:
    """The outputs behind the descriptor that follows `rep`, or _NOT_MAPPED where they cannot be
    mapped; the descriptor closed on every path."""
    import select

    import torch
    from cudice.verifier.run import shared_staging

    with talking(st, link, stage):  # the descriptor follows the reply at once
        deadline = limit_s(st, 1)
        if not select.select([link.sock], [], [], deadline)[0]:
            raise RunnerTimeout(deadline)
        fd = channel.recv_fd(link.sock)
    handed = False  # `take` closes the descriptor once called
    try:
        spec = rep.get("shared")
        size = spec.get("size") if isinstance(spec, dict) else None
        if not (isinstance(size, int) and not isinstance(size, bool) and 0 < size <= most):
            _unreadable(st, stage, f"a shared output buffer of {size!r} bytes (at most {most} expected)")
        with shared(st):
            handed = True
            got = shared_staging.take(fd, size, rep.get("outputs"), st.device, budget=max_bytes)
        st.walls["fetch_shared_count"] = st.walls.get("fetch_shared_count", 0.0) + 1
        return got
    except channel.ChannelError as exc:
        _unreadable(st, stage, str(exc))
    except (shared_staging.SharedUnavailable, torch.cuda.OutOfMemoryError) as exc:
        shared_fallback(st, stage, f"judge: {type(exc).__name__}: {exc}")  # the socket from now on
        return _NOT_MAPPED
    finally:
        if not handed:
            os.close(fd)


def shares_transfer(st: JudgeState, nbytes: int) -> bool:
    """Whether a correctness transfer of `nbytes` (a trial's inputs, outputs) goes through GPU
    memory: on a GPU, with shared staging on, SHARED_FETCH_MIN_BYTES or more, and no failure of
    it earlier in this run."""
    return (
        st.device.startswith("cuda")
        and st.config.timing_staging == "shared"
        and not st.fetch_shared_off
        and nbytes >= SHARED_FETCH_MIN_BYTES
    )


def shared_fallback(st: JudgeState, stage: Stage, why: str) -> None:
    """Inputs and outputs go over the socket for the rest of the run, because of `why`."""
    st.fetch_shared_off = True
    st.walls["fetch_shared_fallback"] = st.walls.get("fetch_shared_fallback", 0.0) + 1
    st.diags.append(
        diag(
            "verify.shared_fetch_unavailable",
            f"A correctness trial's inputs and the candidate's outputs go over the socket in this "
            f"run, not through GPU memory (timed sets are staged apart): {why}"[:500],
            stage,
            st.where,
            Severity.INFORMATION,
        )
    )


def _unreadable(st: JudgeState, stage: Stage, why: str) -> NoReturn:
    raise Stop(
        Verdict.INCORRECT,
        stage,
        [
            diag(
                "dynamic.output_not_plain_tensor",
                f"The candidate's outputs could not be read: {why}",
                stage,
                st.where,
            )
        ],
    )


def stop_on_errors(st: JudgeState, found: list[Diagnostic], stage: Stage) -> None:
    errors = [d for d in found if d.severity is Severity.ERROR]
    st.diags.extend(d for d in found if d.severity is not Severity.ERROR)
    if errors:
        raise Stop(Verdict.INCORRECT, stage, errors)
