"""The `cudice-lsp` / `cudice lsp` command line (click): options, `--help`, `--print-schema`.

`cudice.server.__main__` imports this only when arguments need parsing; a bare `cudice-lsp` (what
editors launch) starts the server without importing click. Nothing here writes to stdout except
the protocol itself (and `--print-schema`).
"""

from __future__ import annotations

import click
from cudice.server.log_levels import LOG_LEVELS


@click.command("lsp", context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--stdio", "transport", flag_value="stdio", default=True, help="Speak LSP over stdin/stdout (default)."
)
@click.option(
    "--tcp",
    "transport",
    flag_value="tcp",
    help="Listen on TCP instead of stdio: one client at a time, until a client sends `exit` (see --multi).",
)
@click.option(
    "--multi",
    is_flag=True,
    help="With --tcp: serve many editors at once (a team's GPU box), each with its own session, all "
    "sharing one model and one verification pool; runs until interrupted (docs/server.md).",
)
@click.option(
    "--max-pending",
    default=4,
    show_default=True,
    type=click.IntRange(1, 1000),
    help="With --multi: verifications + generations one client may have pending; more are refused.",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="TCP address to bind (with --tcp).")
@click.option(
    "--port", default=2087, show_default=True, type=click.IntRange(0, 65535), help="TCP port (with --tcp)."
)
@click.option(
    "--log-level", type=click.Choice(LOG_LEVELS), default=None, help="Override the cudice.logLevel setting."
)
@click.option("--print-schema", is_flag=True, help="Print the settings JSON Schema and exit.")
def lsp_command(
    transport: str,
    multi: bool,
    max_pending: int,
    host: str,
    port: int,
    log_level: str | None,
    print_schema: bool,
) -> None:
    """Run the cudice language server."""
    if print_schema:
        from cudice.server.settings import schema_text

        click.echo(schema_text(), nl=False)
        return
    from cudice.server.app import run

    if multi and transport != "tcp":
        raise click.UsageError("--multi needs --tcp (editors connect over TCP to the shared server)")
    if multi:
        run(
            transport=transport,
            host=host,
            port=port,
            log_level=log_level,
            multi=True,
            max_pending=max_pending,
        )
        return
    run(transport=transport, host=host, port=port, log_level=log_level)
