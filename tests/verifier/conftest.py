"""Verifier test fixtures: one build cache per test session, so each distinct nvcc build runs once.

A full torch-extension build costs ~45–90 s on a 2-core machine; the suite builds three
distinct modules (relu_broken, relu_cuda, broken_multi) and every other test reuses them. The
CLIs the tests start get `cache_root` as `CUDICE_CACHE_DIR`, whose `build/` is that cache. The
root is the run's `CUDICE_TEST_BUILD_CACHE` (tests/conftest.py), which the real-backend e2e
servers use too. A test that needs a cold cache uses its own `tmp_path`.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cudice.verifier.config import CACHE_SUBDIRS, VerifyConfig

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="session")
def cache_root() -> Path:
    """The `CUDICE_CACHE_DIR` of the CLIs the tests start: its `build/` is `build_cache`. The
    run's shared cache root (tests/conftest.py: a fresh folder unless the variable is given)."""
    return Path(os.environ["CUDICE_TEST_BUILD_CACHE"])


@pytest.fixture(scope="session")
def build_cache(cache_root: Path) -> Path:
    """The session's build cache, where `VerifyConfig.cache_dir` defaults to under `cache_root`
    (so a CLI run shares the toolchain probe, the first-error lists and the objects)."""
    build = cache_root / CACHE_SUBDIRS["build"]
    build.mkdir(exist_ok=True)  # an e2e server of this run may have made it
    return build


@pytest.fixture(scope="session")
def session_config(build_cache: Path) -> VerifyConfig:
    return VerifyConfig(cache_dir=build_cache, compile_only=True)


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return DATA
