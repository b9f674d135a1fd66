"""A `CudiceServer` in the test's own process, initialised as a client would initialise it, with
the test's stand-ins in place of its quick and verify workers (cached properties, so they must be
set before first use). Shared by the in-process server tests of this folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cudice.server.app import create_server
from cudice.server.core import CudiceServer
from lsprotocol import types as lsp


def initialized_server(tmp_path: Path, *, jobs: Any, quick: Any) -> CudiceServer:
    """A server whose `initialize` has run (root: `tmp_path`), results under `tmp_path/results`."""
    ls = create_server(results_dir=tmp_path / "results")
    answer = ls.protocol.lsp_initialize(
        lsp.InitializeParams(capabilities=lsp.ClientCapabilities(), root_uri=tmp_path.as_uri())
    )
    for _ in answer:  # a generator in pygls 2: run it to its end
        pass
    ls.__dict__["jobs"] = jobs
    ls.__dict__["quick"] = quick
    return ls
