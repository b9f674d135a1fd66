"""`shutdown` while requests are in flight: pygls 2.1.1 cancels them while iterating its table of
them, and a cancelled command's future removes itself from that table at once. The server's table
iterates over a snapshot, so `shutdown` does not fail with "dictionary changed size"."""

from __future__ import annotations

import concurrent.futures
from typing import Any


def test_requests_in_flight_may_leave_the_table_while_shutdown_cancels_them() -> None:
    from cudice.server.app import create_server

    futures = create_server().protocol._request_futures
    for msg_id in range(3):
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        future.add_done_callback(lambda _f, key=msg_id: futures.pop(key, None))
        futures[msg_id] = future
    for _, future in futures.items():  # what pygls' lsp_shutdown does
        if not future.done():
            future.cancel()
    assert futures == {}
