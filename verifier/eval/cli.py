"""`cudice eval PROBLEMS CANDIDATES`: KernelBench-style scores over a folder of problems.

Layout: every `*.py` in PROBLEMS is a reference (`Model`, `get_inputs`, `get_init_inputs`);
the candidate for `PROBLEMS/19_ReLU.py` is `CANDIDATES/19_ReLU.py` (same file name). A problem
without a candidate counts as a failure. Scores follow KernelBench's definition: every rate
is divided by the number of **problems** (not of candidates):
- `correct`  = correct candidates / problems (fast_0),
- `fast_1`   = correct and speedup > 1 beyond the measured spread (VerifyResult.is_fast) / problems,
- `fast_2`   = the same with 2.
Candidates run through a `VerifyBackend` (backends.py): the local `VerifyPool` (compiles in
parallel, one runner per GPU), or with `--ray [ADDRESS]` the Ray backend (dist/ray_backend.py: a
local Ray instance, or the cluster at ADDRESS). Both give the same verdicts. A progress bar on
stderr covers the whole run; `--out DIR` writes per-problem JSON (each as its verdict arrives),
scores, a Markdown summary and the fast_p curve (eval/report.py). Without a GPU (here, or in the
Ray cluster) nothing can be correct: the scores are 0 and the JSON says `gpu: false`.
The local pool checks 16 candidates to one pass of nvcc's front ends before it builds them
(`VerifyPool.prefill`, build/batch.py: the same verdicts and diagnostics as one check per
candidate). Where the verdicts stop at the check (`--compile-only`, or no GPU) that pass is every
candidate's check, several times faster; on a GPU it stands for the slim compile of a candidate it
finds failing (build/objects.py: a slim error that stands is then the verdict with nothing
compiled for it alone), and the others build as always.
Interrupted (Ctrl-C, SIGINT, SIGTERM), the run cancels what has not started, reports the verdicts
it reached (a problem not reached is `interrupted`, counted as a failure like a missing one; the
JSON says `interrupted: true`) and exits with 130; a verdict already done when the signal came is
reported too, and a second signal does not cut the backend's shutdown short. Killed outright,
`--out DIR/problems/` still holds every verdict that arrived: a run clears the records of the
problems it verifies when it starts, so none is an earlier run's. `--resume` (with `--out DIR`)
reuses each verdict DIR already holds whose key matches (`inputs_key`: the candidate's and the
reference's bytes, the settings, whether there is a GPU) and verifies only the rest; the JSON
counts them as `resumed`. A cancelled verdict or one the infrastructure failed (`dist.*`) is
never reused.
Not covered by the key: the cudice version and the GPU model; after an upgrade, or to re-time on
another GPU, run without `--resume`.
"""

from __future__ import annotations

import hashlib
import json
import signal
import sys
from collections.abc import Callable, Collection
from concurrent.futures import Future, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from cudice.verifier.backend_base import VerifyJob
from cudice.verifier.config import VerifyConfig
from cudice.verifier.source.result import Verdict, VerifyResult

LAYOUT_HELP = """Expected layout (KernelBench):
  PROBLEMS/19_ReLU.py     a reference: class Model, get_inputs(), get_init_inputs()
  CANDIDATES/19_ReLU.py   its candidate (same file name): class ModelNew + load_inline(...)
A problem without a candidate counts as a failure."""

if TYPE_CHECKING:
    from cudice.verifier.backends import VerifyBackend

LOCAL_RAY = "local"  # `--ray` without an address: start a local Ray instance


@dataclass(frozen=True, slots=True)
class EvalScores:
    num_problems: int
    num_candidates: int
    correct: float
    fast_1: float
    fast_2: float
    per_problem: tuple[dict[str, Any], ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "num_problems": self.num_problems,
            "num_candidates": self.num_candidates,
            "correct": self.correct,
            "fast_1": self.fast_1,
            "fast_2": self.fast_2,
            "per_problem": list(self.per_problem),
        }


INTERRUPTED = "interrupted"  # the verdict of a problem whose candidate a stopped run never reached


def score(
    problems: list[str], results: dict[str, VerifyResult], unfinished: Collection[str] = ()
) -> EvalScores:
    """KernelBench fast_p over ALL problems: a missing, failed or (in `unfinished`: a candidate
    without a verdict, never reached) candidate counts as 0."""
    n = len(problems)
    rows = []
    for p in problems:
        r = results.get(p)
        rows.append(
            {
                "problem": p,
                "verdict": r.verdict.value if r else INTERRUPTED if p in unfinished else "missing",
                "speedup": r.speedup if r else None,
                "speedup_min": r.speedup_min if r else None,
                "runtime_ms": r.runtime_ms if r else None,
                "reference_runtime_ms": r.reference_runtime_ms if r else None,
            }
        )

    def rate(pred: Any) -> float:
        return sum(1 for p in problems if (r := results.get(p)) is not None and pred(r)) / n if n else 0.0

    return EvalScores(
        n,
        len(results) + len(unfinished),
        rate(lambda r: r.verdict is Verdict.CORRECT),
        rate(lambda r: r.is_fast(1.0)),
        rate(lambda r: r.is_fast(2.0)),
        tuple(rows),
    )


@click.command("eval")
@click.argument("problems", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("candidates", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--compile-only", is_flag=True, help="Only compile the candidates (all scores are then 0).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=2,
    help="Concurrent compile workers (with a bare --ray: the CPUs of the local Ray instance).",
)
@click.option("--trials", type=click.IntRange(min=1), default=None, help="Correctness trials per candidate.")
@click.option(
    "--ray",
    "ray_address",
    is_flag=False,
    flag_value=LOCAL_RAY,
    default=None,
    metavar="[ADDRESS]",
    help="Run on Ray (put it after the folders): alone, start a local instance; with ADDRESS (auto, "
    'HOST:6379, ray://HOST:10001) join that cluster. Needs `pip install "cudice[dist]"`.',
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Write problems/*.json, scores.json, summary.md and the fast_p plot into this folder.",
)
@click.option(
    "--resume",
    is_flag=True,
    help="With --out DIR: keep the verdicts DIR already holds for unchanged candidates, references and "
    "settings; verify only the rest.",
)
def eval_command(
    problems: Path,
    candidates: Path,
    compile_only: bool,
    as_json: bool,
    workers: int,
    trials: int | None,
    ray_address: str | None,
    out_dir: Path | None,
    resume: bool,
) -> None:
    """Evaluate a folder of KernelBench problems against candidates: correctness, fast_1, fast_2."""
    if resume and out_dir is None:
        raise click.UsageError(
            "--resume needs --out DIR: the folder where the earlier run wrote its verdicts."
        )
    config = VerifyConfig(compile_only=compile_only)
    if trials is not None:
        config = config.with_(num_trials=trials)
    names = sorted(p.name for p in problems.glob("*.py"))
    if not names:
        raise click.UsageError(f"No *.py problem files in {problems}.\n{LAYOUT_HELP}")
    if not any((candidates / n).is_file() for n in names):
        found = sorted(p.name for p in candidates.glob("*.py"))[:3]
        raise click.UsageError(
            f"None of the {len(names)} problems in {problems} has a candidate of the same file name in "
            f"{candidates} (it holds {', '.join(found) + ', …' if found else 'no *.py files'})."
            f"\n{LAYOUT_HELP}"
        )
    with_candidate = [n for n in names if (candidates / n).is_file()]
    keys: dict[str, str | None] = {}
    results: dict[str, VerifyResult] = {}
    resumed, has_gpu = 0, False
    stop = _Stop()
    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        backend, has_gpu = _open_backend(config, workers, ray_address)
        with backend:
            keys = {n: inputs_key(candidates / n, problems / n, config, has_gpu) for n in with_candidate}
            if resume and out_dir is not None:
                results.update(_reusable(out_dir, keys))
            resumed = len(results)
            on_result = _start_report(out_dir, names, with_candidate, results, keys)
            todo = [n for n in with_candidate if n not in results]
            batched = _batched_checks(backend)
            futures: dict[str, Future[VerifyResult]] = {}
            for chunk in _chunks(todo, batched):
                jobs = [VerifyJob(candidates / n, reference=problems / n, key=n) for n in chunk]
                if batched > 1:  # the chunk's checks in one nvcc pass, before its jobs read them
                    backend.prefill(jobs)
                futures.update(
                    {
                        n: backend.submit(j.path, reference=j.reference, key=n)
                        for n, j in zip(chunk, jobs, strict=True)
                    }
                )
            _collect(futures, len(names) - len(with_candidate), resumed, results, on_result)
            stop.armed = False  # a signal from here on lets the backend's shutdown finish
    except KeyboardInterrupt:
        pass  # raised once (`_Stop`): later signals are only noted, so the shutdown above finished
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    interrupted = stop.raised
    unfinished = [n for n in with_candidate if n not in results]
    scores = score(names, results, unfinished)
    payload = {
        **scores.to_dict(),
        "gpu": has_gpu,
        "compile_only": compile_only,
        "backend": "local" if ray_address is None else f"ray:{ray_address}",
        "interrupted": interrupted,
        "resumed": resumed,
    }
    if out_dir is not None:
        from cudice.verifier.eval.report import write_report

        write_report(
            out_dir,
            names,
            results,
            payload,
            title=f"cudice eval of {problems.name}",
            unfinished=unfinished,
            keys=keys,
        )
    if interrupted:
        click.echo(
            f"cudice eval: interrupted after {len(results)} of {len(with_candidate)} verdicts; the "
            f"{len(unfinished)} not reached count as failures.",
            err=True,
        )
    if as_json:
        click.echo(json.dumps(payload))
        if interrupted:
            sys.exit(130)
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"cudice eval: {len(names)} problems, {scores.num_candidates} candidates")
    for col in ("problem", "verdict", "speedup", "candidate ms", "reference ms"):
        table.add_column(col)
    for row in scores.per_problem:
        sp = f"{row['speedup']:.2f}x" if row["speedup"] is not None else "-"
        ms = f"{row['runtime_ms']:.4f}" if row["runtime_ms"] is not None else "-"
        ref = f"{row['reference_runtime_ms']:.4f}" if row["reference_runtime_ms"] is not None else "-"
        table.add_row(row["problem"], row["verdict"], sp, ms, ref)
    console = Console()
    console.print(table)
    console.print(
        f"correct {scores.correct:.1%}  fast_1 {scores.fast_1:.1%}  fast_2 {scores.fast_2:.1%}  "
        f"(over all {scores.num_problems} problems)"
    )
    if not has_gpu and not compile_only:
        console.print("[yellow]No CUDA GPU: candidates were compiled only, so nothing counts as correct.[/]")
    if out_dir is not None:
        console.print(f"report: {out_dir / 'summary.md'}")
    if interrupted:
        sys.exit(130)


def inputs_key(candidate: Path, reference: Path, config: VerifyConfig, has_gpu: bool) -> str | None:
    """The digest of what a verdict is computed from: the candidate's and the reference's bytes,
    the settings that differ from the defaults, and whether the run stage had a GPU. None when a
    file cannot be read (the verifier then says why; such a verdict is never resumed)."""
    h = hashlib.sha256()
    try:
        parts = (candidate.read_bytes(), reference.read_bytes())
    except OSError:
        return None
    for part in (
        *parts,
        json.dumps(config.overrides(), sort_keys=True, default=str).encode(),
        b"gpu" if has_gpu else b"no gpu",
    ):
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()


def _reusable(out_dir: Path, keys: dict[str, str | None]) -> dict[str, VerifyResult]:
    """The verdicts of an earlier run in `out_dir/problems/` whose recorded key equals this run's
    (`inputs_key`); a record that is unreadable, keyless, of other inputs, cancelled, failed by
    the infrastructure (`dist.*`: a lost Ray node) or out of GPU memory without the repetition
    alone on the GPU (`runtime.retried_alone`: a run before it existed) is verified again."""
    from cudice.verifier.api import out_of_gpu_memory
    from cudice.verifier.eval.report import problem_path

    found: dict[str, VerifyResult] = {}
    for name, key in keys.items():
        try:
            record = json.loads(problem_path(out_dir, name).read_text())
            if key is None or record.get("key") != key or record.get("result") is None:
                continue
            result = VerifyResult.from_dict(record["result"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        codes = {d.code for d in result.diagnostics}
        unrepeated_oom = "runtime.retried_alone" not in codes and out_of_gpu_memory(
            result, list(result.diagnostics)
        )
        if (
            result.error != "cancelled"
            and not any(c.startswith("dist.") for c in codes)
            and not unrepeated_oom
        ):
            found[name] = result
    return found


class _Stop:
    """The SIGTERM and SIGINT handler of a run: the first signal while `armed` raises
    KeyboardInterrupt where the run waits for verdicts (it then reports those it reached); any
    later one, or one after the collection, is only noted, so the backend's shutdown (cancelling
    jobs, closing runners, stopping a local Ray) is never cut short."""

    def __init__(self) -> None:
        self.armed = True
        self.raised = False

    def __call__(self, signum: int, frame: object) -> None:
        if self.armed and not self.raised:
            self.raised = True
            raise KeyboardInterrupt


def _start_report(
    out_dir: Path | None,
    names: list[str],
    with_candidate: list[str],
    reused: dict[str, VerifyResult],
    keys: dict[str, str | None],
) -> Callable[[str, VerifyResult], object] | None:
    """With `--out DIR`: clear the records of the problems this run verifies (an earlier run's
    must not stand for a problem this one never reaches), write the `missing` ones at once, and
    return the writer of each verdict as it arrives; without `--out`, None."""
    if out_dir is None:
        return None
    from cudice.verifier.eval.report import problem_path, write_problem

    for name in names:
        if name not in reused:
            problem_path(out_dir, name).unlink(missing_ok=True)
    for name in set(names) - set(with_candidate):
        write_problem(out_dir, name, None)

    def on_result(name: str, result: VerifyResult) -> object:
        return write_problem(out_dir, name, result, keys.get(name))

    return on_result


def _batched_checks(backend: VerifyBackend) -> int:
    """How many candidates' compile checks share one nvcc pass (`VerifyPool.prefill`, build/batch.py),
    or 1: batched where the compiles run on this machine (the local pool, whose workers read this
    process's object cache). Where the verdicts stop at the check (compile-only, or no GPU) every
    candidate's check comes from the pass; where they link, a candidate the pass found failing takes
    it as its slim compile (build/objects.py) and a clean one builds as without it."""
    from cudice.verifier.build.batch import MAX_BATCH
    from cudice.verifier.pool import VerifyPool

    return MAX_BATCH if isinstance(backend, VerifyPool) else 1


def _chunks(names: list[str], size: int) -> list[list[str]]:
    return [names[k : k + size] for k in range(0, len(names), size)] if size > 1 else [names]


def _open_backend(config: VerifyConfig, workers: int, ray_address: str | None) -> tuple[VerifyBackend, bool]:
    """(backend, whether its run stage has a GPU): the local pool, or Ray (local instance or a cluster)."""
    from cudice.verifier.backends import make_backend

    if ray_address is None:
        from cudice.verifier.api import gpu_available

        return make_backend("local", config, num_compile_workers=workers), gpu_available()
    from cudice.verifier.dist.ray_backend import RayUnavailable

    local = ray_address == LOCAL_RAY
    try:
        backend = make_backend(
            "ray",
            config,
            num_compile_workers=workers if local else None,
            address=None if local else ray_address,
        )
    except RayUnavailable as exc:
        raise click.ClickException(str(exc)) from exc
    return backend, getattr(backend, "num_gpus", 0) > 0


def _collect(
    futures: dict[str, Future[VerifyResult]],
    missing: int,
    resumed: int,
    results: dict[str, VerifyResult],
    on_result: Callable[[str, VerifyResult], object] | None = None,
) -> None:
    """Wait for every future behind one progress bar on stderr (stdout stays the report or the
    JSON), putting each verdict into `results` (and through `on_result`) as it arrives. On an
    interrupt, every verdict already done is taken too (before the backend's shutdown cancels
    the rest), then the interrupt goes on."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    by_future = {f: n for n, f in futures.items()}
    columns = (
        TextColumn("verifying"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.description}"),
    )
    with Progress(*columns, console=Console(stderr=True)) as progress:
        notes = [f"{missing} without a candidate"] * bool(missing) + [f"{resumed} resumed"] * bool(resumed)
        task = progress.add_task(f"({', '.join(notes)})" if notes else "", total=len(futures))
        try:
            for fut in as_completed(by_future):
                _take(by_future[fut], fut.result(), results, on_result)
                progress.advance(task)
        except KeyboardInterrupt:
            for fut, name in by_future.items():
                if name not in results and fut.done() and not fut.cancelled() and fut.exception() is None:
                    result = fut.result()
                    if result.error != "cancelled":
                        _take(name, result, results, on_result)
            raise


def _take(
    name: str,
    result: VerifyResult,
    results: dict[str, VerifyResult],
    on_result: Callable[[str, VerifyResult], object] | None,
) -> None:
    results[name] = result
    if on_result is not None:
        on_result(name, result)
