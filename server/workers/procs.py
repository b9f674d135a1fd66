"""A worker's process family, found and killed through Linux `/proc`, and its CPU use: the server's
names for what `verifier/process.py` owns (the one reader of `/proc`; its docstring says how a
family is found and what is not covered).

The server kills a worker's whole *family*: its process group, every descendant, and every process
that still carries the worker's family tag in its environment (`FAMILY_ENV`, set by
`protocol.ChildProcess`). A worker that loses the server kills its own family the same way
(`child.exit_with_family`), and `kill_own_group` its process group's other members. The quick worker
reports `group_cpu_seconds` as its heartbeat (quick_child.py).
"""

from __future__ import annotations

from cudice.verifier.process import FAMILY_ENV, family_pids, group_cpu_seconds, kill_family, kill_own_group

__all__ = ["FAMILY_ENV", "family_pids", "group_cpu_seconds", "kill_family", "kill_own_group"]
