"""`VerifyBackend`: the one interface for "verify many candidates", local or on a Ray cluster.

A backend takes jobs with `submit(path, *, source, reference, config, key, reference_source)`
and hands back a `concurrent.futures.Future[VerifyResult]` — the same record `verify()` returns,
so the RL reward, `cudice eval` and the editor read one truth. A job (`VerifyJob`) names files or
carries texts: with `source` the candidate's text is verified and `path` names it, with
`reference_source` the reference's text and `reference` names it (default `<reference>`).
Nothing is read from disk for what a job carries, on this machine or a Ray worker (a candidate
text without a reference still has its `# cudice: reference=` comment read beside `path`), and
the result is the one the same texts get as files under those names (tests/verifier/test_pool.py,
tests/verifier/dist/test_ray_backend.py). `shutdown()` (or leaving the `with` block)
releases its workers. Two backends satisfy it:

- `local` — `cudice.verifier.pool.VerifyPool` (threads + sandboxed children on this machine);
- `ray`   — `cudice.verifier.dist.ray_backend.RayBackend` (compile tasks on CPU workers, run and
  timing tasks on GPU workers, re-queued when a worker or node dies; needs `pip install
  "cudice[dist]"`).

`VerifyBackend` is an abstract base class: it owns the `submit` signature (the key defaults to
the path) and the context manager, and `JobTable` the jobs by key that both backends keep to
cancel a key's pending job; a backend implements `_submit(job, config)`, `cancel` and `shutdown`.
`make_backend(name, config, ...)` picks one from the registry; `verify_all(backend, jobs)`
submits a batch and returns the results in job order (what a reward function needs).
Ray is imported only when the `ray` backend is made, so this module is cheap to import.

Not covered: fairness or priorities between callers sharing one backend.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from cudice.verifier.config import VerifyConfig
from cudice.verifier.source.result import VerifyResult


@dataclass(frozen=True, slots=True)
class VerifyJob:
    """One candidate to verify, as files or as texts (module docstring).

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
        with self._lock:
            entry = self._entries.pop(key, None)
        if entry is None:
            return False
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
) -> list[VerifyResult]:
    """Submit every job and wait; results in the order of `jobs` (keys default to the job index)."""
    futures = [
        backend.submit(
            j.path,
            source=j.source,
            reference=j.reference,
            config=config,
            key=j.key if j.key is not None else f"job-{i}",
            reference_source=j.reference_source,
        )
        for i, j in enumerate(jobs)
    ]
    return [f.result(timeout=timeout_s) for f in futures]


BackendFactory = Callable[..., VerifyBackend]


def _local(config: VerifyConfig, *, num_compile_workers: int = 2, **kwargs: Any) -> VerifyBackend:
    from cudice.verifier.pool import VerifyPool

    return VerifyPool(config, num_compile_workers=num_compile_workers, **kwargs)


def _ray(config: VerifyConfig, *, num_compile_workers: int | None = None, **kwargs: Any) -> VerifyBackend:
    from cudice.verifier.dist.ray_backend import RayBackend

    return RayBackend(config, num_cpus=num_compile_workers, **kwargs)


BACKENDS: dict[str, BackendFactory] = {"local": _local, "ray": _ray}


def make_backend(name: str, config: VerifyConfig | None = None, **kwargs: Any) -> VerifyBackend:
    """A backend from the registry: `local` (VerifyPool) or `ray` (RayBackend); kwargs go to it.

    Raises ValueError for an unknown name and `RayUnavailable` (dist/ray_backend.py) for `ray`
    without Ray installed.
    """
    if name not in BACKENDS:
        raise ValueError(f"Unknown verify backend {name!r}; use one of {sorted(BACKENDS)}.")
    return BACKENDS[name](config or VerifyConfig(), **kwargs)
