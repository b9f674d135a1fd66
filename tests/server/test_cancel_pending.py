"""`cudice.cancel` reaches a save's verification before its job exists: while the verification
awaits its progress token and the static stage, the document holds a pending-cancel event, which
`cancel_work` sets and counts (the verification then ends as cancelled instead of running)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from cudice.server.document_state import DocumentState
from cudice.server.session import cancel_work


class _Jobs:
    def __init__(self, running: list[str]) -> None:
        self.running, self.cancelled = running, []

    def cancel(self, uri: str) -> bool:
        self.cancelled.append(uri)
        return uri in self.running

    def running_uris(self) -> list[str]:
        return list(self.running)


def test_a_verification_without_its_job_yet_is_cancelled_and_counted() -> None:
    starting, running, idle = (DocumentState(uri) for uri in ("file:///a.py", "file:///b.py", "file:///c.py"))
    starting.pending_cancel = asyncio.Event()
    ls = SimpleNamespace(
        jobs=_Jobs(["file:///b.py"]),
        documents={s.uri: s for s in (starting, running, idle)},
    )
    assert cancel_work(ls, "file:///a.py") == 1 and starting.pending_cancel.is_set()
    assert cancel_work(ls, "file:///a.py") == 0  # already cancelled: not counted twice
    assert cancel_work(ls, "file:///c.py") == 0  # nothing under way
    starting.pending_cancel = asyncio.Event()
    assert cancel_work(ls, None) == 2  # every document: the running job and the starting one
    assert starting.pending_cancel.is_set() and "file:///c.py" not in ls.jobs.cancelled[-2:]
