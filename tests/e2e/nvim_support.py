"""The environment of a headless-Neovim driver (nvim_*_driver.lua, run by `nvim_tools.run_lua`).

Not a test module: helpers shared by test_nvim_*.py. The variables are the ones the drivers read
(CUDICE_PLUGIN, CUDICE_WORK, CUDICE_OUT, CUDICE_PYTHON) plus XDG_STATE_HOME, so that Neovim's
lsp.log goes to the test's folder, not to ~.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from lsp_support import FAKES_ENV
from nvim_tools import PLUGIN

HERE = Path(__file__).resolve().parent


def nvim_env(work: Path, out: Path, state: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """A driver's environment: the plugin (editors/nvim), the work folder, the JSON file it writes,
    this Python for the server, Neovim's state folder; `extra` added on top."""
    return {
        "CUDICE_PLUGIN": str(PLUGIN),
        "CUDICE_WORK": str(work),
        "CUDICE_OUT": str(out),
        "CUDICE_PYTHON": sys.executable,
        "XDG_STATE_HOME": str(state),
        **(extra or {}),
    }


def scripted_nvim_env(
    work: Path, out: Path, state: Path, num_tokens: int, extra: dict[str, str] | None = None
) -> dict[str, str]:
    """`nvim_env` for a server with the scripted model and verifier (`lsp_fakes`, importable
    through PYTHONPATH): no GPU, its cache under `work/cache`, and generations of `num_tokens`
    tokens, 0.1 s each (progress slow enough to be seen)."""
    return nvim_env(
        work,
        out,
        state,
        {
            **FAKES_ENV,
            "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
            "CUDICE_FAKE_TOKEN_DELAY_S": "0.1",
            "CUDICE_FAKE_NUM_TOKENS": str(num_tokens),
            "CUDICE_GPU": "0",
            "CUDICE_CACHE_DIR": str(work / "cache"),
            **(extra or {}),
        },
    )
