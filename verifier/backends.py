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
cancel a key's pending job; a backend implements `_submit(job, config)`, `cancel` and `shutdown`,
and may implement `prefill(jobs)`, work done for many jobs at once before they are submitted (the
local pool checks their sources in one nvcc pass, build/batch.py; the default, Ray's, does nothing).
`make_backend(name, config, ...)` picks one from the registry; `verify_all(backend, jobs,
prefill=N)` submits a batch (prefilled N jobs at a time) and returns the results in job order
(what a reward function needs).
The interface and what the backends share (`VerifyJob`, `VerifyBackend`, `JobTable`, `verify_all`)
live in verifier/backend_base.py, which the backends import; this module re-exports them and holds
the registry, which imports the backends.
Ray is imported only when the `ray` backend is made, so this module is cheap to import.

Not covered: fairness or priorities between callers sharing one backend.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cudice.verifier.backend_base import JobTable as JobTable
from cudice.verifier.backend_base import VerifyBackend as VerifyBackend
from cudice.verifier.backend_base import VerifyJob as VerifyJob
from cudice.verifier.backend_base import verify_all as verify_all
from cudice.verifier.config import VerifyConfig

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
