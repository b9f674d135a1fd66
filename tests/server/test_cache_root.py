"""`CUDICE_CACHE_DIR` names one folder: the verifier's builds and the server's verdicts are named
subfolders of it (`verifier/config.py`'s `cache_root`, docs/server.md *Cache folders*).

Not covered: what the build writes inside `build/` (tests/verifier).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cudice.server.results import ResultCache, default_results_dir
from cudice.verifier.config import CACHE_SUBDIRS, VerifyConfig, cache_root


def test_one_root_with_named_subfolders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDICE_CACHE_DIR", str(tmp_path / "cache"))
    root = tmp_path / "cache"
    assert cache_root() == root
    assert VerifyConfig().cache_dir == root / CACHE_SUBDIRS["build"] == root / "build"
    assert default_results_dir() == ResultCache().directory == root / "results"


def test_without_the_variable_the_root_is_the_user_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CUDICE_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert VerifyConfig().cache_dir == tmp_path / "xdg" / "cudice" / "build"
    assert default_results_dir() == tmp_path / "xdg" / "cudice" / "results"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_root() == Path.home() / ".cache" / "cudice"
