"""ChildProcess.close leaves nothing behind: a worker's own children die with it."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from cudice.server.workers.procs import ChildProcess


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is dead for our purpose.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


def test_clean_exit_also_ends_the_workers_children() -> None:
    async def scenario() -> int:
        fixtures = Path(__file__).parent / "proc_fixtures"
        env = {**os.environ, "PYTHONPATH": f"{fixtures}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        child = ChildProcess("spawns_grandchild", env=env)
        await child.start()
        events = child.events()
        first = await asyncio.wait_for(events.__anext__(), 30)
        grandchild = int(first["grandchild"])
        assert _alive(grandchild)
        await child.close(grace_s=5.0)  # stdin closes, the worker exits cleanly within the grace
        await events.aclose()
        assert child.proc is not None and child.proc.returncode == 0
        for _ in range(50):  # SIGKILL is asynchronous: give the kernel a moment
            if not _alive(grandchild):
                break
            await asyncio.sleep(0.1)
        return grandchild

    assert sys.platform.startswith("linux")  # /proc is read below
    grandchild = asyncio.run(scenario())
    assert not _alive(grandchild), "the worker's child outlived it"
