"""The demo model's one-call recipe: SFT within a fixed GPU budget, then held-out scoring of the new
and the shipped checkpoint side by side (`bench/train_demo.sh fit`).

    python3 -m cudice.model.train.corpus.recipe_fit --work W --out $OUT --minutes 9 \\
        --corpus-tar .ckpt/corpus.tar.gz --tokenizer .ckpt/tokenizer --old model/assets/demo

1. unpack the corpus (built on a CPU box: `python -m cudice.model.train.corpus build`, then
   `tar czf corpus.tar.gz sft.jsonl manifest.json problems/heldout solutions/heldout`) and write
   the initial checkpoint with the carried tokenizer (`init_model.init_checkpoint`);
2. in the background, verify a sample of the templates of every family, held-out ones included
   (`verify-templates`, the verifier's pool; compiles use the CPU cores while SFT uses the GPU);
3. SFT with `fit.fit` until the training budget (the phase's minutes less what scoring needs);
4. save the checkpoint as one tar cut into parts of at most 15 MiB (`demo_fit.tar.partNN`);
5. one greedy answer per held-out problem from the new and from the old checkpoint
   (`heldout.generate`), scored by `heldout.score`; `results.json` (rates with 95 % intervals,
   per family and per prompt style, the loss curve) and `answers.jsonl` (every answer);
6. with `--infill-per-family J`: the new checkpoint infills the wrappers of the first J held-out
   templates of each family (their CUDA source string emptied, the editor's split) and the
   hand-written scaffolds of `--scaffolds` (bench/infill_scaffolds), one greedy answer each;
   text scores in `results.json` ("infill"), every answer in `infill_answers.jsonl`;
7. with `--eval-per-family K`: the new checkpoint's end-to-end answers to the first K held-out
   problems of each family, and step 6's infilled files, verified in one `cudice eval` (compile,
   correctness, timing on this GPU) until the budget ends; `verified.json` holds the verdicts per
   kind (e2e, infill, hand, external), and files whose verdict did not come back in time are
   listed as not verified, never counted either way.
With `--problems DIR` (between 6 and 7): one greedy end-to-end answer per reference file of DIR,
files from outside the corpus such as KernelBench's level-1 problems in the model's families
(unmodified; never in this repository), verified in step 7 as kind "external".

Everything said goes to stderr and `fit.log` in the output folder. Not covered: verifying every
held-out answer (a build per kernel does not fit one call; step 7 takes a subset), RL (phase b of
`recipe.py`).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import click

PART_BYTES = 15 * 2**20
NEW_TOKENS = 512  # the new tokenizer writes a template answer in under 200 tokens
OLD_TOKENS = 1536  # the shipped model's word-level tokenizer needs about 900


class Clock:
    def __init__(self, out: Path, minutes: float) -> None:
        self.start = time.monotonic()
        self.deadline = self.start + 60 * minutes
        out.mkdir(parents=True, exist_ok=True)
        self.log = out / "fit.log"
        self.log.write_text("")

    def half_the_rest(self, reserve_s: float) -> float:
        """A deadline (time.monotonic()) half-way through what is left once `reserve_s` is kept back,
        at least 10 s away."""
        return time.monotonic() + max(10.0, 0.5 * (self.deadline - time.monotonic() - reserve_s))

    def say(self, text: str) -> None:
        line = f"[fit {time.monotonic() - self.start:6.1f}s] {text}"
        print(line, file=sys.stderr, flush=True)
        with self.log.open("a") as f:
            f.write(line + "\n")


def split_file(path: Path, part_bytes: int = PART_BYTES) -> list[Path]:
    """`path` cut into `path.partNN` files of at most `part_bytes`; `path` is removed."""
    parts: list[Path] = []
    with path.open("rb") as f:
        while chunk := f.read(part_bytes):
            part = path.with_name(f"{path.name}.part{len(parts):02d}")
            part.write_bytes(chunk)
            parts.append(part)
    path.unlink()
    return parts


def join_parts(first_part: Path, into: Path) -> Path:
    """Concatenate `X.part00`, `X.part01`, ... (next to `first_part`) into `into`."""
    stem = first_part.name.rsplit(".part", 1)[0]
    parts = sorted(first_part.parent.glob(f"{stem}.part[0-9][0-9]"))
    with into.open("wb") as out:
        for part in parts:
            out.write(part.read_bytes())
    return into


def _tar_dir(src: Path, tar_path: Path) -> Path:
    with tarfile.open(tar_path, "w") as tar:
        for item in sorted(src.iterdir()):
            if item.is_file() and not item.name.endswith(".tmp"):
                tar.add(item, arcname=item.name)
    return tar_path


def problem_row(corpus: Path, problem: dict[str, Any]) -> dict[str, Any]:
    """A manifest entry with its reference and solution texts, read from its split's folders."""
    return {
        **problem,
        "reference": (corpus / "problems" / problem["split"] / problem["file"]).read_text(),
        "solution": (corpus / "solutions" / problem["split"] / problem["file"]).read_text(),
    }


def heldout_rows(corpus: Path) -> list[dict[str, Any]]:
    """The corpus's held-out problems: each manifest entry with its reference and solution texts."""
    manifest = json.loads((corpus / "manifest.json").read_text())
    return [problem_row(corpus, p) for p in manifest["problems"] if p["split"] == "heldout"]


def names_of(solution: str) -> tuple[str, list[str]]:
    """The kernel's name (the `name=` of load_inline) and ModelNew's argument names, read from a template."""
    import ast

    from cudice.verifier.source.pyparse import parse

    tree = parse(solution)
    kernel = ""
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "name" and isinstance(node.value, ast.Constant):
            kernel = str(node.value.value)
        if isinstance(node, ast.FunctionDef) and node.name in ("forward", "__init__"):
            names += [a.arg for a in node.args.args if a.arg != "self"]
    return kernel, names


def first_per_family(rows: list[dict[str, Any]], per_family: int) -> list[int]:
    """Indices of the first `per_family` held-out problems of each family, in order."""
    taken: Counter[str] = Counter()
    chosen = []
    for i, row in enumerate(rows):
        if taken[row["family"]] < per_family:
            taken[row["family"]] += 1
            chosen.append(i)
    return chosen


STOP_GRACE_S = 20.0  # how long a stopped `cudice eval` gets to cancel its work and report
PROGRESS_EVERY_S = 60.0  # how often the verification step says how many verdicts it has


def reached_verdicts(report: Path) -> dict[str, dict[str, Any]]:
    """The verdicts `cudice eval --out REPORT` wrote as they arrived, by problem file name, as rows
    like `--json`'s `per_problem` (`verdict`, `speedup`, `speedup_min`); a record without a result
    (no candidate) is kept with its verdict."""
    rows: dict[str, dict[str, Any]] = {}
    for path in sorted((report / "problems").glob("*.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        result = record.get("result") or {}
        rows[record["problem"]] = {
            "problem": record["problem"],
            "verdict": record["verdict"],
            "speedup": result.get("speedup"),
            "speedup_min": result.get("speedup_min"),
        }
    return rows


def interleaved_names(items: list[dict[str, Any]]) -> list[str]:
    """Each item's file name prefixed with its turn when the kinds take turns (the first e2e, the
    first infill, the first hand, the second e2e, ...): `cudice eval` starts its problems in name
    order, so a run stopped early has verdicts of every kind, not only of the first."""
    turns: dict[str, int] = Counter()
    keyed = []
    for i, item in enumerate(items):
        keyed.append((turns[item["kind"]], i))
        turns[item["kind"]] += 1
    names = [""] * len(items)
    width = max(4, len(str(len(items))))
    for rank, (_, i) in enumerate(sorted(keyed)):
        names[i] = f"{rank:0{width}d}_{items[i]['file']}"
    return names


def verify_items(items: list[dict[str, Any]], work: Path, deadline: float, say: Any) -> dict[str, Any]:
    """Step 7: one `cudice eval` of every item, stopped at `deadline` (the verdicts that came back
    are kept; the rest are listed as not verified, counted neither way).

    An item is {"file", "kind", "family", "style", "reference", "answer"}: its reference and its
    answer are copied side by side under `work` (`cudice eval` pairs them by name; a None answer
    is a missing candidate, which `cudice eval` fails), named in `interleaved_names` order so that
    the verdicts a stopped run reached cover every kind alike. The result has one summary
    per kind ("e2e", "infill", "hand": `all` with a 95 % interval and fast_1, `per_family`) and
    every item's verdict under `rows`.
    """
    from cudice.model.train.corpus.evaluate import eval_process, is_fast_row
    from cudice.model.train.corpus.heldout import wilson

    problems, candidates = work / "verify_problems", work / "verify_candidates"
    for d in (problems, candidates):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    on_disk = interleaved_names(items)
    for item, name in zip(items, on_disk, strict=True):
        (problems / name).write_text(item["reference"])
        if item["answer"] is not None:
            (candidates / name).write_text(item["answer"])
    report = work / "verify_report"
    shutil.rmtree(report, ignore_errors=True)
    proc = eval_process(problems, candidates, 14, out=report)
    stop_at = deadline - STOP_GRACE_S
    finished, stderr = False, ""
    while not finished and time.monotonic() < stop_at:  # progress every PROGRESS_EVERY_S meanwhile
        try:
            _, stderr = proc.communicate(timeout=max(0.1, min(PROGRESS_EVERY_S, stop_at - time.monotonic())))
            finished = True
        except subprocess.TimeoutExpired:
            reached = Counter(r["verdict"] for r in reached_verdicts(report).values())
            say(f"verify: {sum(reached.values())}/{len(items)} verdicts {dict(sorted(reached.items()))}")
    if not finished:
        os.killpg(proc.pid, signal.SIGTERM)  # `cudice eval` stops, cancelling what has not started
        try:
            _, stderr = proc.communicate(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            _, stderr = proc.communicate()
        say("verify: the budget ended before `cudice eval` finished; the verdicts that came are kept")
    if proc.returncode not in (0, 130, -signal.SIGTERM, -signal.SIGKILL):
        say(f"verify: `cudice eval` failed (exit {proc.returncode}); stderr tail: {stderr[-300:]!r}")
    verdicts = reached_verdicts(report)
    rows = []
    for item, name in zip(items, on_disk, strict=True):
        v = verdicts.get(name)
        rows.append(
            {"file": item["file"], "kind": item["kind"], "family": item["family"], "style": item["style"],
             "verdict": v["verdict"] if v else None, "speedup": v.get("speedup") if v else None,
             "fast_1": is_fast_row(v) if v else False}
        )  # fmt: skip
    out: dict[str, Any] = {"problems": len(items), "verified": len(verdicts), "rows": rows}
    for kind in sorted({r["kind"] for r in rows}):
        mine = [r for r in rows if r["kind"] == kind]
        done = [r for r in mine if r["verdict"] is not None]
        section: dict[str, Any] = {"chosen": len(mine), "per_family": {}}
        for key, part in [("all", done)] + [
            (fam, [r for r in done if r["family"] == fam]) for fam in sorted({r["family"] for r in done})
        ]:
            k = sum(r["verdict"] == "correct" for r in part)
            entry = {
                "n": len(part),
                "correct": k,
                "ci95": wilson(k, len(part)),
                "fast_1": sum(r["fast_1"] for r in part),
            }
            if key == "all":
                section["all"] = entry
            else:
                section["per_family"][key] = entry
        out[kind] = section
        counts = Counter(str(r["verdict"]) for r in done)
        say(
            f"verify {kind}: {section['all']['correct']}/{section['all']['n']} correct of {len(mine)} chosen "
            f"(fast_1 {section['all']['fast_1']}); verdicts {dict(sorted(counts.items()))}"
        )
    return out


def infill_tasks(rows: list[dict[str, Any]], chosen: list[int]) -> list[tuple[str, str, str]]:
    """(reference, prefix, suffix) per chosen held-out problem: its template solution's wrapper, the
    CUDA source string emptied (`cudice.model.scaffold.split_scaffold`, the editor's split)."""
    from cudice.model.scaffold import split_scaffold

    tasks = []
    for i in chosen:
        scaffold = split_scaffold(rows[i]["solution"], rows[i]["file"])
        tasks.append((rows[i]["reference"], scaffold.prefix, scaffold.suffix))
    return tasks


def hand_scaffolds(folder: Path, say: Any) -> list[dict[str, Any]]:
    """The hand-written scaffolds of `folder` (bench/infill_scaffolds: scaffolds/NAME.py, the wrapper
    with an empty CUDA source, beside problems/NAME.py, its reference); one without its problem or
    that does not split is said and skipped."""
    from cudice.model.scaffold import ScaffoldError, split_scaffold

    out = []
    for path in sorted((folder / "scaffolds").glob("*.py")):
        problem = folder / "problems" / path.name
        try:
            scaffold = split_scaffold(path.read_text(), str(path))
            reference = problem.read_text()
        except (ScaffoldError, ValueError, SyntaxError, OSError) as exc:
            say(f"hand-written scaffold {path.name} skipped: {exc}")
            continue
        out.append(
            {"name": path.stem, "reference": reference, "prefix": scaffold.prefix, "suffix": scaffold.suffix}
        )
    return out


def external_items(
    folder: Path, checkpoint: str, max_new_tokens: int, clock: Clock, verify_seconds: float,
    results: dict[str, Any], out: Path,
) -> list[dict[str, Any]]:  # fmt: skip
    """Step 6b: one greedy end-to-end answer per `folder/*.py` reference (files from outside the
    corpus, unmodified); how many define a `ModelNew` goes to `results["external"]`, every answer to
    `external_answers.jsonl`; returns the items for step 7 (kind "external", family = file stem)."""
    from cudice.model.train.corpus.heldout import defines_model_new, generate, wilson

    paths = sorted(folder.glob("*.py"))
    if not paths:
        clock.say(f"--problems {folder}: no *.py reference there; nothing answered")
        return []
    references = [p.read_text() for p in paths]
    answers, speed = generate(
        checkpoint, references, max_new_tokens, clock.half_the_rest(verify_seconds), clock.say, batch_size=96
    )
    valid = sum(defines_model_new(a) for a in answers if a is not None)
    results["external"] = {"folder": str(folder), "n": len(paths), "model_new": valid,
                           "ci95": wilson(valid, len(paths)), "speed": speed}  # fmt: skip
    clock.say(f"external ({folder.name}): {valid}/{len(paths)} answers define a ModelNew")
    with (out / "external_answers.jsonl").open("w") as f:
        for path, answer in zip(paths, answers, strict=True):
            f.write(json.dumps({"kind": "external", "file": path.name, "answer": answer}) + "\n")
    return [
        {"file": "ext_" + path.name, "kind": "external", "family": path.stem, "style": "external",
         "reference": reference, "answer": answer}
        for path, reference, answer in zip(paths, references, answers, strict=True)
    ]  # fmt: skip


def scored_rows(rows: list[dict[str, Any]], answers: list[str | None]) -> list[dict[str, Any]]:
    """One `heldout.score` row per held-out problem (`heldout_rows`) and its answer, the answer kept."""
    from cudice.model.train.corpus.heldout import score

    scored = []
    for r, answer in zip(rows, answers, strict=True):
        kernel, names = names_of(r["solution"])
        scored.append(
            {
                "file": r["file"],
                "family": r["family"],
                "style": r.get("style", "cudice"),
                "composition": r["composition"],
                "answer": answer,
                **score(answer, r["solution"], kernel, names),
            }
        )
    return scored


def evaluate(
    label: str, checkpoint: str, rows: list[dict[str, Any]], deadline: float, clock: Clock, gen_tokens: int
) -> dict[str, Any]:
    from cudice.model.train.corpus.heldout import generate, summarise

    start = time.monotonic()
    answers, speed = generate(
        checkpoint, [r["reference"] for r in rows], gen_tokens, deadline, clock.say, batch_size=96
    )
    scored = scored_rows(rows, answers)
    summary = summarise(scored)
    a = summary["all"]
    clock.say(
        f"{label}: parses {a['parses']['k']}/{a['n']} {a['parses']['ci95']}, "
        f"exact {a['exact']['k']}/{a['n']}, "
        f"same kernel {a['same_kernel']['k']}/{a['n']}; {speed['tokens']} tokens in {speed['seconds']:.1f} s "
        f"({time.monotonic() - start:.0f} s with loading)"
    )
    return {"label": label, "checkpoint": checkpoint, "summary": summary, "speed": speed, "rows": scored}


@click.command()
@click.option("--work", type=click.Path(file_okay=False, path_type=Path), required=True)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True)
@click.option("--minutes", type=float, default=9.0, show_default=True, help="Wall-clock budget of the call.")
@click.option("--eval-seconds", type=float, default=150.0, show_default=True, help="Kept for scoring.")
@click.option("--corpus-tar", type=click.Path(dir_okay=False, path_type=Path), required=True)
@click.option("--tokenizer", type=click.Path(file_okay=False, path_type=Path), required=True)
@click.option("--old", type=click.Path(file_okay=False, path_type=Path), default=Path("model/assets/demo"))
@click.option(
    "--start",
    type=click.Path(exists=True, path_type=Path),
    default=None,
    help="Resume from this checkpoint: a returned demo_fit.tar.part00, or a checkpoint folder.",
)
@click.option("--lr", type=float, default=1.5e-3, show_default=True)
@click.option(
    "--focus-weight", type=float, default=1.0, show_default=True,
    help="Loss weight of the answer tokens on the lines that compute the value (fit.FitConfig.focus_weight).",
)  # fmt: skip
@click.option(
    "--compile-layers", is_flag=True,
    help="On a GPU, compile the decoder layers for the steps (fit.FitConfig.compile_layers).",
)  # fmt: skip
@click.option("--verify-per-family", type=int, default=3, show_default=True)
@click.option("--skip-old", is_flag=True, help="Do not score the shipped checkpoint (its figures are known).")
@click.option(
    "--eval-per-family", type=int, default=0, show_default=True,
    help="Verify the new model's answers to this many held-out problems per family with `cudice eval`.",
)  # fmt: skip
@click.option("--eval-verify-seconds", type=float, default=240.0, show_default=True, help="Kept for step 7.")
@click.option(
    "--infill-per-family", type=int, default=0, show_default=True,
    help="Also infill the wrappers of this many held-out templates per family, and the scaffolds of "
    "--scaffolds; verified with the end-to-end answers when --eval-per-family is set.",
)  # fmt: skip
@click.option(
    "--scaffolds", type=click.Path(file_okay=False, path_type=Path), default=Path("bench/infill_scaffolds"),
    show_default=True,
    help="Hand-written scaffolds (scaffolds/NAME.py beside problems/NAME.py); skipped when absent.",
)  # fmt: skip
@click.option(
    "--problems", "external", type=click.Path(file_okay=False, path_type=Path), default=None,
    help="A folder of reference files from outside the corpus (KernelBench level-1 files of the model's "
    "families, unmodified, or a hidden set): each answered end to end; verified with the others when "
    "--eval-per-family is set (kind 'external').",
)  # fmt: skip
@click.option(
    "--dims", default="", metavar="KEY=INT,...",
    help="A new model's shape, changed from the demo's (init_model.DEMO_DIMS), e.g. "
    "hidden_size=448,num_hidden_layers=12; refused with --start (the checkpoint has its shape) and "
    "when its bf16 weights would not fit the package.",
)  # fmt: skip
@click.option("--no-train", is_flag=True, help="Only score (and verify) the --start checkpoint.")
@click.option("--smoke", is_flag=True, help="Toy model, seconds of training (CPU test of the driver).")
def main(
    work: Path,
    out: Path,
    minutes: float,
    eval_seconds: float,
    corpus_tar: Path,
    tokenizer: Path,
    old: Path,
    start: Path | None,
    lr: float,
    focus_weight: float,
    compile_layers: bool,
    verify_per_family: int,
    skip_old: bool,
    eval_per_family: int,
    eval_verify_seconds: float,
    infill_per_family: int,
    scaffolds: Path,
    external: Path | None,
    dims: str,
    no_train: bool,
    smoke: bool,
) -> None:
    from cudice.model.train.corpus.fit import FitConfig, fit
    from cudice.model.train.corpus.heldout import generate_infill, summarise
    from cudice.model.train.corpus.init_model import DEMO_DIMS, SMOKE_DIMS, init_checkpoint, shape_overrides

    if dims and start is not None:
        raise click.UsageError(f"--dims {dims} with --start {start}: a checkpoint keeps its own shape.")
    try:
        shape = shape_overrides(dims, SMOKE_DIMS if smoke else DEMO_DIMS)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--dims") from None
    if start is not None and start.resolve().is_relative_to(work.resolve()):
        raise click.UsageError(
            f"--start {start} lies inside --work {work}, which this run clears first: copy the checkpoint "
            "elsewhere, or give another --work."
        )
    clock = Clock(out, minutes)
    # 1. corpus and initial checkpoint
    corpus = work / "corpus"
    shutil.rmtree(work, ignore_errors=True)
    corpus.mkdir(parents=True)
    with tarfile.open(corpus_tar) as tar:
        tar.extractall(corpus, filter="data")
    init = work / "init"
    if start is not None and start.is_dir():
        shutil.copytree(start, init)
        clock.say(f"resuming from the checkpoint folder {start}")
    elif start is not None:
        init.mkdir(parents=True)
        with tarfile.open(join_parts(start, work / "start.tar")) as tar:
            tar.extractall(init, filter="data")
        clock.say(f"resuming from {start}")
    else:
        info = init_checkpoint(init, corpus / "sft.jsonl", shape, tokenizer_dir=tokenizer)
        clock.say(f"init: {json.dumps(info)}")
    # 2. template verification in the background (CPU compiles, short GPU runs)
    checker = subprocess.Popen(
        [sys.executable, "-m", "cudice.model.train.corpus", "verify-templates", str(corpus), "--out",
         str(out / "templates.json"), "--per-family", str(verify_per_family)],
        stdout=subprocess.DEVNULL, stderr=clock.log.open("a"), start_new_session=True,
    ) if verify_per_family > 0 else None  # fmt: skip
    # 3. SFT until the training budget
    verify_seconds = eval_verify_seconds if eval_per_family > 0 else 0.0
    fitted = work / "fit"
    if no_train:  # score (and verify) the --start checkpoint as it is
        if start is None:
            raise click.UsageError("--no-train scores the --start checkpoint: give --start")
        init.rename(fitted)
        trained: dict[str, Any] = {"steps": 0, "epochs": 0, "scored": str(start)}
    else:
        train_seconds = clock.deadline - time.monotonic() - eval_seconds - verify_seconds - 30
        clock.say(f"training for {train_seconds:.0f} s")
        config = FitConfig(
            seconds=max(5.0, train_seconds), learning_rate=lr, tokens_per_batch=49152 if not smoke else 8192,
            focus_weight=focus_weight, compile_layers=compile_layers,
        )  # fmt: skip
        trained = fit(init, corpus / "sft.jsonl", fitted, config, clock.say)
        clock.say(f"trained: {trained['steps']} steps, {trained['epochs']} epochs started")
        # 4. the checkpoint, in parts
        parts = split_file(_tar_dir(fitted, out / "demo_fit.tar"))
        clock.say(f"saved {[p.name for p in parts]}")
    # 5. held-out scoring, new then old
    rows = heldout_rows(corpus)
    if smoke:
        rows = rows[:4]
    results: dict[str, Any] = {"training": trained, "num_heldout": len(rows)}
    eval_left = clock.deadline - time.monotonic() - 10
    tokens = (16, 16) if smoke else (NEW_TOKENS, OLD_TOKENS)
    if checker is not None and checker.poll() is None and eval_per_family > 0:
        checker.terminate()  # its compiles would share the cores with step 7's
        clock.say("template verification stopped before verifying the model's answers")
    new_share = 1.0 if skip_old else 0.4
    results["new"] = evaluate(
        "new", str(work / "fit"), rows, time.monotonic() + new_share * (eval_left - verify_seconds), clock,
        tokens[0],
    )  # fmt: skip
    items: list[dict[str, Any]] = []
    if eval_per_family > 0:
        for i in first_per_family(rows, eval_per_family):
            row = rows[i]
            items.append(
                {"file": row["file"], "kind": "e2e", "family": row["family"],
                 "style": row.get("style", "cudice"), "reference": row["reference"],
                 "answer": results["new"]["rows"][i]["answer"]}
            )  # fmt: skip
    if infill_per_family > 0:
        chosen = first_per_family(rows, infill_per_family)
        tasks = infill_tasks(rows, chosen)
        hand = hand_scaffolds(scaffolds, clock.say) if scaffolds.is_dir() else []
        tasks += [(h["reference"], h["prefix"], h["suffix"]) for h in hand]
        infilled, speed = generate_infill(
            str(work / "fit"), tasks, tokens[0], clock.half_the_rest(verify_seconds), clock.say, batch_size=96
        )
        scored = scored_rows([rows[i] for i in chosen], infilled[: len(chosen)])
        summary = summarise(scored)
        results["infill"] = {"summary": summary, "speed": speed, "hand": len(hand)}
        a = summary["all"]
        clock.say(
            f"infill: parses {a['parses']['k']}/{a['n']}, same compute {a['same_compute']['k']}/{a['n']}"
        )
        for i, answer in zip(chosen, infilled, strict=False):
            row = rows[i]
            items.append(
                {"file": "infill_" + row["file"], "kind": "infill", "family": row["family"],
                 "style": row.get("style", "cudice"), "reference": row["reference"], "answer": answer}
            )  # fmt: skip
        with (out / "infill_answers.jsonl").open("w") as f:
            for r in scored:
                f.write(json.dumps({"kind": "infill", **r}) + "\n")
            for h, answer in zip(hand, infilled[len(chosen) :], strict=True):
                f.write(json.dumps({"kind": "hand", "file": h["name"] + ".py", "answer": answer}) + "\n")
                items.append(
                    {"file": "hand_" + h["name"] + ".py", "kind": "hand", "family": h["name"],
                     "style": "hand", "reference": h["reference"], "answer": answer}
                )  # fmt: skip
    if external is not None:
        items += external_items(external, str(work / "fit"), tokens[0], clock, verify_seconds, results, out)
    if items and eval_per_family > 0:
        verified = verify_items(items, work, clock.deadline - 10, clock.say)
        results["verified"] = {k: v for k, v in verified.items() if k != "rows"}
        (out / "verified.json").write_text(json.dumps(verified, indent=1) + "\n")
    if not skip_old:
        results["old"] = evaluate("old", str(old), rows, clock.deadline - 10, clock, tokens[1])
    if checker is not None and checker.poll() is None:
        checker.terminate()
        clock.say("template verification did not finish in the budget")
    answers = out / "answers.jsonl"
    with answers.open("w") as f:
        for label in [k for k in ("new", "old") if k in results]:
            for r in results[label].pop("rows"):
                f.write(json.dumps({"model": label, **r}) + "\n")
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    clock.say("done")


if __name__ == "__main__":
    main()
