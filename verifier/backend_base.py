"""The interface every verify backend implements, and what both backends share: `VerifyJob`,
`VerifyBackend`, `JobTable`, `verify_all` (verifier/backends.py describes them and holds the
registry, `make_backend`, which imports the backends; the backends import this module, never that
one).
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Generic, TypeVar

from cudice.verifier.config import VerifyConfig
from cudice.verifier.source.result import VerifyResult

if TYPE_CHECKING:
    from cudice.verifier.build.batch import BatchReport


@dataclass(frozen=True, slots=True)
class VerifyJob:
    """One candidate to verify, as files or as texts (verifier/backends.py's docstring).

    `path`: the candidate's file, or with `source` (its text) the name its locations show;
    `reference`: the reference's file (None: the candidate's own `Model` or its `# cudice:`
    comment), or with `reference_source` (its text) the name its diagnostics show;
    `key`: the job's identity for cancelling (default: the path)."""

    path: str | Path
    source: str | None = None
    reference: str | Path | None = None
    key: str | None = None
    reference_source: str | None = None


BackendT = TypeVar("BackendT", bound="VerifyBackend")
EntryT = TypeVar("EntryT")


class VerifyBackend(ABC):
    """Verifies candidates asynchronously and returns `VerifyResult`s; use `with` or `shutdown()`."""

    config: VerifyConfig  # what a job submitted without a config runs with

    def submit(
        self,
        path: str | Path,
        *,
        source: str | None = None,
        reference: str | Path | None = None,
        config: VerifyConfig | None = None,
        key: str | None = None,
        reference_source: str | None = None,
    ) -> Future[VerifyResult]:
        """Queue one verification; a pending job with the same `key` (default: the path) is cancelled.
        `reference_source`: the reference's text (nothing read from disk; see `api.verify`)."""
        job = VerifyJob(path, source, reference, key or str(path), reference_source)
        return self._submit(job, config or self.config)

    @abstractmethod
    def _submit(self, job: VerifyJob, config: VerifyConfig) -> Future[VerifyResult]:
        """Queue `job` (its `key` is set) with `config`, cancelling a pending job of that key."""

    @abstractmethod
    def cancel(self, key: str) -> bool:
        """Cancel the job with this key (its build or run is stopped); True if there was one."""

    @abstractmethod
    def shutdown(self, *, cancel_pending: bool = True) -> None:
        """Stop the workers (cancelling what has not finished unless `cancel_pending` is False)."""

    def cancel_submitted(self, key: str, future: Future[VerifyResult]) -> bool:
        """Cancel the job of `key` only if it is still the one whose future is `future` (not a
        newer job another caller submitted under the same key). This default cannot tell them
        apart and cancels by key when `future` is not done; the local pool checks."""
        return False if future.done() else self.cancel(key)

    def prefill(self, jobs: Sequence[VerifyJob], config: VerifyConfig | None = None) -> BatchReport | None:
        """Do ahead, for many jobs at once, what their builds would do alone, before they are
        submitted (the local pool: their compile checks in one nvcc pass, build/batch.py); the
        verdicts stay those of the jobs alone. This default does nothing and returns None: a
        backend whose builds run elsewhere (Ray's workers have caches of their own) cannot gain."""
        return None

    def idle(self) -> None:
        """Give back what waits warm for the next job (the GPU memory of spare judges' idle CUDA
        contexts), e.g. while an RL update needs the GPU; the next job, or `warm()`, starts it
        again. Call it with no job pending. A backend with nothing warm does nothing."""
        return None

    def warm(self) -> None:
        """Start ahead of the next jobs what `idle()` gave back (nothing where nothing was)."""
        return None

    def __enter__(self: BackendT) -> BackendT:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


class JobTable(Generic[EntryT]):
    """A backend's pending jobs by key, under one lock (submit, cancel and completion race)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, EntryT] = {}

    def put(self, key: str, entry: EntryT) -> EntryT | None:
        """Make `entry` the job of `key`; returns the job it replaces (for the caller to cancel)."""
        with self._lock:
            old = self._entries.get(key)
            self._entries[key] = entry
            return old

    def cancel(self, key: str, stop: Callable[[EntryT], None]) -> bool:
        """Remove the job of `key` and `stop` it; False if there was none."""
        return self.cancel_if(key, lambda _: True, stop)

    def cancel_if(self, key: str, match: Callable[[EntryT], bool], stop: Callable[[EntryT], None]) -> bool:
        """`cancel`, only when the job of `key` satisfies `match`."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or not match(entry):
                return False
            del self._entries[key]
        stop(entry)
        return True

    def discard(self, key: str, entry: EntryT) -> None:
        """Forget a finished job, unless a newer job of the same key replaced it."""
        with self._lock:
            if self._entries.get(key) is entry:
                del self._entries[key]

    def items(self) -> list[tuple[str, EntryT]]:
        """A snapshot of the pending jobs."""
        with self._lock:
            return list(self._entries.items())


def verify_all(
    backend: VerifyBackend,
    jobs: Sequence[VerifyJob],
    *,
    config: VerifyConfig | None = None,
    timeout_s: float | None = None,
    prefill: int = 0,
) -> list[VerifyResult]:
    """Submit every job and wait; results in the order of `jobs` (keys default to the job index).
    Where waiting on one raises (a job's own failure, the timeout), the jobs not finished yet are
    cancelled before the exception goes on: nothing of the batch keeps running behind the caller.
    `prefill` > 0: the jobs go to `backend.prefill` that many at a time, each chunk just before
    it is submitted (so a chunk's batch runs while the earlier chunks' jobs build)."""
    keys = [j.key if j.key is not None else f"job-{i}" for i, j in enumerate(jobs)]
    futures: list[Future[VerifyResult]] = []
    step = prefill if prefill > 0 else max(len(jobs), 1)
    try:
        for k in range(0, len(jobs), step):
            chunk = jobs[k : k + step]
            if prefill > 0:
                backend.prefill(chunk, config)
            futures += [
                backend.submit(
                    j.path,
                    source=j.source,
                    reference=j.reference,
                    config=config,
                    key=key,
                    reference_source=j.reference_source,
                )
                for j, key in zip(chunk, keys[k : k + step], strict=True)
            ]
        return [f.result(timeout=timeout_s) for f in futures]
    except BaseException:
        for key, f in zip(keys, futures, strict=False):
            if not f.done():
                backend.cancel_submitted(key, f)
        raise
