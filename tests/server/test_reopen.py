"""A document closed while it is verified and opened again (Neovim's `:edit` is a didClose, then a
didOpen) is verified again as soon as the run its close cancelled has ended: the run's end wakes
it, nothing polls for it.

The server runs in-process (plain client capabilities) and gets its notifications through its
protocol, as from a client; its verify worker is a stand-in whose first run lasts until it is
cancelled and the test lets its worker exit. While the reopened document waits, `asyncio.sleep`
never returns (a stopped clock), so the second run can only start because the first one's end
woke the wait.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest
from cudice.server.core import CudiceServer
from cudice.server.verification import verify_document
from cudice.server.workers.verify import VerifyRequest
from cudice.verifier.source.result import Stage, Verdict, VerifyResult
from inprocess_server import initialized_server
from lsprotocol import types as lsp

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
WAIT_S = 60.0  # bound on each wait below (a loaded 2-core box; each takes milliseconds)


class _Jobs:
    """Stands in for `VerifyJobs`: the first run lasts until it is cancelled and its worker has
    exited (`exited`, set by the test), later ones answer `compiled`."""

    def __init__(self) -> None:
        self.requests: list[VerifyRequest] = []
        self.started = asyncio.Event()
        self.exited = asyncio.Event()
        self.second = asyncio.Event()
        self._cancelled = asyncio.Event()
        self._running: set[str] = set()

    async def run(self, request: VerifyRequest, **_: Any) -> VerifyResult | None:
        self.requests.append(request)
        if len(self.requests) > 1:
            self.second.set()
            return VerifyResult(Verdict.COMPILED, Stage.COMPILE, request.path, compile_only=True)
        self._running.add(request.uri)
        self.started.set()
        await self._cancelled.wait()
        await self.exited.wait()  # the killed worker is gone: the run returns no verdict
        return None

    def cancel(self, uri: str) -> bool:
        was_running = uri in self._running
        self._running.discard(uri)
        self._cancelled.set()
        return was_running

    def is_running(self, uri: str) -> bool:
        return uri in self._running

    def prepare_when_idle(self) -> None:
        pass


class _Quick:
    async def start(self) -> None:
        pass

    async def shutdown(self) -> None:
        pass

    async def check(self, path: str, source: str, **_: Any) -> VerifyResult | None:
        return None


def _server(tmp_path: Path) -> tuple[CudiceServer, _Jobs]:
    jobs = _Jobs()
    return initialized_server(tmp_path, jobs=jobs, quick=_Quick()), jobs


def _open(ls: CudiceServer, path: Path) -> None:
    item = lsp.TextDocumentItem(uri=path.as_uri(), language_id="python", version=1, text=path.read_text())
    ls.protocol.handle_message(lsp.DidOpenTextDocumentNotification(lsp.DidOpenTextDocumentParams(item)))


def _close(ls: CudiceServer, path: Path) -> None:
    doc = lsp.TextDocumentIdentifier(uri=path.as_uri())
    ls.protocol.handle_message(lsp.DidCloseTextDocumentNotification(lsp.DidCloseTextDocumentParams(doc)))


async def test_a_reopened_document_is_verified_again_once_its_cancelled_run_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copy(EXAMPLES / "relu.py", tmp_path / "relu.py")
    cand = tmp_path / "relu_cuda.py"
    shutil.copy(EXAMPLES / "relu_cuda.py", cand)
    ls, jobs = _server(tmp_path)
    _open(ls, cand)
    first = ls.spawn(verify_document(ls, cand.as_uri()))  # a save's verification
    await asyncio.wait_for(jobs.started.wait(), WAIT_S)

    stopped = asyncio.Event()  # never set: every asyncio.sleep from here on waits for good

    async def stopped_clock(delay: float, result: Any = None) -> Any:
        await stopped.wait()
        return result

    yield_once = asyncio.sleep
    monkeypatch.setattr(asyncio, "sleep", stopped_clock)
    _close(ls, cand)  # cancels the run
    _open(ls, cand)  # reopened while the cancelled run is still ending
    await yield_once(0)  # one turn of the loop: the reopened document starts waiting
    assert not jobs.second.is_set()
    jobs.exited.set()
    assert await asyncio.wait_for(first, WAIT_S) is None  # the cancelled run: no verdict
    await asyncio.wait_for(jobs.second.wait(), WAIT_S)
    assert [r.source for r in jobs.requests] == [cand.read_text()] * 2
