"""Fixtures of the e2e tests: `editors` starts language-server editors and stops them all.

`editors.start(client_name, workspace, init_options=..., env=..., configuration=...)` returns an
initialized `lsp_support.Editor`; `await editors.stop(editor)` ends one early (a test that restarts
the server, or checks the process table after it is gone). At teardown, passed or failed, every
editor still running is stopped the way `lsp_support.Editors` describes (shutdown, exit, a kill
past the bound, then its descendants), and a server that did not end cleanly fails the test there.

Function scope, on the test's own event loop (pyproject.toml sets `asyncio_mode = "auto"` and
`asyncio_default_fixture_loop_scope = "function"`, so pytest-asyncio runs this async generator
fixture, its teardown included, on the loop the test ran on; the client's pipes belong to it).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from lsp_support import Editors


@pytest.fixture
async def editors() -> AsyncIterator[Editors]:
    started = Editors()
    try:
        yield started
    finally:
        await started.stop_all()
