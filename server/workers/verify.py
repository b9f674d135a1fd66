"""Verification runs, one worker process each, at most one per document.

`VerifyJobs.run` starts `cudice.server.workers.verify_child` for a document, streams each finished
stage's partial result (static, then compile findings) to a callback, and returns the final
`VerifyResult`. A newer run of the same document kills the older one's whole process family
(`procs.kill_family`: its compilers, which run in sessions of their own, and its sandbox too),
and the older call returns None. A run past its timeout is killed the same way and reported as
`timeout`; a worker that dies without a result is reported as `crash` with the tail of its
stderr.

Warm spare (`spare()` true: the server passes "a GPU is here"): one worker is started ahead of
the next run with `CUDICE_VERIFY_WARM=1`, so its judge and runner processes (torch, CUDA contexts:
seconds) are up when the user saves (verify_child.py). A run takes it and starts the next; a
spare is started when a candidate is opened (`prestart`), and killed with its family by
`cancel_all` like a run.

Building while editing (`prebuild`): the server sends a document's unsaved text, after a pause in
typing, to a build-only worker of its own (server/prebuild.py); the build cache is shared and
locked per object (verifier/build/objects.py), so the save's run reuses those objects, or waits for
them while they are still being compiled.

Not covered: queueing across documents (runs of different documents proceed in parallel; the
verifier's pool limits GPU use); a spare started before a settings change keeps the verifier
defaults it was started with for its judge's cache and memory limit (the server changes neither).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field

from cudice.server.workers.protocol import ChildProcess
from cudice.server.workers.verify_child import WARM_ENV
from cudice.verifier.config import VerifyConfig
from cudice.verifier.source.result import Stage, Verdict, VerifyResult

log = logging.getLogger(__name__)

WORKER_MODULE = "cudice.server.workers.verify_child"


@dataclass(frozen=True, slots=True)
class VerifyRequest:
    uri: str
    path: str
    source: str
    version: int | None
    config: VerifyConfig = field(default_factory=VerifyConfig)
    timeout_s: float = 300.0


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
    ) -> None:
        self.env = env
        self.timeout_margin_s = timeout_margin_s
        self.spare = spare or (lambda: False)
        self._jobs: dict[str, _Job] = {}
        self._prebuilds: dict[str, _Job] = {}  # uri -> the build of its unsaved text (`prebuild`)
        self._spare: tuple[ChildProcess, asyncio.Future[None]] | None = None  # the worker, its start

    def _new_proc(self, warm: bool) -> ChildProcess:
        env = dict(os.environ if self.env is None else self.env)
        if warm:
            env[WARM_ENV] = "1"
        else:
            env.pop(WARM_ENV, None)
        return ChildProcess(WORKER_MODULE, env=env)

    async def prestart(self) -> None:
        """Start the spare worker now if there should be one and there is none."""
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
        request = dataclasses.replace(request, config=request.config.with_(build_only=True))
        job = _Job(request, self._new_proc(warm=False))
        self._prebuilds[request.uri] = job
        try:
            return await self._execute(job, None, None)
        finally:
            if self._prebuilds.get(request.uri) is job:
                del self._prebuilds[request.uri]

    def cancel_all(self) -> None:
        """Kill every run, every build of unsaved text and the spare worker (the session ends)."""
        for uri in list(self._jobs):
            self.cancel(uri)
        for uri in list(self._prebuilds):
            self.cancel_prebuild(uri)
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
            config = request.config.overrides()  # the worker's own defaults for the rest (its cache)
            await proc.send({"path": request.path, "source": request.source, "config": config})
            limit = request.timeout_s + self.timeout_margin_s
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
