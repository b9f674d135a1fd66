"""A worker's process family ends with it: `ChildProcess.close` after a clean exit, and the one
child-side set-up (`cudice.server.workers.child`) when its stdin closes, on SIGTERM and when the
server that started it is killed. The set-up also keeps stdout for the protocol's events only,
and its environment defaults yield to the user's."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from cudice.server.workers.protocol import ChildProcess, decode, encode
from proc_state import alive

FIXTURES = Path(__file__).resolve().parents[1] / "proc_fixtures"


async def _until(pred: Callable[[], bool], timeout_s: float = 60.0) -> bool:
    """Poll `pred` until it holds (True) or `timeout_s` passes (False): SIGKILL is asynchronous."""
    deadline = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


def _env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": f"{FIXTURES}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", **extra}
    env.pop("CUDICE_TEST_DEFAULT", None)
    return env


async def _next(events: AsyncIterator[dict[str, Any]]) -> dict[str, Any]:
    return await asyncio.wait_for(events.__anext__(), 60)


def test_clean_exit_also_ends_the_workers_children() -> None:
    async def scenario() -> int:
        child = ChildProcess("spawns_grandchild", env=_env())
        await child.start()
        events = child.events()
        first = await _next(events)
        grandchild = int(first["grandchild"])
        assert alive(grandchild)
        await child.close(grace_s=5.0)  # stdin closes, the worker exits cleanly within the grace
        await events.aclose()
        assert child.proc is not None and child.proc.returncode == 0
        await _until(lambda: not alive(grandchild))
        return grandchild

    assert sys.platform.startswith("linux")  # /proc is read below
    grandchild = asyncio.run(scenario())
    assert not alive(grandchild), "the worker's child outlived it"


def test_framing_round_trips_and_rejects_what_is_not_an_object() -> None:
    message = {"event": "done", "text": "a\nb \u00e9", "num_tokens": 3}
    line = encode(message)
    assert line.endswith("\n") and line.count("\n") == 1  # one message, one line
    assert decode(line) == message and decode(line.encode()) == message
    assert decode("not json") is None and decode("[1, 2]") is None and decode(b"\xff\xfe") is None


def test_a_child_on_the_set_up_writes_only_events_and_ends_its_family_when_stdin_closes() -> None:
    async def scenario() -> None:
        child = ChildProcess("on_child_setup", env=_env(OMP_NUM_THREADS="3", CUDICE_WORKER_NICE="2"))
        await child.start()
        events = child.events()
        try:
            assert await _next(events) == {"event": "started", "pid": child.pid}
            ready = await _next(events)  # the library's print went to stderr, not between the events
            assert ready["omp"] == "3"  # the user's setting beats the worker's default ...
            assert ready["default"] == "from-child"  # ... which fills in what is unset
            assert ready["nice"] == min(19, os.nice(0) + 2)
            assert child.proc is not None and child.proc.stdin is not None
            child.proc.stdin.write(b"not json\n[1, 2]\n" + encode({"op": "ping"}).encode())
            await child.proc.stdin.drain()
            assert await _next(events) == {"event": "echo", "request": {"op": "ping"}}  # bad lines skipped
            assert alive(ready["compiler"])
            child.proc.stdin.close()  # no kill from this side: the child must end its family itself
            assert await _until(lambda: not alive(ready["compiler"])), "the compiler outlived its worker"
            assert await asyncio.wait_for(child.wait(), 60) == 0
            assert await _until(lambda: "a library printing on stdout" in child.error_tail(40))
            assert "ignoring a line that is not a JSON object" in child.error_tail(40)
        finally:
            child.kill()
            await events.aclose()

    asyncio.run(scenario())


def test_sigterm_takes_the_childs_family_down() -> None:
    async def scenario() -> None:
        child = ChildProcess("on_child_setup", env=_env())
        await child.start()
        events = child.events()
        try:
            await _next(events)
            ready = await _next(events)
            assert child.pid is not None and alive(ready["compiler"])
            os.kill(child.pid, signal.SIGTERM)
            assert await _until(lambda: not alive(ready["compiler"])), "the compiler outlived its worker"
            assert await asyncio.wait_for(child.wait(), 60) == 128 + signal.SIGTERM
        finally:
            child.kill()
            await events.aclose()

    asyncio.run(scenario())


def test_an_orphaned_child_ends_its_family_although_its_stdin_stays_open() -> None:
    """The middle process plays a server that is SIGKILLed: the child's stdin (held by this test)
    stays open, so only the re-parenting watch can end it."""

    async def scenario() -> None:
        middle = await asyncio.create_subprocess_exec(
            sys.executable,
            str(FIXTURES / "on_child_setup.py"),
            "spawn",
            env=_env(),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert middle.stdout is not None
        pids: list[int] = []
        try:
            lines = [decode(await asyncio.wait_for(middle.stdout.readline(), 60)) for _ in range(3)]
            assert [line and line["event"] for line in lines] == ["middle", "started", "ready"], lines
            copy, compiler = lines[0]["copy"], lines[2]["compiler"]  # type: ignore[index]
            pids += [copy, compiler]
            assert lines[1]["pid"] == copy and alive(compiler)  # type: ignore[index]
            middle.kill()  # not awaited here: the orphan still holds the pipes that `wait` waits for
            assert await _until(lambda: not alive(copy) and not alive(compiler)), "the orphan lived on"
        finally:
            for pid in pids:
                if alive(pid):
                    os.kill(pid, signal.SIGKILL)
            if middle.returncode is None:
                middle.kill()
            await asyncio.wait_for(middle.wait(), 60)

    asyncio.run(scenario())
