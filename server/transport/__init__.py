"""How the server's bytes reach pygls: every workaround of pygls 2.1's transport, in one place.

- `rpc_reader.py`: the JSON-RPC read loop (pygls' `run_async` goes deaf on a frame without a
  `Content-Length`, never answers a request it cannot read, and shows every unreadable message as
  a popup);
- `tcp.py`: the single-client TCP listener (pygls' `start_tcp` closes its listener when the first
  connection ends);
- `pygls_fixes.py`: the stdio server over that read loop (`serve_stdio`) and the request-future
  table that `shutdown` may iterate while a request removes itself (`SnapshotItems`).
The multi-client listener (`server/team.py`) and the early `initialize` answer (`fast_init.py`)
use these; they are features of their own, not workarounds.

Importing this package imports nothing; each module imports pygls itself, and nothing here knows
cudice's features.
"""
