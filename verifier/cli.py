"""`cudice verify CANDIDATE`: run the verifier from a shell (registered in server/cli.py).

`--json` prints exactly one JSON object (VerifyResult.to_dict(): `verdict`, `diagnostics` with
1-based `line`/`column`, `severity`, `message`, `code`; `speedup`, `runtime_ms`,
`reference_runtime_ms`, …) and nothing else on stdout. Without it, a readable report on stdout
(never wrapped: `file:line:col` stays on one line when piped) and a progress line with the
elapsed time on stderr (also when stderr is not a terminal: `server/cli_progress.py`). The exit
status is 0 whenever a verdict was reached (whatever it is), unless `--exit-code` asks for 1
when the verdict is not `correct` (`compiled` with `--compile-only`); usage errors give click's 2.

A candidate without a reference is still checked and compiled: compile errors are located as
usual, and a clean build ends with `compiled` and a line saying that correctness and speed were
not checked and how to give a reference. So `--exit-code` gives 1 for it (it is not `correct`),
and 0 with `--compile-only` (only the build was asked for); `--json` carries the same verdict
and the `parse.no_reference` warning.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
import time
from pathlib import Path

import click
from cudice.verifier.config import VerifyConfig
from cudice.verifier.source.reference import HOW_TO_GIVE_ONE, NO_REFERENCE_CODES
from cudice.verifier.source.result import Severity, Stage, Verdict, VerifyResult
from cudice.verifier.static.policy import Strictness
from rich.console import Console
from rich.markup import escape
from rich.table import Table

VERDICT_STYLE = {
    Verdict.CORRECT: "bold green",
    Verdict.COMPILED: "green",
    Verdict.CHECKED: "green",
    Verdict.INCORRECT: "bold red",
    Verdict.COMPILE_ERROR: "bold red",
    Verdict.STATIC_VIOLATION: "bold red",
    Verdict.RUNTIME_ERROR: "bold red",
    Verdict.TIMEOUT: "bold yellow",
    Verdict.CRASH: "bold red",
    Verdict.INVALID_INPUT: "bold red",
}
SEVERITY_STYLE = {
    Severity.ERROR: "red",
    Severity.WARNING: "yellow",
    Severity.INFORMATION: "cyan",
    Severity.HINT: "dim",
}
STAGES = [s.value for s in Stage]
_DEFAULT = {f.name: f.default for f in dataclasses.fields(VerifyConfig)}  # the help texts' defaults


@click.command("verify")
@click.argument("candidate", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--reference",
    "-r",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Reference file with Model/get_inputs (else the candidate's own Model, else its "
    "`# cudice: reference=PATH` comment; without any, only the static checks and the compile run).",
)
@click.option("--compile-only", is_flag=True, help="Stop after compiling (no correctness, no timing).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object and nothing else.")
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=1),
    default=None,
    help=f"Seconds allowed for loading, checking and timing the kernel (default {_DEFAULT['timeout_s']:g}).",
)
@click.option(
    "--trials",
    type=click.IntRange(min=1),
    default=None,
    help=f"Correctness trials (default {_DEFAULT['num_trials']}).",
)
@click.option(
    "--strictness",
    type=click.Choice([s.value for s in Strictness]),
    default=_DEFAULT["static_policy"],
    show_default=True,
    help="Static anti-cheat policy (docs/anticheat.md).",
)
@click.option(
    "--exit-code",
    "exit_code",
    is_flag=True,
    help="Exit 1 unless the verdict is `correct` (with --compile-only: `compiled`), for scripts and CI.",
)
def verify_command(
    candidate: Path,
    reference: Path | None,
    compile_only: bool,
    as_json: bool,
    timeout_s: float | None,
    trials: int | None,
    strictness: str,
    exit_code: bool,
) -> None:
    """Verify a CUDA candidate against its PyTorch reference: static checks, compile, correctness, timing."""
    changes: dict[str, object] = {"compile_only": compile_only, "static_policy": strictness}
    if timeout_s is not None:
        changes["timeout_s"] = timeout_s
    if trials is not None:
        changes["num_trials"] = trials
    result = _verify(candidate, reference, VerifyConfig().with_(**changes), as_json)
    if exit_code and not passed(result, compile_only):
        sys.exit(1)


def passed(result: VerifyResult, compile_only: bool) -> bool:
    """What `--exit-code` accepts: `correct`, or `compiled` for a compile-only run."""
    return result.verdict is (Verdict.COMPILED if compile_only else Verdict.CORRECT)


def _verify(candidate: Path, reference: Path | None, config: VerifyConfig, as_json: bool) -> VerifyResult:
    from cudice.server.cli_progress import ProgressLine
    from cudice.verifier.api import verify
    from cudice.verifier.run.gpu_probe import gpu_absent_reason

    if as_json:
        with ProgressLine("verifying"):
            result = verify(candidate, reference=reference, config=config, warm_judge=True)
        click.echo(result.to_json())
        return result
    console = Console(highlight=False, soft_wrap=True)  # soft_wrap: no line breaks inside file:line:col
    console.print(f"[bold]cudice verify[/] {candidate}")
    no_gpu = None if config.compile_only else gpu_absent_reason()
    if no_gpu is not None:
        console.print(
            f"[yellow]Static checks and compile only (correctness and timing skipped): {escape(no_gpu)}.[/]"
        )
    done = threading.Event()
    seen: list[str] = []

    following = {
        "parse": "static checks",
        "static": "compiling (nvcc: seconds to a minute for a new kernel, cached after)",
        "compile": "loading the kernel",
        "load": "checking correctness",
        "correctness": "timing",
    }

    with ProgressLine("parsing") as line:

        def on_stage(partial: VerifyResult) -> None:
            seen.append(partial.stage.value)
            wall = partial.stage_wall_s.get(partial.stage.value)
            extra = f" ({wall:.1f} s)" if wall is not None else ""
            n_err = sum(d.severity is Severity.ERROR for d in partial.diagnostics)
            console.print(
                f"  [green]✓[/] {partial.stage.value}{extra}" + (f", {n_err} error(s)" if n_err else "")
            )
            line.update(following.get(partial.stage.value, partial.stage.value))

        t0 = time.perf_counter()
        result = verify(candidate, reference=reference, config=config, on_stage=on_stage, warm_judge=True)
        done.set()
    print_report(console, result, time.perf_counter() - t0)
    return result


def print_report(console: Console, result: VerifyResult, wall_s: float) -> None:
    """The human-readable report (also used by `cudice eval --verbose`)."""
    style = VERDICT_STYLE.get(result.verdict, "bold")
    console.print(f"verdict: [{style}]{result.verdict.value}[/] (stage {result.stage.value}, {wall_s:.1f} s)")
    shown: set[tuple[object, ...]] = set()
    for d in result.diagnostics:
        loc = d.location
        key = (loc, d.severity, d.code, d.message)
        if key in shown:  # one line per problem, also when two stages reported it
            continue
        shown.add(key)
        where = f"{loc.path}:{loc.line}:{loc.column}" if loc else "-"
        sev = SEVERITY_STYLE.get(d.severity, "")
        console.print(f"  {where}: [{sev}]{d.severity.value}[/]: {d.message} [dim]\\[{d.code}][/]")
    if result.speedup is not None and result.candidate and result.reference:
        table = Table(show_header=True, header_style="bold")
        for col in ("", "median ms", "q1 ms", "q3 ms", "min ms", "max ms"):
            table.add_column(col)
        for name, t in (("reference", result.reference), ("candidate", result.candidate)):
            table.add_row(
                name,
                f"{t.median_ms:.4f}",
                f"{t.q1_ms:.4f}",
                f"{t.q3_ms:.4f}",
                f"{t.min_ms:.4f}",
                f"{t.max_ms:.4f}",
            )
        console.print(table)
        flag = " [yellow](not counted: see timing.suspicious)[/]" if result.is_suspicious else ""
        console.print(f"speedup {result.speedup:.2f}x (pessimistic {result.speedup_min or 0:.2f}x){flag}")
    reached = STAGES.index(result.stage.value)
    skipped = [s for s in STAGES[reached + 1 :]]
    if result.verdict is Verdict.COMPILED and _no_reference(result):
        console.print(
            "[bold yellow]not checked: correctness, speed[/] (no reference to compare with). "
            f"{escape(HOW_TO_GIVE_ONE)}"
        )
    elif result.verdict is Verdict.COMPILED:
        console.print(
            f"skipped: {', '.join(s for s in skipped if s != 'load') or '-'} "
            f"({'--compile-only' if result.compile_only and not _no_gpu(result) else 'no CUDA GPU'})"
        )
    elif skipped and result.verdict is not Verdict.CORRECT:
        console.print(f"[dim]not reached: {', '.join(skipped)}[/]")
    if result.error and result.verdict in (Verdict.CRASH, Verdict.RUNTIME_ERROR, Verdict.TIMEOUT):
        console.print(f"[dim]{result.error[-1500:]}[/]")
    sys.stdout.flush()


def _no_gpu(result: VerifyResult) -> bool:
    return any(d.code == "verify.no_gpu" for d in result.diagnostics)


def _no_reference(result: VerifyResult) -> bool:
    return any(d.code in NO_REFERENCE_CODES for d in result.diagnostics)


@click.command("prepare")
def prepare_command() -> None:
    """Work out once, ahead, what the first compile error of a fresh build cache needs.

    The first slim-build compile error per build cache reads two lists (the macros torch's full and
    slim headers define differently, and the names the full headers declare: a few nvcc
    preprocessor runs, about ten seconds) that every later error reads from the cache
    (verifier/build/compile.py). The editor's verify workers compute them when the box is idle;
    this computes them now, in the cache the editor and `cudice verify` share, so the first error
    after installing comes as fast as later ones. Safe to run again: a warm cache answers at once.
    """
    from cudice.verifier.api import prepare_first_error
    from cudice.verifier.build.toolchain import ToolchainError, probe_toolchain

    config = VerifyConfig()
    t0 = time.perf_counter()
    try:  # the probe is cached; run here so that a missing tool is said, not swallowed
        probe_toolchain(config.cache_dir, config.arch_list_env)
    except ToolchainError as exc:
        raise click.ClickException(f"cannot prepare: {exc}") from exc
    if not prepare_first_error(config):
        raise click.ClickException("the preparation was stopped before it ended; run `cudice prepare` again")
    click.echo(
        f"cudice: the first compile error's lists are ready in {config.cache_dir} "
        f"({time.perf_counter() - t0:.1f} s)"
    )
