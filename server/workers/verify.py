"""Verification runs, one worker process each, at most one per document.

`VerifyJobs.run` starts `cudice.server.workers.verify_child` for a document, streams each finished
stage's partial result (static, then compile findings) to a callback, and returns the final
`VerifyResult`. A newer run of the same document kills the older one's whole process family
(`procs.kill_family`: its compilers, which run in sessions of their own, and its sandbox too),
and the older call returns None. A run past its timeout is killed the same way and reported as
`timeout`; a worker that dies without a result is reported as `crash` with the tail of its
stderr.

Static stage once per save: a request may carry the static result the server computed for the
saved text (`VerifyRequest.static`, server/verification.py; the quick check gets the same one);
the worker's verifier takes it instead of running the checks when its key is that of the inputs
it verifies (text, path, reference file, strictness), and runs them as before otherwise.

Warm spare (`spare()` true: the server passes "a GPU is here"): one worker is started ahead of
the next run with `CUDICE_VERIFY_WARM=1`, so its judge and runner processes (torch, CUDA contexts:
seconds) are up when the user saves (verify_child.py). A run takes it and starts the next; a
spare is started when a candidate is opened (`prestart`), and killed with its family by
`cancel_all` like a run.

Building while editing (`prebuild`): the server sends a document's unsaved text, after a pause in
typing, to a build-only worker of its own (server/prebuild.py); the build cache is shared and
locked per object (verifier/build/objects.py), so the save's run reuses those objects, or waits for
them while they are still being compiled.

First compile error ahead (`prepare_when_idle`): the first slim-build error verdict per build cache
needs two lists (a macro comparison and the full torch headers' names: nvcc preprocessor runs,
seconds of CPU, docs/benchmarks.md) that every later one reads from the cache. When no run and no
build of unsaved text is under way (`prestart`, which the server calls when a candidate is opened on
a GPU box and server/prebuild.py calls after a pause in typing; `prepare_when_idle` itself, which it
calls when a candidate is opened on any other box; and the end of each run or build), and still none
`PREP_IDLE_S` later, one worker computes them at the lowest CPU priority (verify_child.py,
`{"prepare": "first_error"}`), until it has finished once per `VerifyJobs`. A run or a build that
starts meanwhile stops it at once: its stdin closes, it kills its preprocessors and exits, and it is
killed with its family after `PREP_GRACE_S`; the lists it had not finished are computed again at the
next idle moment (or by the first error verdict, if that comes first). A worker that fails is not
tried again. `cancel_all` kills it for good. It runs with the verifier's default build settings (the
build cache of the server's environment), the ones the runs use.

Not covered: queueing across documents (runs of different documents proceed in parallel; the
verifier's pool limits GPU use); a spare started before a settings change keeps the verifier
defaults it was started with for its judge's cache and memory limit (the server changes neither);
include sets other than the usual one (their first error verdict computes its own lists); an event
loop closed while a worker process is being started (the preparation's or a spare's) waits for
that start forever (asyncio in Python 3.11); the `PREP_IDLE_S` wait keeps the preparation's start
out of a shutdown that follows the last job at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cudice.server.workers.protocol import STATIC_FIELD, ChildProcess
from cudice.server.workers.verify_child import PREPARE_FIRST_ERROR, WARM_ENV
from cudice.verifier.config import VerifyConfig
from cudice.verifier.source.result import Stage, Verdict, VerifyResult

if TYPE_CHECKING:
    from cudice.verifier.api import StaticResult

log = logging.getLogger(__name__)

WORKER_MODULE = "cudice.server.workers.verify_child"
PREP_IDLE_S = 1.0  # idle this long before the first-error preparation starts (`prepare_when_idle`)
PREP_GRACE_S = 1.0  # a stopped first-error preparation exits within this, or is killed with its family


@dataclass(frozen=True, slots=True)
class VerifyRequest:
    uri: str
    path: str
    source: str
    version: int | None
    config: VerifyConfig = field(default_factory=VerifyConfig)
    timeout_s: float = 300.0
    static: StaticResult | None = None  # the static stage's result computed for this save, if any

    def message(self) -> dict[str, Any]:
        """What the worker reads on its stdin (verify_child.py lists the fields): the settings as the
        fields that differ from the worker's own defaults (its cache), and the static result."""
        found: dict[str, Any] = {"path": self.path, "source": self.source, "config": self.config.overrides()}
        if self.static is not None:
            found[STATIC_FIELD] = self.static.to_dict()
        return found


@dataclass(slots=True)
class _Job:
    request: VerifyRequest
    proc: ChildProcess
    is_cancelled: bool = False


class VerifyJobs:
    def __init__(
        self,
        *,
        env: dict[str, str] | None = None,
        timeout_margin_s: float = 30.0,
        spare: Callable[[], bool] | None = None,
        prep_idle_s: float = PREP_IDLE_S,
    ) -> None:
        self.env = env
        self.timeout_margin_s = timeout_margin_s
        self.spare = spare or (lambda: False)
        self.prep_idle_s = prep_idle_s
        self._jobs: dict[str, _Job] = {}
        self._prebuilds: dict[str, _Job] = {}  # uri -> the build of its unsaved text (`prebuild`)
        self._spare: tuple[ChildProcess, asyncio.Future[None]] | None = None  # the worker, its start
        self._prep: ChildProcess | None = None  # the worker preparing the first error (`prepare_when_idle`)
        self._prep_state = "todo"  # "todo", "done" (finished, or failed: not retried) or "off" (cancel_all)
        self._prep_timer: asyncio.TimerHandle | None = None  # the preparation's start, `prep_idle_s` ahead
        self._tasks: set[asyncio.Future[None]] = set()  # the preparation and its stops, kept until done

    def _new_proc(self, warm: bool) -> ChildProcess:
        env = dict(os.environ if self.env is None else self.env)
        if warm:
            env[WARM_ENV] = "1"
        else:
            env.pop(WARM_ENV, None)
        return ChildProcess(WORKER_MODULE, env=env)

    async def prestart(self) -> None:
        """Start the spare worker now if there should be one and there is none; and, when nothing
        runs, the first-error preparation (`prepare_when_idle`)."""
        self.prepare_when_idle()
        if self._spare is None and self.spare():
            proc = self._new_proc(warm=True)
            started = asyncio.ensure_future(proc.start())
            self._spare = (proc, started)
            await started

    @staticmethod
    async def _spare_ready(proc: ChildProcess, started: asyncio.Future[None]) -> bool:
        """Whether a spare worker taken for a run is up (its start may still be under way)."""
        try:
            await started
        except Exception as exc:  # could not start: the run starts its own worker
            log.warning("the spare verification worker did not start: %s", exc)
            return False
        if not proc.is_alive:
            proc.kill()
            return False
        return True

    def _busy(self) -> bool:
        return bool(self._jobs or self._prebuilds)

    def prepare_when_idle(self) -> None:
        """Start the first-error preparation (module docstring) in `prep_idle_s` if it is still to
        do and no run or build of unsaved text is under way then; it runs in the background. Needs a
        running event loop."""
        if self._prep_state != "todo" or self._prep is not None or self._prep_timer is not None:
            return
        if not self._busy():
            self._prep_timer = asyncio.get_running_loop().call_later(self.prep_idle_s, self._start_prep)

    def _start_prep(self) -> None:
        self._prep_timer = None
        if self._prep_state != "todo" or self._prep is not None or self._busy():
            return
        proc = self._new_proc(warm=False)
        self._prep = proc
        self._keep(asyncio.ensure_future(self._prepare(proc)))

    def _keep(self, task: asyncio.Future[None]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _prepare(self, proc: ChildProcess) -> None:
        """Follow one preparation worker to its end; `_stop_prep` may end it first."""
        try:
            await proc.start()
            if self._prep is not proc:  # stopped while it started
                return
            await proc.send({"prepare": PREPARE_FIRST_ERROR, "config": {}})
            async for event in proc.events():
                if event.get("event") == "prepared" and self._prep is proc:
                    self._prep_state = "done" if event.get("finished") else "todo"
                    log.info("first compile error prepared (finished: %s)", event.get("finished"))
                    return
            if self._prep is proc:  # exited without a word, and not stopped by us: do not try again
                self._prep_state = "done"
                log.warning(
                    "preparing the first compile error failed (the first error verdict computes its "
                    "lists itself, ~15 s): %s",
                    proc.error_tail(),
                )
        except Exception as exc:  # could not start: the first error verdict computes the lists
            if self._prep is proc:
                self._prep_state = "done"
            log.warning("the first-error preparation did not start: %s", exc)
        finally:
            if self._prep is proc:
                self._prep = None
            proc.kill()  # its family (a preprocessor it left) too
            with contextlib.suppress(Exception):
                await proc.close(grace_s=0.5)

    def _stop_prep(self, *, kill: bool = False) -> None:
        """Stop the preparation, if one runs: a job needs the CPU (its stdin closes, it cancels its
        preprocessors and exits; killed with its family after `PREP_GRACE_S`), or with `kill` now."""
        if self._prep_timer is not None:
            self._prep_timer.cancel()
            self._prep_timer = None
        proc, self._prep = self._prep, None
        if proc is None:
            return
        if kill:
            proc.kill()
        else:
            self._keep(asyncio.ensure_future(proc.close(grace_s=PREP_GRACE_S)))

    @property
    def prep_pid(self) -> int | None:
        """The pid of the worker preparing the first error, while it runs (tests)."""
        return self._prep.pid if self._prep is not None else None

    @property
    def preparing(self) -> bool:
        """Whether a preparation is due, runs, or is still being stopped (tests wait for it to end)."""
        return self._prep is not None or self._prep_timer is not None or bool(self._tasks)

    @property
    def prep_state(self) -> str:
        """The preparation's state: `todo`, `done` or `off` (tests, logs)."""
        return self._prep_state

    @property
    def spare_pid(self) -> int | None:
        """The waiting spare worker's pid (tests)."""
        return self._spare[0].pid if self._spare is not None else None

    def running_uris(self) -> list[str]:
        return list(self._jobs)

    def is_running(self, uri: str) -> bool:
        return uri in self._jobs

    def running_source(self, uri: str) -> str | None:
        """The text the running verification of `uri` verifies, or None."""
        job = self._jobs.get(uri)
        return job.request.source if job else None

    def running_version(self, uri: str) -> int | None:
        job = self._jobs.get(uri)
        return job.request.version if job else None

    @staticmethod
    def _kill(jobs: dict[str, _Job], uri: str) -> bool:
        """Kill `uri`'s job in `jobs` (its worker's whole family); True if there was one."""
        job = jobs.pop(uri, None)
        if job is None:
            return False
        job.is_cancelled = True
        job.proc.kill()
        return True

    def cancel(self, uri: str) -> bool:
        """Kill the run of `uri`; True if one was running."""
        return self._kill(self._jobs, uri)

    def cancel_prebuild(self, uri: str) -> bool:
        """Kill the build of `uri`'s unsaved text; True if one was running."""
        return self._kill(self._prebuilds, uri)

    def prebuilding(self, uri: str) -> str | None:
        """The text whose build for `uri` is under way (`prebuild`), or None."""
        job = self._prebuilds.get(uri)
        return job.request.source if job else None

    async def prebuild(self, request: VerifyRequest) -> VerifyResult | None:
        """Build and link `request.source` (no run) while it is still edited, so the objects of the
        save that follows are in the build cache; a build of the same text already under way is
        left alone, one of other text is replaced. The result is not a verdict to show (the text was
        not saved): it is returned for the log; None when replaced or cancelled."""
        if self.prebuilding(request.uri) == request.source:
            return None
        self.cancel_prebuild(request.uri)
        self._stop_prep()
        request = dataclasses.replace(request, config=request.config.with_(build_only=True))
        job = _Job(request, self._new_proc(warm=False))
        self._prebuilds[request.uri] = job
        try:
            return await self._execute(job, None, None)
        finally:
            if self._prebuilds.get(request.uri) is job:
                del self._prebuilds[request.uri]
            self.prepare_when_idle()

    def cancel_all(self) -> None:
        """Kill every run, every build of unsaved text and the spare worker (the session ends)."""
        for uri in list(self._jobs):
            self.cancel(uri)
        for uri in list(self._prebuilds):
            self.cancel_prebuild(uri)
        self._prep_state = "off"
        self._stop_prep(kill=True)
        spare, self._spare = self._spare, None
        if spare is not None:
            proc, started = spare
            if started.done():
                proc.kill()
            else:  # killed as soon as its process exists
                started.add_done_callback(lambda _: proc.kill())

    async def run(
        self,
        request: VerifyRequest,
        *,
        on_partial: Callable[[VerifyResult], None] | None = None,
        on_stage: Callable[[str], None] | None = None,
    ) -> VerifyResult | None:
        """Verify; None when a newer run (or a cancel) superseded this one. A build of this
        document's unsaved text (`prebuild`) goes on if it is this text (the compile stage here waits
        for its objects instead of compiling them again) and is stopped otherwise."""
        self.cancel(request.uri)
        self._stop_prep()
        if self.prebuilding(request.uri) not in (None, request.source):
            self.cancel_prebuild(request.uri)
        spare, self._spare = self._spare, None  # taken and registered before any await: a newer
        job = _Job(request, spare[0] if spare is not None else self._new_proc(warm=False))  # run cancels it
        self._jobs[request.uri] = job
        try:
            ready = spare is not None and await self._spare_ready(*spare)
            if job.is_cancelled:
                return None
            if spare is not None and not ready:
                job.proc = self._new_proc(warm=False)
            return await self._execute(job, on_partial, on_stage, started=ready)
        finally:
            if self._jobs.get(request.uri) is job:
                del self._jobs[request.uri]
            self.prepare_when_idle()

    async def _execute(
        self,
        job: _Job,
        on_partial: Callable[[VerifyResult], None] | None,
        on_stage: Callable[[str], None] | None,
        *,
        started: bool = False,
    ) -> VerifyResult | None:
        """Send `job`'s request to its worker (started here unless `started`) and follow it to the end."""
        request, proc = job.request, job.proc
        try:
            if not started:
                await proc.start()
            await self.prestart()  # the next save's worker warms up while this one runs
            await proc.send(request.message())
            # the run stage may run twice (once more holding the GPU alone after running out of its
            # memory: verifier/api.py `_run_stage`), each within timeout_s, the builds beside it
            limit = 2 * request.timeout_s + self.timeout_margin_s
            try:
                final = await asyncio.wait_for(self._follow(proc, on_partial, on_stage), limit)
            except asyncio.TimeoutError:
                proc.kill()
                return VerifyResult(
                    verdict=Verdict.TIMEOUT,
                    stage=Stage.COMPILE,
                    path=request.path,
                    error=f"verification took longer than {limit:.0f} s and was stopped "
                    "(raise cudice.verify.timeoutSeconds if this kernel needs longer)",
                )
            if job.is_cancelled:
                return None
            if final is None:
                code = await proc.wait()
                return VerifyResult(
                    verdict=Verdict.CRASH,
                    stage=Stage.PARSE,
                    path=request.path,
                    error=f"verification worker exited with code {code} without a result:\n"
                    f"{proc.error_tail()}",
                )
            return final
        finally:
            proc.kill()
            with contextlib.suppress(Exception):
                await proc.close(grace_s=0.5)

    async def _follow(
        self,
        proc: ChildProcess,
        on_partial: Callable[[VerifyResult], None] | None,
        on_stage: Callable[[str], None] | None,
    ) -> VerifyResult | None:
        async for event in proc.events():
            kind = event.get("event")
            try:
                if kind == "partial" and on_partial is not None:
                    on_partial(VerifyResult.from_dict(event["result"]))
                elif kind == "stage" and on_stage is not None:
                    on_stage(str(event.get("stage")))
                elif kind == "final":
                    return VerifyResult.from_dict(event["result"])
            except (KeyError, ValueError, TypeError) as exc:
                log.error("unreadable verification event %r: %s", kind, exc)
        return None
