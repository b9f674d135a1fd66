"""`cudice-lsp` / `python -m cudice.server`: start the language server.

stdio by default (what editors launch). `--tcp --host H --port P` listens on TCP, for a server next
to a remote GPU while the editor runs elsewhere (docs/server.md). With no arguments (or only
`--stdio`, which VS Code's client adds, and `--log-level LEVEL`) the server starts at once,
without importing click (the options live in `lsp_cli.py`), and `initialize` is answered from a
prebuilt reply before pygls and lsprotocol are even imported (`fast_init.py`), so the editor's
start-up time-out does not wait on those imports (target and timings: docs/benchmarks.md).
Nothing here writes to stdout except the protocol itself (and `--print-schema`).
"""

from __future__ import annotations

import sys
from typing import Any

from cudice.server.log_levels import LOG_LEVELS


def fast_log_level(args: list[str]) -> tuple[bool, str | None]:
    """(whether `args` need no click: only `--stdio` and `--log-level LEVEL`, the level)."""
    level: str | None = None
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        if arg == "--stdio":
            continue
        if arg == "--log-level" and rest and rest[0] in LOG_LEVELS:
            level = rest.pop(0)
            continue
        return False, None
    return True, level


def main(argv: list[str] | None = None) -> Any:
    args = list(sys.argv[1:] if argv is None else argv)
    is_fast, log_level = fast_log_level(args)
    if is_fast:
        # `initialize` is answered from a prebuilt reply before pygls loads (fast_init.py)
        from cudice.server.fast_init import answer_initialize

        early = answer_initialize(sys.stdin.buffer, sys.stdout.buffer)
        if early is None:  # the client closed stdin at once
            return None
        from cudice.server.app import run

        run(early=early, log_level=log_level)
        return None
    from cudice.server.lsp_cli import lsp_command

    return lsp_command.main(args=args, prog_name="cudice-lsp")


if __name__ == "__main__":
    main()
