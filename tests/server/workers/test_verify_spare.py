"""The warm spare verification worker (server/workers/verify.py): started ahead of a save, it serves
the next run, a new one waits after it, and `cancel_all` ends it; through real worker processes and
the scripted verifier (tests/e2e/lsp_fakes). Without a GPU the spare starts no judge (nothing to warm
but the worker itself); on a GPU box verify_child starts the judge before the request."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from cudice.server.workers.procs import family_pids
from cudice.server.workers.verify import VerifyJobs, VerifyRequest
from cudice.verifier.source.result import Verdict
from proc_state import alive

FAKES = Path(__file__).resolve().parents[2] / "e2e"
pytestmark = pytest.mark.timeout(120)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["CUDICE_VERIFY_MODULE"] = "lsp_fakes.fake_verifier"
    env["PYTHONPATH"] = os.pathsep.join([str(FAKES), env.get("PYTHONPATH", "")])
    return env


def test_a_spare_serves_the_next_run_and_ends_with_cancel_all(tmp_path: Path) -> None:
    path = tmp_path / "k_cuda.py"
    source = "# VERIFY_DELAY=1\nclass ModelNew: pass\n"
    path.write_text(source)

    async def main() -> None:
        jobs = VerifyJobs(env=_env(), spare=lambda: True)
        try:
            await jobs.prestart()
            first_spare = jobs.spare_pid
            assert first_spare is not None and alive(first_spare)
            await jobs.prestart()
            assert jobs.spare_pid == first_spare  # one spare at a time
            run = asyncio.ensure_future(jobs.run(VerifyRequest("file:///k", str(path), source, 1)))
            while not jobs.is_running("file:///k"):
                await asyncio.sleep(0)
            result = await asyncio.wait_for(run, 90)
            assert result is not None and result.verdict is Verdict.CORRECT
            assert not alive(first_spare)  # it served this run, which is over
            second_spare = jobs.spare_pid
            assert second_spare is not None and second_spare != first_spare and alive(second_spare)
        finally:
            spare = jobs.spare_pid
            jobs.cancel_all()
        assert spare is not None and jobs.spare_pid is None
        for _ in range(2000):  # the kill is sent; wait until the process is gone (bounded)
            if not alive(spare):
                break
            await asyncio.sleep(0.05)
        assert not alive(spare) and not family_pids(spare)

    asyncio.run(main())


def test_no_spare_when_the_server_does_not_want_one(tmp_path: Path) -> None:
    async def main() -> None:
        jobs = VerifyJobs(env=_env(), spare=lambda: False)
        await jobs.prestart()
        assert jobs.spare_pid is None

    asyncio.run(main())
