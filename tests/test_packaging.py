"""The distribution's shape: namespaced packages, light server import, working entry points."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {"cudice.server": "server", "cudice.model": "model", "cudice.verifier": "verifier"}


def _declared_packages() -> list[str]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return list(data["tool"]["setuptools"]["packages"])


def test_every_package_folder_is_declared() -> None:
    """A subpackage left out of the explicit list would vanish from non-editable installs."""
    found = set()
    for name, folder in FOLDERS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            found.add(".".join([name, *rel.parts]) if rel.parts else name)
    assert found == set(_declared_packages())


def test_no_bare_top_level_packages_installed() -> None:
    for pkg in _declared_packages():
        assert pkg.startswith("cudice."), pkg


def test_importing_server_does_not_import_torch() -> None:
    code = (
        "import sys, cudice.server, cudice.server.cli, cudice.server.settings, cudice.verifier, cudice.model;"
        "bad = [m for m in ('torch', 'transformers') if m in sys.modules];"
        "print(','.join(bad)); sys.exit(1 if bad else 0)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, f"heavy modules imported: {out.stdout} {out.stderr}"


@pytest.mark.parametrize(
    "argv",
    [
        ["cudice", "--help"],
        ["cudice-lsp", "--help"],
        [sys.executable, "-m", "cudice.server", "--help"],
        ["cudice", "lsp", "--help"],
    ],
)
def test_help_everywhere(argv: list[str]) -> None:
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "Usage:" in out.stdout


def test_version_command() -> None:
    from cudice.server import __version__

    out = subprocess.run(["cudice", "version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"cudice {__version__}")


def test_print_schema_is_json_with_prefixed_keys() -> None:
    import json

    out = subprocess.run(["cudice-lsp", "--print-schema"], capture_output=True, text=True, timeout=60)
    schema = json.loads(out.stdout)
    assert schema["properties"]
    assert all(k.startswith("cudice.") for k in schema["properties"])


@pytest.mark.slow
def test_the_wheel_holds_only_namespaced_packages_and_runs(tmp_path: Path) -> None:
    """A non-editable install: build the wheel, unpack it, run the server's --help from it."""
    import zipfile

    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stderr[-2000:]
    (wheel,) = tmp_path.glob("cudice-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.startswith("cudice-")}
    assert tops == {"cudice"}, tops
    for must in (
        "cudice/server/py.typed",
        "cudice/verifier/py.typed",
        "cudice/model/train/sft.py",
        "cudice/server/features/__init__.py",
    ):
        assert must in names, must
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    env = {**os.environ, "PYTHONPATH": str(site)}
    where = subprocess.run(
        [sys.executable, "-c", "import cudice.server as s; print(s.__file__)"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=env,
    )
    assert where.stdout.strip().startswith(str(site)), where.stdout + where.stderr  # not the editable copy
    out = subprocess.run(
        [sys.executable, "-m", "cudice.server", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=env,
    )
    assert out.returncode == 0 and "Usage:" in out.stdout, out.stderr
