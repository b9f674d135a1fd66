"""What the sessions of a multi-client server share (`team.py`): the model worker, the verification
jobs (viewed per session through `SessionJobs`, keys namespaced "<session>|<uri>"), each session's
bound on pending work (`WorkLimit`), and the team-wide bound on generations (`Team.claim_generation`:
no more than the batching engine takes at once, its rows + its queue).

Contract: nothing here knows the language server; a session is any `Member` (send a status, show a
notice, say whether it wants a warm verifier), so this module never imports `core`. The flows that
use it (admission, the shared model's load, serving connections) are in `team.py`.

The model worker is built with `batch` options (`BatchOptions`, from the environment in
`team.run_team`): its generate and infill jobs are rows of one continuous-batching engine in the
worker (server/workers/model.py), unless `batch` is None or the engine cannot batch (then they run
one at a time, as in the single-editor server).

Not covered: fairness between sessions beyond the per-session bound (the batching engine admits
FIFO), priorities.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from cudice.server.workers.model import BatchOptions, ModelWorker
    from cudice.server.workers.verify import VerifyJobs, VerifyRequest
    from cudice.verifier.source.result import VerifyResult

log = logging.getLogger("cudice.server.team")

DEFAULT_MAX_PENDING = 4


class Member(Protocol):
    """A session, as the shared state sees it (a `CudiceServer`)."""

    def send_status(self, message: str | None = None, uri: str | None = None) -> None: ...

    def notice(self, message: str) -> None: ...

    def wants_warm_verifier(self) -> bool: ...


class Team:
    """What every session of a multi-client server shares: the model worker and the verification jobs."""

    def __init__(
        self,
        *,
        worker_env: dict[str, str] | None = None,
        max_pending: int = DEFAULT_MAX_PENDING,
        batch: BatchOptions | None = None,
    ):
        """`batch`: the model worker's continuous-batching engine; None runs generations one at a time."""
        self.worker_env = worker_env
        self.max_pending = max(1, max_pending)
        self.batch = batch
        self.generations = 0  # generations claimed by every session (running or waiting for the model)
        self.sessions: dict[str, Member] = {}
        self._ids = itertools.count(1)
        self._model: ModelWorker | None = None
        self._jobs: VerifyJobs | None = None
        self.load_lock = asyncio.Lock()
        self.num_loads = 0  # model loads started by sessions (tests, the log)

    def new_id(self) -> str:
        return f"s{next(self._ids)}"

    @property
    def model(self) -> ModelWorker:
        if self._model is None:
            from cudice.server.workers.model import ModelWorker

            self._model = ModelWorker(
                on_state=self._on_state, on_notice=self._on_notice, env=self.worker_env, batch=self.batch
            )
        return self._model

    def claim_generation(self) -> str | None:
        """Count one generation against the batching engine's capacity (its rows + its queue, known
        once the model is loaded batched); None when admitted (call `release_generation` when it
        ends), else why it was refused. A worker that runs jobs one at a time has no such bound."""
        model = self._model
        capacity = model.capacity if model is not None and model.batched else None
        if capacity is not None and self.generations >= capacity:
            options = self.batch
            limits = (
                f"{options.max_batch} decoding + {options.max_queue} waiting; the server's "
                "CUDICE_TEAM_MAX_BATCH / CUDICE_TEAM_MAX_QUEUE"
                if options is not None
                else f"{capacity}"
            )
            return (
                f"the shared model is busy: {self.generations} generations of the editors on this "
                f"server are running or waiting, its limit ({limits}); the new generation was not "
                "started. Wait for one to finish or cancel one (cudice.cancel)"
            )
        self.generations += 1
        return None

    def release_generation(self) -> None:
        self.generations = max(0, self.generations - 1)

    @property
    def jobs(self) -> VerifyJobs:
        if self._jobs is None:
            from cudice.server.workers.verify import VerifyJobs

            self._jobs = VerifyJobs(
                env=self.worker_env,
                spare=lambda: any(s.wants_warm_verifier() for s in self.sessions.values()),
            )
        return self._jobs

    def _on_state(self, state: str, message: str) -> None:
        log.info("shared model %s: %s", state, message)
        for s in list(self.sessions.values()):
            s.send_status(message)

    def _on_notice(self, message: str) -> None:
        for s in list(self.sessions.values()):
            s.notice(message)

    async def close(self) -> None:
        """The process ends: stop every run and the model worker."""
        if self._jobs is not None:
            self._jobs.cancel_all()
        if self._model is not None:
            await self._model.shutdown()


class SessionJobs:
    """One session's view of the shared `VerifyJobs`: the same methods, keyed by "<session>|<uri>"."""

    def __init__(self, jobs: VerifyJobs, session_id: str) -> None:
        self.shared = jobs
        self.prefix = f"{session_id}|"

    def key(self, uri: str) -> str:
        return self.prefix + uri

    def _request(self, request: VerifyRequest) -> VerifyRequest:
        return dataclasses.replace(request, uri=self.key(request.uri))

    async def run(
        self,
        request: VerifyRequest,
        *,
        on_partial: Callable[[VerifyResult], None] | None = None,
        on_stage: Callable[[str], None] | None = None,
    ) -> VerifyResult | None:
        return await self.shared.run(self._request(request), on_partial=on_partial, on_stage=on_stage)

    async def prebuild(self, request: VerifyRequest) -> VerifyResult | None:
        return await self.shared.prebuild(self._request(request))

    async def prestart(self) -> None:
        await self.shared.prestart()

    def prepare_when_idle(self) -> None:
        self.shared.prepare_when_idle()

    def cancel(self, uri: str) -> bool:
        return self.shared.cancel(self.key(uri))

    def cancel_prebuild(self, uri: str) -> bool:
        return self.shared.cancel_prebuild(self.key(uri))

    def prebuilding(self, uri: str) -> str | None:
        return self.shared.prebuilding(self.key(uri))

    def running_uris(self) -> list[str]:
        return [k.removeprefix(self.prefix) for k in self.shared.running_uris() if k.startswith(self.prefix)]

    def is_running(self, uri: str) -> bool:
        return self.shared.is_running(self.key(uri))

    def running_source(self, uri: str) -> str | None:
        return self.shared.running_source(self.key(uri))

    def running_version(self, uri: str) -> int | None:
        return self.shared.running_version(self.key(uri))

    @property
    def spare_pid(self) -> int | None:
        return self.shared.spare_pid

    def cancel_all(self) -> None:
        """This session's runs and builds only (the spare worker is shared and stays)."""
        for uri in self.running_uris():
            self.cancel(uri)
        for key in [k for k in self.shared._prebuilds if k.startswith(self.prefix)]:
            self.shared.cancel_prebuild(key)


class WorkLimit:
    """At most `limit` pending verifications + generations of one session. A verification of a
    document already being verified is always granted: it replaces that run (whose claim ends with
    it), so it does not add work."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held: dict[tuple[str, str], int] = {}

    def pending(self) -> int:
        return sum(self.held.values())

    def claim(self, kind: str, uri: str) -> bool:
        key = (kind, uri)
        supersedes = kind == "verify" and key in self.held
        if not supersedes and self.pending() >= self.limit:
            return False
        self.held[key] = self.held.get(key, 0) + 1
        return True

    def release(self, kind: str, uri: str) -> None:
        key = (kind, uri)
        left = self.held.get(key, 0) - 1
        if left > 0:
            self.held[key] = left
        else:
            self.held.pop(key, None)
