"""`objects.run_process`: a command's whole family dies with the thread that started it, the
driver's own children included (a compiler driver's `cc1plus`/`cicc` would otherwise outlive a
SIGKILLed worker), and the command behaves as before (output, exit status, missing program)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from cudice.verifier.build.objects import run_process
from proc_state import alive


def _wait_for(cond, bound_s: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return bool(cond())


def test_a_killed_starter_takes_the_drivers_children_with_it(tmp_path: Path) -> None:
    # the "driver" starts a long "compiler" of its own and waits for it, as nvcc and gcc do
    pid_file = tmp_path / "grandchild.pid"
    driver = f"sleep 300 & echo $! > {pid_file}; wait"
    worker = textwrap.dedent(
        f"""
        from cudice.verifier.build.objects import run_process
        run_process(["sh", "-c", {driver!r}], 600, None)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", worker], start_new_session=True)
    try:
        assert _wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), 120), "no grandchild"
        grandchild = int(pid_file.read_text())
        assert alive(grandchild)
        proc.kill()  # the worker is SIGKILLed: nothing of its own runs any more
        proc.wait(timeout=60)
        assert _wait_for(lambda: not alive(grandchild), 60), "the driver's child outlived the worker"
    finally:
        proc.kill()
        if pid_file.exists() and pid_file.read_text().strip():
            try:
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_output_and_exit_status_are_the_commands(tmp_path: Path) -> None:
    rc, out, cancelled, timed_out = run_process(["sh", "-c", "echo hello; echo oops >&2; exit 3"], 60, None)
    assert (rc, cancelled, timed_out) == (3, False, False)
    assert out.splitlines() == ["hello", "oops"]
    rc, out, _, _ = run_process(["sh", "-c", "echo only-out; echo dropped >&2"], 60, None, merge_stderr=False)
    assert (rc, out) == (0, "only-out\n")
    rc, out, _, _ = run_process(["pwd"], 60, None, cwd=tmp_path)
    assert out.strip() == str(tmp_path)


def test_a_missing_program_raises_as_popen_does() -> None:
    with pytest.raises(FileNotFoundError):
        run_process(["/nonexistent/cudice-no-such-compiler", "-E"], 60, None)


def test_a_timeout_kills_the_whole_family(tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    t0 = time.monotonic()
    rc, _, cancelled, timed_out = run_process(
        ["sh", "-c", f"sleep 300 & echo $! > {pid_file}; wait"], 3.0, None
    )
    assert timed_out and not cancelled and rc != 0
    assert time.monotonic() - t0 < 120
    grandchild = int(pid_file.read_text())
    assert _wait_for(lambda: not alive(grandchild), 60)
