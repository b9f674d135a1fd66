"""The Neovim plugin (editors/nvim) in a real headless Neovim 0.11, without a server.

Covers settings validation against the server schema, server-command resolution and its error
messages, the config handed to vim.lsp.config, user commands, and the status/refresh handlers.
The end-to-end run against the real server is test_nvim_e2e.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cudice.server.settings import settings_json_schema
from nvim_tools import PLUGIN, run_lua

pytestmark = pytest.mark.e2e
HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def checks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("nvim") / "out.json"
    proc = run_lua(
        HERE / "nvim_plugin_checks.lua",
        {"CUDICE_PLUGIN": str(PLUGIN), "CUDICE_OUT": str(out), "CUDICE_TMP": str(out.parent)},
        60,
    )
    assert out.exists(), f"the Lua checks wrote nothing; nvim stderr: {proc.stderr}"
    data: dict[str, Any] = json.loads(out.read_text())
    assert data["ok"], f"Lua error: {data['error']}"
    return data


def test_lsp_dir_config_is_found_without_setup(checks: dict[str, Any]) -> None:
    assert checks["base"] == {"cmd": ["cudice-lsp"], "filetypes": ["python", "cuda"], "refresh": True}


def test_settings_are_validated_against_the_schema(checks: dict[str, Any]) -> None:
    v = checks["validated"]
    assert v["values"] == {
        "cudice.model.path": "/ckpt",
        "cudice.sampler.topK": 5,
        "cudice.verify.onSave": False,
    }
    warnings = "\n".join(v["warnings"])
    assert 'unknown setting "cudice.modle.path"' in warnings
    assert 'cudice.sampler.strategy="bogus" must be one of low_confidence_dynamic' in warnings
    assert 'cudice.sampler.temperature="hot" must be a number' in warnings
    assert "cudice.sampler.maxNewTokens=1.5 must be an integer" in warnings
    assert len(v["warnings"]) == 4
    assert checks["nested"] == {
        "model": {"path": "/ckpt"},
        "sampler": {"topK": 5},
        "verify": {"onSave": False},
    }


def test_lua_defaults_equal_server_defaults(checks: dict[str, Any]) -> None:
    server = {k: p["default"] for k, p in settings_json_schema()["properties"].items()}
    assert checks["defaults"] == server


def test_server_command_errors_say_how_to_fix(checks: dict[str, Any]) -> None:
    r = checks["resolve"]
    assert 'tcp = "gpu-box" is not host:port' in r["tcp"] and "127.0.0.1:2087" in r["tcp"]
    assert "language server not found: /nonexistent/cudice-lsp is not executable" in r["cmd"]
    assert "pip install cudice" in r["cmd"]
    assert 'python = "/nonexistent/python3" is not executable' in r["python"]
    assert r["tcp_ok"] == "function"  # vim.lsp.rpc.connect(host, port)


def test_missing_server_is_reported_and_not_enabled(checks: dict[str, Any]) -> None:
    assert checks["setup_missing"] is False
    [note] = checks["notified_missing"]
    assert note["msg"].startswith("cudice: language server not found")
    assert note["level"] == 4  # vim.log.levels.ERROR
    assert checks["enabled_after_missing"] in (False, None)


def test_setup_configures_vim_lsp(checks: dict[str, Any]) -> None:
    assert checks["setup_ok"] is True
    cfg = checks["config"]
    assert cfg["cmd"] == ["sh", "-c", "exit 0"]
    section = {"model": {"path": "/ckpt", "loadOnStart": False}, "logLevel": "debug"}
    assert cfg["init_options"] == {"cudice": section}
    assert cfg["settings"] == {"cudice": section}
    assert cfg["refresh"] is True
    assert sorted(cfg["handlers"]) == ["cudice/status", "workspace/codeLens/refresh"]
    assert [n["msg"] for n in checks["notified_ok"]] == [
        'cudice: unknown setting "cudice.bogus" ignored (known keys: `cudice-lsp --print-schema`)'
    ]


def test_setup_without_settings_sends_objects_and_defers_the_model(checks: dict[str, Any]) -> None:
    sent = json.loads(checks["empty_settings_json"])
    section = {"model": {"loadOnStart": False}}  # the model loads on the first generate
    assert sent == {"init_options": {"cudice": section}, "settings": {"cudice": section}}


def test_attaches_only_where_vs_code_activates(checks: dict[str, Any]) -> None:
    assert checks["attach"] == {
        "plain": "none",
        "candidate": "candidate",
        "reference": "reference",
        "marker": "marker",
        "project": ".cudice",
    }


def test_progress_events_reach_the_statusline(checks: dict[str, Any]) -> None:
    p = checks["progress"]
    assert p["took"] is True
    assert p["during"] == "generating a CUDA kernel for Model: 40 tokens · 5.0 tok/s (12%)"
    assert p["after"] is None


def test_checkhealth_after_a_failed_setup_says_so(checks: dict[str, Any]) -> None:
    health = checks["health_after_missing"]
    assert "setup() failed: language server not found" in health, health
    assert "server command:" not in health, health


def test_user_commands(checks: dict[str, Any]) -> None:
    assert set(checks["commands"]) == {
        "CudiceGenerate",
        "CudiceInfill",
        "CudiceVerify",
        "CudiceReloadModel",
        "CudiceCancel",
        "CudiceStatus",
    }
    assert checks["commands"]["CudiceInfill"]["range"] == "."


def test_status_and_refresh_handlers(checks: dict[str, Any]) -> None:
    payload = {"model": "ready", "message": "m", "lastVerdict": "fast 2.0x", "uri": None}
    assert checks["status"]["stored"] == payload
    assert checks["status"]["autocmd"] == payload
    assert checks["status"]["ignored"] is True
    assert checks["refresh_reply"] is True
    assert checks["statusline_detached"] == ""


def test_line_range_is_an_lsp_range(checks: dict[str, Any]) -> None:
    assert checks["line_range"] == {"start": {"line": 1, "character": 0}, "end": {"line": 2, "character": 5}}


def test_checkhealth_reports_the_server_command(checks: dict[str, Any]) -> None:
    health = checks["health"]
    assert "has vim.lsp.config / vim.lsp.enable" in health, health
    assert "server command: sh -c exit 0" in health, health
    assert "no cudice client running" in health, health
    assert "clangd" in health and "nvcc" in health, health
