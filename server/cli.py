"""The `cudice` command. Subcommands live next to the code they drive and load lazily.

`cudice --help` imports nothing heavy: each subcommand's module is imported only when that
subcommand runs (or its own `--help` is asked for), and those modules import torch lazily too.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import Any

import click
from cudice.server import __version__

# name -> (module, attribute, one-line help shown by `cudice --help`)
SUBCOMMANDS: dict[str, tuple[str, str, str]] = {
    "verify": (
        "cudice.verifier.cli",
        "verify_command",
        "Verify a CUDA candidate against its PyTorch reference.",
    ),
    "generate": ("cudice.model.cli", "generate_command", "Generate or infill a kernel with a DICE model."),
    "model": ("cudice.model.cli", "model_group", "Model utilities (make-tiny test checkpoints, info)."),
    "eval": (
        "cudice.verifier.eval.cli",
        "eval_command",
        "Evaluate a set of problems (correctness, fast_1, fast_2).",
    ),
    "train": ("cudice.model.train.cli", "train_group", "Offline fine-tuning: SFT and BiC-RL."),
    "prepare": (
        "cudice.verifier.cli",
        "prepare_command",
        "Work out ahead what the first compile error of a fresh build cache needs.",
    ),
    "lsp": ("cudice.server.lsp_cli", "lsp_command", "Run the language server (same as `cudice-lsp`)."),
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self._available()])

    def _available(self) -> list[str]:
        names = []
        for name, (module, _, _) in SUBCOMMANDS.items():
            if importlib.util.find_spec(module) is not None:
                names.append(name)
        return names

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in SUBCOMMANDS:
            module, attr, _ = SUBCOMMANDS[cmd_name]
            if importlib.util.find_spec(module) is None:
                return None
            cmd = getattr(importlib.import_module(module), attr)
            assert isinstance(cmd, click.Command)
            return cmd
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Show one-line help without importing the subcommand modules.
        rows = [(name, SUBCOMMANDS[name][2]) for name in self._available()]
        rows += [(n, c.get_short_help_str()) for n, c in self.commands.items()]
        with formatter.section("Commands"):
            formatter.write_dl(sorted(rows))


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="cudice")
def cli() -> None:
    """cudice: write fast CUDA kernels with a DICE block-diffusion model, verified against PyTorch."""


@cli.command("version")
def version_command() -> None:
    """Print cudice's version and the versions of the tools it found."""
    import os
    import platform
    import shutil

    click.echo(f"cudice {__version__}")
    click.echo(f"python {platform.python_version()}")
    for mod in ("torch", "transformers", "pygls", "lsprotocol"):
        spec = importlib.util.find_spec(mod)
        if spec is None:
            click.echo(f"{mod} not installed")
            continue
        try:
            from importlib.metadata import version

            click.echo(f"{mod} {version(mod)}")
        except Exception:  # metadata missing: report what we can
            click.echo(f"{mod} (version unknown)")
    fallback = "/usr/local/cuda/bin/nvcc"
    nvcc = shutil.which("nvcc") or (fallback if os.path.exists(fallback) else None)
    found = f"{nvcc_version(nvcc)} ({nvcc})" if nvcc else "not found (compiling needs the CUDA toolkit)"
    click.echo(f"nvcc {found}")


def nvcc_version(nvcc: str) -> str:
    """nvcc's release line ("release 13.0, V13.0.48"), or why it could not be read."""
    import subprocess

    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"(version unknown: {exc})"
    line = next((t for t in out.splitlines() if "release" in t), "")
    return line.split("release", 1)[1].strip(" ,") if line else "(version unknown)"


def main(argv: list[str] | None = None) -> Any:
    return cli.main(args=argv if argv is not None else sys.argv[1:], prog_name="cudice")


if __name__ == "__main__":
    main()
