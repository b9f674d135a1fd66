"""Shared pytest configuration: `gpu` tests skip cleanly on machines without CUDA; no bundled model.

Tests (and the servers and CLIs they start, which inherit the environment) see no bundled demo
model unless they ask for it (`cudice.model.bundled`; tests/model/test_bundled.py unsets the
variable), so "no model configured" stays testable and no test depends on the shipped weights.

One cudice cache root for the whole run, `CUDICE_TEST_BUILD_CACHE` (set here before collection,
when not given, to a fresh folder removed at the end): the verifier tests' session build cache
(`tests/verifier/conftest.py`, its `build/`) and the real-backend e2e servers
(`tests/e2e/lsp_support.py`, as their `CUDICE_CACHE_DIR`) use it, so the toolchain probe, the
first-error lists and the examples' objects are computed once per run. Give the variable to keep
the cache across runs. A test that needs a cold cache makes its own under `tmp_path`.

`CUDICE_TEST_FAILURES_NOW=1` prints each failure's report the moment it happens, not only in the
summary: a run cut short by a time limit (the GPU machine's calls) still says what failed and why.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = REPO_ROOT / "examples"
os.environ.setdefault("CUDICE_NO_BUNDLED_MODEL", "1")
TEST_CACHE_VAR = "CUDICE_TEST_BUILD_CACHE"
_OWN_CACHE: list[str] = []  # the run's cache root when this process made it (removed at the end)


def pytest_configure(config: pytest.Config) -> None:
    if not os.environ.get(TEST_CACHE_VAR):
        _OWN_CACHE.append(tempfile.mkdtemp(prefix="cudice-test-cache-"))
        os.environ[TEST_CACHE_VAR] = _OWN_CACHE[0]


def pytest_unconfigure(config: pytest.Config) -> None:
    for made in _OWN_CACHE:
        shutil.rmtree(made, ignore_errors=True)
        if os.environ.get(TEST_CACHE_VAR) == made:
            del os.environ[TEST_CACHE_VAR]
    _OWN_CACHE.clear()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.failed and os.environ.get("CUDICE_TEST_FAILURES_NOW") == "1":
        import sys

        stream = sys.__stderr__ or sys.stderr
        stream.write(f"\nFAILED NOW {report.nodeid} ({report.when})\n{report.longreprtext[-4000:]}\n")
        stream.flush()


@functools.cache
def cuda_available() -> tuple[bool, str]:
    """Whether a CUDA GPU is usable from torch (checked once, only if a gpu test was collected):
    cudice's own probe first (verifier/run/gpu_probe.py: CUDICE_GPU=0 skips them), then torch itself."""
    from cudice.verifier.run.gpu_probe import probe

    found = probe()
    if found.reason is not None:
        return False, found.reason
    try:
        out = subprocess.run(
            ["python3", "-c", "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)"],
            capture_output=True,
            timeout=120,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"torch CUDA probe failed: {exc}"
    return (out.returncode == 0), "torch.cuda.is_available() is False"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items:
        return
    ok, why = cuda_available()
    if ok:
        return
    skip = pytest.mark.skip(reason=f"needs a CUDA GPU ({why})")
    for item in gpu_items:
        item.add_marker(skip)


@pytest.fixture
def examples_dir() -> Path:
    return EXAMPLES
