"""`toolchain.probe_toolchain` with stand-in "pythons" (shell scripts): the probe's record is read
from merged output, a cancel or a timeout kills the probe's family and caches nothing, and a failed
probe says why. The real probe (torch imported in a child) is exercised by every build test."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from cudice.verifier.build.toolchain import ToolchainError, probe_toolchain
from proc_state import alive

RECORD = {
    "torch": "9.9.9",
    "cuda_available": False,
    "vars": {"cflags": "-DX", "cuda_cflags": "-DY"},
    "cuda_home": "/c",
}


def _stand_in(tmp_path: Path, body: str) -> str:
    script = tmp_path / "python"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)
    return str(script)


@pytest.fixture
def cuda_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "cuda"
    (home / "bin").mkdir(parents=True)
    nvcc = home / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\nexit 0\n")
    nvcc.chmod(0o755)
    monkeypatch.setenv("CUDA_HOME", str(home))
    return home


def test_the_record_is_read_from_merged_output(tmp_path: Path, cuda_home: Path) -> None:
    python = _stand_in(
        tmp_path, f"echo 'a warning first' >&2\necho '{json.dumps(RECORD)}'\necho 'a warning at exit' >&2\n"
    )
    tc = probe_toolchain(tmp_path / "cache", "9.0", python=python)
    assert (tc.torch_version, tc.cflags, tc.cuda_cflags) == ("9.9.9", "-DX", "-DY")
    assert list((tmp_path / "cache").glob("toolchain-*.json")), "a good probe is cached"


def test_a_failed_probe_says_why(tmp_path: Path, cuda_home: Path) -> None:
    python = _stand_in(tmp_path, "echo 'ModuleNotFoundError: No module named torch' >&2\nexit 1\n")
    with pytest.raises(ToolchainError, match=r"No module named torch.*is torch installed"):
        probe_toolchain(tmp_path / "cache", "9.0", python=python)
    assert not list((tmp_path / "cache").glob("toolchain-*.json"))


def test_a_cancel_kills_the_probe_and_caches_nothing(tmp_path: Path, cuda_home: Path) -> None:
    pid_file = tmp_path / "child.pid"
    # the stand-in starts a long child of its own: the probe's whole family must die
    python = _stand_in(tmp_path, f"sleep 300 & echo $! > {pid_file}\nwait\n")
    cancel = threading.Event()

    def cancel_once_started() -> None:
        deadline = time.monotonic() + 120
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        cancel.set()

    threading.Thread(target=cancel_once_started, daemon=True).start()
    t0 = time.monotonic()
    with pytest.raises(ToolchainError, match="cancelled"):
        probe_toolchain(tmp_path / "cache", "9.0", python=python, cancel=cancel)
    assert time.monotonic() - t0 < 150
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and alive(child):
        time.sleep(0.05)
    assert not alive(child)
    assert not list((tmp_path / "cache").glob("toolchain-*.json"))


def test_a_timeout_is_an_error_that_says_so(tmp_path: Path, cuda_home: Path) -> None:
    python = _stand_in(tmp_path, "exec sleep 300\n")
    with pytest.raises(ToolchainError, match="took over 1 s"):
        probe_toolchain(tmp_path / "cache", "9.0", python=python, timeout_s=1.0)
