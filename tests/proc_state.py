"""Process state read from outside, shared by the verifier and server tests (imported by name:
tests/ has no packages, and tests/conftest.py puts this folder on the import path)."""

from __future__ import annotations

from pathlib import Path


def alive(pid: int) -> bool:
    """Whether `pid` runs: a zombie (exited, not yet reaped) or a missing process does not."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # the state follows the name's closing ')'
