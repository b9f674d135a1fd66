"""The verify workers prepare the first compile error while idle (server/workers/verify.py
`prepare_when_idle`, verify_child.py's `{"prepare": "first_error"}`), through real worker processes
and a scripted verifier written here: its `prepare_first_error` runs a "preprocessor" (a shell
with two sleeping children) through the real `objects.run_process` with the worker's cancel token,
as the real one runs nvcc. An idle pool starts it at the lowest priority; a verification arriving
meanwhile stops it (its processes are gone) and is served; the next idle moment starts it again,
one that finished is not run again, and `cancel_all` kills it. The real preparation (nvcc, ~15 s of
CPU) is tested in tests/verifier/build/test_compile_slim_errors.py."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from cudice.server.workers.procs import family_pids
from cudice.server.workers.verify import VerifyJobs, VerifyRequest
from cudice.verifier.source.result import Verdict
from proc_state import alive

E2E = Path(__file__).resolve().parents[2] / "e2e"  # lsp_fakes: the scripted `verify`
pytestmark = pytest.mark.timeout(180)

PREP_VERIFIER = """
import json, os
from lsp_fakes.fake_verifier import quick_check, verify  # noqa: F401


def prepare_first_error(config, cancel=None):
    from cudice.verifier.build.objects import run_process

    def note(what):
        with open(os.environ["PREP_LOG"], "a") as f:
            f.write(json.dumps({"event": what, "pid": os.getpid()}) + "\\n")

    note("started")
    seconds = os.environ.get("PREP_SECONDS", "290")
    rc, _, cancelled, _ = run_process(["sh", "-c", f"sleep {seconds} & sleep {seconds}; wait"], 600, cancel)
    note("cancelled" if cancelled else "finished")
    return not cancelled
"""


def _env(tmp_path: Path, log: Path, seconds: str) -> dict[str, str]:
    (tmp_path / "prep_verifier.py").write_text(PREP_VERIFIER)
    env = dict(os.environ)
    env.update(CUDICE_VERIFY_MODULE="prep_verifier", PREP_LOG=str(log), PREP_SECONDS=seconds)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(E2E), env.get("PYTHONPATH", "")])
    return env


def _events(log: Path) -> list[str]:
    """The preparation's notes so far: "started", then "cancelled" or "finished"."""
    lines = log.read_text().splitlines() if log.exists() else []
    return [json.loads(line)["event"] for line in lines]


async def _until(pred: Callable[[], bool], what: str, timeout_s: float = 90.0) -> None:
    """Wait (bounded) until `pred()` holds: the workers are other processes on a possibly busy box."""
    deadline = time.monotonic() + timeout_s
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def _sleepers(pid: int | None) -> set[int]:
    """The "preprocessor" processes (sleep) in `pid`'s family."""
    found = set()
    for p in family_pids(pid) if pid is not None else set():
        try:
            with open(f"/proc/{p}/comm") as f:
                if f.read().strip() == "sleep":
                    found.add(p)
        except OSError:
            continue
    return found


def test_an_idle_pool_prepares_and_a_verification_stops_it_and_is_served(tmp_path: Path) -> None:
    log = tmp_path / "prep.jsonl"
    path = tmp_path / "k_cuda.py"
    source = "class ModelNew: pass\n"
    path.write_text(source)

    async def main() -> None:
        jobs = VerifyJobs(env=_env(tmp_path, log, "290"), spare=lambda: False, prep_idle_s=0.0)
        try:
            await jobs.prestart()  # idle: the preparation starts
            await _until(lambda: jobs.prep_pid is not None, "the preparation's worker")
            first = jobs.prep_pid
            await _until(lambda: len(_sleepers(first)) == 2, "the preparation's preprocessor")
            sleepers = _sleepers(first)
            assert all(os.getpriority(os.PRIO_PROCESS, p) == 19 for p in sleepers)  # lowest priority
            run = asyncio.ensure_future(jobs.run(VerifyRequest("file:///k", str(path), source, 1)))
            result = await asyncio.wait_for(run, 90)
            assert result is not None and result.verdict is Verdict.CORRECT  # served
            await _until(lambda: not any(map(alive, [first, *sleepers])), "the stopped preparation to end")
            assert _events(log)[:2] == ["started", "cancelled"]  # stopped through its cancel token
            # idle again: the preparation starts over (it had not finished)
            await _until(lambda: jobs.prep_pid not in (None, first), "the preparation to start again")
            again = jobs.prep_pid
            await _until(lambda: len(_sleepers(again)) == 2, "the second preparation's preprocessor")
            sleepers = _sleepers(again)
        finally:
            jobs.cancel_all()  # the session ends: killed at once, never started again
        assert jobs.prep_pid is None and jobs.prep_state == "off"
        await _until(lambda: not any(map(alive, [again, *sleepers])), "the killed preparation to end")
        jobs.prepare_when_idle()
        assert not jobs.preparing or jobs.prep_pid is None
        await _until(lambda: not jobs.preparing, "the preparation's tasks to end")

    asyncio.run(main())


def test_a_finished_preparation_is_not_run_again(tmp_path: Path) -> None:
    log = tmp_path / "prep.jsonl"
    path = tmp_path / "k_cuda.py"
    source = "class ModelNew: pass\n"
    path.write_text(source)

    async def main() -> None:
        jobs = VerifyJobs(env=_env(tmp_path, log, "0"), spare=lambda: False, prep_idle_s=0.0)
        try:
            await jobs.prestart()
            await _until(lambda: jobs.prep_state == "done", "the preparation to finish")
            assert _events(log) == ["started", "finished"]
            result = await asyncio.wait_for(jobs.run(VerifyRequest("file:///k", str(path), source, 1)), 90)
            assert result is not None and result.verdict is Verdict.CORRECT
            await jobs.prestart()
            assert not jobs.preparing and _events(log) == ["started", "finished"]
        finally:
            jobs.cancel_all()
        await _until(lambda: not jobs.preparing, "the preparation's tasks to end")

    asyncio.run(main())
