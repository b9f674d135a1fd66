"""The distribution's shape: namespaced packages, light server import, working entry points."""

from __future__ import annotations

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
