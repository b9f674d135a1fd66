"""Verifier test fixtures: one build cache per test session, so each distinct nvcc build runs once.

A full torch-extension build costs ~45–90 s on a 2-core machine; the suite builds three
distinct modules (relu_broken, relu_cuda, broken_multi) and every other test reuses them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cudice.verifier.config import VerifyConfig

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="session")
def build_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cudice-build-cache")


@pytest.fixture(scope="session")
def session_config(build_cache: Path) -> VerifyConfig:
    return VerifyConfig(cache_dir=build_cache, compile_only=True)


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return DATA
