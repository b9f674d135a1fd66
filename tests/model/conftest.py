"""Fixtures for model tests: tiny checkpoints built offline once per session."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_sdar_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from cudice.model.tiny import make_tiny

    return make_tiny(tmp_path_factory.mktemp("tiny_sdar"), sdar_layout=True)


@pytest.fixture(scope="session")
def tiny_qwen3_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from cudice.model.tiny import make_tiny

    return make_tiny(tmp_path_factory.mktemp("tiny_qwen3"), sdar_layout=False)


@pytest.fixture(scope="session")
def tiny_engine(tiny_sdar_dir: Path):
    from cudice.model.engine import load_engine

    return load_engine(str(tiny_sdar_dir), device="cpu", freeze=True)  # generation only
