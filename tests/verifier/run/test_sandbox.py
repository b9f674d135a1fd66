"""The child-process sandbox: crashes, hangs and noisy output end only the child."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import pytest
from cudice.verifier.run.sandbox import run_in_child

FAKE_WORKER = (
    """
import json, os, sys, time
job = json.loads(sys.stdin.read())
fd = int(sys.argv[sys.argv.index("--result-fd") + 1])
mode = job["mode"]
if mode == "ok":
    out = {"verdict": "correct", "stage": "timing", "cwd": os.getcwd(), "secret": """
    """os.environ.get("CUDICE_TEST_SECRET"),
           "home": os.environ.get("HOME"), "argv": sys.argv, "files": sorted(os.listdir("."))}
    os.write(fd, json.dumps(out).encode())
elif mode == "grandchild":  # a forked child writes a forged record after the real one: """
    """the parent reads the first close
    os.write(fd, json.dumps({"verdict": "incorrect", "stage": "correctness"}).encode())
    os.close(fd)
    if os.fork() == 0:
        for other in range(3, 64):
            try:
                os.write(other, b'{"verdict": "correct"}')
            except OSError:
                pass
        os._exit(0)
elif mode == "linger":  # the result, then a long exit (a judge closing its runners) with a child of its own
    import subprocess
    sleeper = subprocess.Popen(["sleep", "300"])
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps({"verdict": "correct", "sleeper": sleeper.pid}))
    time.sleep(300)
elif mode == "abort":
    os.abort()
elif mode == "hang":
    time.sleep(600)
elif mode == "noisy":
    sys.stdout.write("x" * 200000 + "END")
    sys.stdout.flush()
elif mode == "memory":
    block = bytearray(2 * 1024 ** 3)  # 2 GiB > the 1 GiB limit
"""
)


@pytest.fixture
def fake_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "cudice_fake_worker.py").write_text(FAKE_WORKER)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    monkeypatch.setenv("CUDICE_TEST_SECRET", "do-not-leak")
    return "cudice_fake_worker"


def test_result_comes_back_from_a_scrubbed_temp_dir(fake_module: str) -> None:
    out = run_in_child({"mode": "ok"}, timeout_s=60, memory_limit_mib=4096, module=fake_module)
    assert out.result is not None and out.result["verdict"] == "correct"
    assert out.result["secret"] is None  # environment scrubbed
    assert "cudice-run-" in out.result["cwd"] and out.result["home"] == out.result["cwd"]
    assert not Path(out.result["cwd"]).exists()  # temp dir removed afterwards
    # the result channel is a pipe: no result path in argv, no result file in the work directory
    assert (
        not [a for a in out.result["argv"] if a.endswith(".json")]
        and "result.json" not in out.result["files"]
    )


def test_the_record_is_the_one_written_before_the_pipe_closed(fake_module: str) -> None:
    out = run_in_child({"mode": "grandchild"}, timeout_s=60, memory_limit_mib=4096, module=fake_module)
    assert out.result == {"verdict": "incorrect", "stage": "correctness"}


def test_the_result_ends_the_wait_and_the_child_s_group_dies(fake_module: str) -> None:
    """Once the result pipe closed, nothing more can come: the child's exit is not waited for
    (a judge's runners closing), and everything it started dies with it."""
    out = run_in_child({"mode": "linger"}, timeout_s=200, memory_limit_mib=4096, module=fake_module)
    assert out.result is not None and out.result["verdict"] == "correct", out
    assert not out.timed_out and out.wall_s < 100, out  # the worker itself would sleep 300 s
    # and nothing of its group runs any more when the call returns (a judge's runners' CUDA teardown
    # is over before the next job starts)
    from cudice.verifier.process import process_state

    pid = out.result["sleeper"]
    state = process_state(pid)
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        cmdline = b""  # gone and reaped meanwhile
    assert state in "ZX" or not cmdline.startswith(b"sleep"), (state, cmdline)  # gone, or a reused pid


def test_abort_is_a_crash_of_the_child_only(fake_module: str) -> None:
    out = run_in_child({"mode": "abort"}, timeout_s=60, memory_limit_mib=4096, module=fake_module)
    assert out.result is None and out.signal_name == "SIGABRT"


def test_hang_is_killed_at_the_timeout(fake_module: str) -> None:
    t0 = time.perf_counter()
    out = run_in_child({"mode": "hang"}, timeout_s=1.5, memory_limit_mib=4096, module=fake_module)
    assert out.timed_out and out.result is None and time.perf_counter() - t0 < 15


def test_cancel_kills_the_child(fake_module: str) -> None:
    cancel = threading.Event()
    threading.Timer(0.5, cancel.set).start()
    out = run_in_child(
        {"mode": "hang"}, timeout_s=60, memory_limit_mib=4096, module=fake_module, cancel=cancel
    )
    assert out.cancelled and out.wall_s < 15


def test_output_is_capped(fake_module: str) -> None:
    out = run_in_child(
        {"mode": "noisy"}, timeout_s=60, memory_limit_mib=4096, max_output_bytes=1000, module=fake_module
    )
    assert out.stdout_tail.endswith("END") and len(out.stdout_tail) < 1100 and "truncated" in out.stdout_tail


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_DATA semantics are Linux's")
def test_memory_limit_stops_a_big_allocation(fake_module: str) -> None:
    out = run_in_child({"mode": "memory"}, timeout_s=60, memory_limit_mib=1024, module=fake_module)
    assert out.result is None and out.returncode != 0 and "MemoryError" in out.stderr_tail


def test_a_killed_group_is_waited_for_until_none_of_it_runs() -> None:
    import subprocess

    from cudice.verifier.process import group_members, kill_group, wait_group_gone

    # a leader and two children of its own group, one of them ignoring SIGTERM (SIGKILL still ends it)
    proc = subprocess.Popen(
        ["bash", "-c", "trap '' TERM; sleep 300 & sleep 300 & echo up; wait"],
        start_new_session=True,
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"up\n"
        assert len(group_members(proc.pid)) >= 3  # bash and its two sleeps
        assert not wait_group_gone(proc.pid, 0.2)  # nothing killed yet: the bound ends the wait
        kill_group(proc.pid)
        assert wait_group_gone(proc.pid, 60)
        assert group_members(proc.pid) == []  # the leader may be a zombie until reaped: not counted
    finally:
        kill_group(proc.pid)
        proc.wait()


def test_a_result_that_is_not_json_arrives_as_a_crash_that_says_why() -> None:
    import json

    from cudice.verifier.run.judging import write_result

    read_fd, write_fd = os.pipe()
    write_result(write_fd, {"verdict": "correct", "stage_wall_s": {"x": object()}})
    with os.fdopen(read_fd, "rb") as f:
        got = json.loads(f.read())
    assert got["verdict"] == "crash" and "not JSON" in got["diagnostics"][0]["message"], got
    assert "TypeError" in got["error"]
