"""`cudice-lsp` / `python -m cudice.server`: start the language server.

stdio by default (what editors launch). `--tcp --host H --port P` listens on TCP, for a server next
to a remote GPU while the editor runs elsewhere (docs/server.md). With no arguments (or only
`--stdio`, which VS Code's client adds) the server starts at once, without importing click (the
options live in `lsp_cli.py`): `initialize` should be answered within 0.5 s of the process start.
Nothing here writes to stdout except the protocol itself (and `--print-schema`).
"""

from __future__ import annotations

import sys
from typing import Any

FAST_ARGV: tuple[list[str], ...] = ([], ["--stdio"])  # argument lists that mean "stdio, defaults": no parsing needed


def main(argv: list[str] | None = None) -> Any:
    args = list(sys.argv[1:] if argv is None else argv)
    if args in FAST_ARGV:
        from cudice.server.app import run

        run()
        return None
    from cudice.server.lsp_cli import lsp_command

    return lsp_command.main(args=args, prog_name="cudice-lsp")


if __name__ == "__main__":
    main()
