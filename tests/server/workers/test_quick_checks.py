"""The quick-check client's adaptive time-out, through a real quick worker with the scripted
verifier (tests/e2e/lsp_fakes): a slow first check (clangd building its preamble) is waited for,
a warm check past its bound is abandoned without killing a worker that is still computing, and a
worker that uses no CPU is killed well before the bound."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cudice.server.workers.quick import QuickChecks
from cudice.verifier.source.result import Verdict

FAKES = Path(__file__).resolve().parents[2] / "e2e"
pytestmark = pytest.mark.timeout(90)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["CUDICE_VERIFY_MODULE"] = "lsp_fakes.fake_verifier"
    env["CUDICE_QUICK_HEARTBEAT_S"] = "0.2"
    env["PYTHONPATH"] = os.pathsep.join([str(FAKES), env.get("PYTHONPATH", "")])
    return env


_GROUP_PROBE = """
import json, time
from cudice.server.workers.procs import group_cpu_seconds
before = group_cpu_seconds()
start = time.process_time()  # burn 0.3 s of CPU, however long that takes on a loaded box
while time.process_time() - start < 0.3:
    sum(i * i for i in range(1000))
busy = group_cpu_seconds()
time.sleep(0.3)
print(json.dumps({"work": busy - before, "sleep": group_cpu_seconds() - busy}))
"""


def test_group_cpu_seconds_grows_with_work_and_not_with_sleep() -> None:
    # in a process group of its own, as the quick worker runs (the test runner's group may hold
    # other busy processes: pytest-xdist's workers)
    done = subprocess.run(
        [sys.executable, "-c", _GROUP_PROBE],
        capture_output=True,
        text=True,
        timeout=60,
        start_new_session=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["work"] >= 0.25, got
    assert got["sleep"] < 0.05, got


def test_slow_first_check_is_waited_for_and_a_busy_worker_is_kept() -> None:
    async def main() -> None:
        quick = QuickChecks(env=_env(), timeout_s=1.0, first_timeout_s=30.0, stall_s=10.0)
        try:
            first = await quick.check("/tmp/a_cuda.py", "# QUICK_BUSY=2.5\n")  # the preamble build
            assert first is not None and first.verdict is Verdict.CHECKED
            pid = quick.pid
            # Warm now: a check past the 1 s bound is not waited for, but the worker keeps working.
            assert await quick.check("/tmp/a_cuda.py", "# QUICK_BUSY=4\n") is None
            assert quick.pid == pid, "a worker that was still computing was killed"
            # Queued behind the slow one; a longer bound (the setting) lets it be answered.
            again = await quick.check("/tmp/a_cuda.py", "x = 1\n", timeout_s=30.0)
            assert again is not None and again.verdict is Verdict.CHECKED and quick.pid == pid
        finally:
            await quick.shutdown()

    asyncio.run(main())


def test_stalled_worker_is_killed_long_before_the_bound() -> None:
    async def main() -> None:
        quick = QuickChecks(env=_env(), timeout_s=60.0, first_timeout_s=60.0, stall_s=1.5)
        try:
            assert await quick.check("/tmp/a_cuda.py", "x = 1\n") is not None
            pid = quick.pid
            t0 = time.monotonic()
            assert await quick.check("/tmp/a_cuda.py", "# QUICK_STALL=40\n") is None
            assert time.monotonic() - t0 < 20, "a worker using no CPU was waited for until the bound"
            again = await quick.check("/tmp/a_cuda.py", "x = 1\n")  # a fresh worker answers
            assert again is not None and quick.pid not in (None, pid)
        finally:
            await quick.shutdown()

    asyncio.run(main())


def test_timeouts_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        QuickChecks(stall_s=0)
