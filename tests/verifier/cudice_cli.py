"""The `cudice` command as a user runs it, for the CLI tests of the verifier (imported by name:
tests/ has no packages; tests/verifier/conftest.py puts this folder on the import path)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def cudice(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CUDICE_CACHE_DIR": str(cache)}
    return subprocess.run(
        [sys.executable, "-m", "cudice.server.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
