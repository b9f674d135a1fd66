"""One settings schema for server, VS Code and Neovim (STYLE rule 2).

The server's `cudice-lsp --print-schema` is the truth. editors/sync_settings.py copies it into
editors/vscode/package.json, editors/nvim/lua/cudice/schema.lua and docs/editors.md; these
tests fail when any of them drifts, and name the command that fixes it. The Neovim side is
also checked by loading the Lua table in a real Neovim (tests/e2e/test_nvim_plugin.py).
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from cudice.server.settings import settings_json_schema

ROOT = Path(__file__).resolve().parent.parent
FIX = "run `python3 editors/sync_settings.py` (or `npm run sync-settings` in editors/vscode) and commit"
FIELDS = ("type", "default", "enum", "minimum", "maximum")


def _sync() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sync_settings", ROOT / "editors" / "sync_settings.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def cli_schema() -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "cudice.server", "--print-schema"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    schema: dict[str, Any] = json.loads(out.stdout)
    return schema


def _fields(props: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {k: {f: p[f] for f in FIELDS if f in p} for k, p in props.items()}


def test_cli_schema_is_the_settings_module(cli_schema: dict[str, Any]) -> None:
    assert cli_schema == settings_json_schema()


def test_vscode_contributes_exactly_the_server_keys_plus_client_only(cli_schema: dict[str, Any]) -> None:
    pkg = json.loads((ROOT / "editors" / "vscode" / "package.json").read_text())
    contributed = pkg["contributes"]["configuration"]["properties"]
    client_only = json.loads((ROOT / "editors" / "vscode" / "client-settings.json").read_text())["properties"]
    server = cli_schema["properties"]
    assert not set(client_only) & set(server), "a client-only key collides with a server key"
    assert set(contributed) == set(server) | set(client_only), FIX
    shared = {k: v for k, v in contributed.items() if k in server}
    assert _fields(shared) == _fields(server), f"types/defaults/enums/bounds differ; {FIX}"


def test_neovim_schema_table_has_the_server_keys(cli_schema: dict[str, Any]) -> None:
    lua = (ROOT / "editors" / "nvim" / "lua" / "cudice" / "schema.lua").read_text()
    keys = re.findall(r'key = "([^"]+)"', lua)
    assert keys == list(cli_schema["properties"]), FIX


def test_docs_list_every_key(cli_schema: dict[str, Any]) -> None:
    docs = (ROOT / "docs" / "editors.md").read_text()
    documented = re.findall(r"^\| `(cudice\.[^`]+)` \|", docs, flags=re.M)
    client_only = json.loads((ROOT / "editors" / "vscode" / "client-settings.json").read_text())["properties"]
    assert documented == [*cli_schema["properties"], *client_only], FIX


def test_generated_files_are_up_to_date(cli_schema: dict[str, Any]) -> None:
    sync = _sync()
    stale = [
        str(p.relative_to(ROOT)) for p, text in sync.rendered(cli_schema).items() if p.read_text() != text
    ]
    assert not stale, f"out of date: {stale}; {FIX}"


def test_sync_detects_a_changed_schema(cli_schema: dict[str, Any]) -> None:
    """The check above can fail: a new server key or a changed default makes every file stale."""
    changed = json.loads(json.dumps(cli_schema))
    changed["properties"]["cudice.sampler.topK"]["default"] = 7
    changed["properties"]["cudice.new.key"] = {"type": "boolean", "default": True, "description": "new"}
    rendered = _sync().rendered(changed)
    assert all(path.read_text() != text for path, text in rendered.items())
    pkg = json.loads(rendered[ROOT / "editors" / "vscode" / "package.json"])
    assert pkg["contributes"]["configuration"]["properties"]["cudice.new.key"]["default"] is True
