"""`cudice generate` and `cudice model ...` (registered lazily in `cudice.server.cli.SUBCOMMANDS`).

Without --model / CUDICE_MODEL both `generate` and `model info` use the bundled demo model
(`cudice.model.bundled`); `generate` says so on stderr. Errors (missing model, bad checkpoint,
bad sampler options, a file without a CUDA string to fill) end with a one-paragraph message
and exit code 1, never a traceback.
`generate --samples N` (N > 1) decodes N answers in one batch, verifies each distinct one and
prints the best (`cudice.model.best_of`; the ranking and orchestration live there, this module
only reports). Not covered: batch generation of several files from the command line.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from cudice.model.config import STRATEGY_NAMES, SamplerConfig

if TYPE_CHECKING:
    from cudice.model.best_of import BestOf, Sample


def _sampler_config(options: dict[str, Any]) -> SamplerConfig:
    stop = tuple(options.pop("stop") or ())
    values = {k: v for k, v in options.items() if v is not None}
    try:
        return SamplerConfig(stop_strings=stop, **values)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc


def _reference_source(file: Path, reference: str | None) -> str:
    from cudice.verifier.source.document import read_document
    from cudice.verifier.source.reference import resolve_reference

    doc = read_document(file, reference=reference, require_candidate=False)
    resolved = resolve_reference(doc)
    if resolved.document is None:
        why = "; ".join(d.message for d in resolved.diagnostics) or "no reference found"
        raise click.ClickException(
            f"{file}: cannot find the PyTorch reference ({why}). Pass --reference REF.py, "
            "or add a `# cudice: reference=REF.py` comment to the file"
        )
    return resolved.document.text


def reference_path_of(file: Path, reference: str | None) -> Path:
    """The reference file a generated candidate is for, as an absolute path (the candidate goes to
    stdout: where it will be saved, and so a path relative to it, is unknown)."""
    from cudice.verifier.source.document import read_document
    from cudice.verifier.source.reference import reference_path

    if reference is not None:
        return Path(reference).resolve()
    found = reference_path(read_document(file, require_candidate=False))
    return Path(found).resolve() if found is not None else file.resolve()


def with_reference_comment(text: str, reference: Path) -> str:
    """`text` with a `# cudice: reference=PATH` first line, unless it names a reference already, so
    `cudice verify` finds the reference without --reference."""
    from cudice.verifier.source.document import parse_document

    if parse_document(text, "generated.py", require_candidate=False).reference.origin != "none":
        return text
    return f"# cudice: reference={reference}\n{text}"


@click.command("generate")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--model",
    "model_path",
    envvar="CUDICE_MODEL",
    default=None,
    help="DICE/SDAR checkpoint directory or a locally cached hub id (env CUDICE_MODEL).",
)
@click.option(
    "--mode",
    type=click.Choice(["e2e", "infill"]),
    default="e2e",
    show_default=True,
    help="e2e: write a whole ModelNew for the reference FILE; infill: fill FILE's CUDA source string.",
)
@click.option(
    "--reference", default=None, help="Reference file (default: FILE's Model or its reference comment)."
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object instead of the candidate text.")
@click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda or cuda:N.")
@click.option("--dtype", default="auto", show_default=True, help="auto, bfloat16, float16 or float32.")
@click.option(
    "--fast/--no-fast",
    default=None,
    help="Static KV cache, compiled layers, CUDA graphs (same output; default: on with a GPU).",
)
@click.option(
    "--block-length", "block_length", type=int, default=None, help="Default: the checkpoint's block_size."
)
@click.option("--steps", "denoising_steps", type=int, default=None, help="Denoising steps per block [4].")
@click.option(
    "--strategy", type=click.Choice(STRATEGY_NAMES), default=None, help="Reveal strategy [dynamic]."
)
@click.option("--threshold", type=float, default=None, help="Dynamic strategy confidence threshold [0.9].")
@click.option("--temperature", type=float, default=None, help="0 is greedy [0].")
@click.option("--top-k", "top_k", type=int, default=None, help="0 disables [0].")
@click.option("--top-p", "top_p", type=float, default=None, help="1 disables [1].")
@click.option("--max-new-tokens", "max_new_tokens", type=int, default=None, help="[2048]")
@click.option("--seed", type=int, default=None, help="Seed for sampling (temperature > 0).")
@click.option("--stop", multiple=True, help="Stop string (repeatable).")
@click.option(
    "--prompt-style",
    "prompt_style",
    type=click.Choice(("cudice", "dice")),
    default=None,
    help="The prompts' wording. Default: the checkpoint's (cudice for cudice's models, dice for other "
    "DICE/SDAR checkpoints when templates are there).",
)
@click.option(
    "--prompt-templates",
    "prompt_templates",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    envvar="CUDICE_PROMPT_TEMPLATES",
    help="Folder with the dice style's e2e.txt / infill.txt (see `cudice train rl --help`).",
)
@click.option(
    "--samples",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Decode N answers in one batch (the first greedy, the others sampled at --temperature, "
    "default 0.5), verify each distinct one (compile-only without a GPU) and print the best. The batch "
    "decodes eagerly (--fast does not apply).",
)
def generate_command(
    file: Path,
    model_path: str | None,
    mode: str,
    reference: str | None,
    as_json: bool,
    device: str,
    dtype: str,
    fast: bool | None,
    prompt_style: str | None,
    prompt_templates: Path | None,
    samples: int,
    **sampler_options: Any,
) -> None:
    """Generate a ModelNew for a KernelBench reference FILE, or infill a candidate's CUDA source."""
    from cudice.model.bundled import DEMO_MAX_NEW_TOKENS, resolve_model_path

    model_path, bundled = resolve_model_path(model_path)
    if bundled and sampler_options.get("max_new_tokens") is None:
        sampler_options["max_new_tokens"] = DEMO_MAX_NEW_TOKENS
    config = _sampler_config(sampler_options)
    if not model_path:
        raise click.ClickException(
            "no model: pass --model PATH (a DICE/SDAR checkpoint directory, e.g. DICE-1.7B downloaded "
            "elsewhere with `huggingface-cli download DeadlyKitt3n/DICE-1.7B --local-dir DIR`) or set "
            "CUDICE_MODEL. The bundled demo model is missing or disabled (CUDICE_NO_BUNDLED_MODEL). "
            "To try the workflow offline: `cudice model make-tiny /tmp/tiny --sdar-layout` and "
            "--model /tmp/tiny (random weights: the output is gibberish)"
        )
    if bundled:
        click.echo(
            "using the bundled demo model (only the families of cudice's corpus; `cudice model info` says "
            "what it can do; --model DIR for a DICE checkpoint)",
            err=True,
        )
    import os

    from cudice.model.threads import apply_torch_threads, cpu_thread_env
    from cudice.server.cli_progress import ProgressLine

    os.environ.update(cpu_thread_env())  # before torch loads: one CPU thread per physical core, passive waits
    from cudice.model.engine import GenerationError, load_engine
    from cudice.model.loader import ModelLoadError
    from cudice.model.prompt_styles import PromptTemplateError
    from cudice.model.scaffold import ScaffoldError, split_scaffold

    found: BestOf | None = None  # with --samples N > 1
    try:
        source = file.read_text()
        reference_source = _reference_source(file, reference)
        scaffold = split_scaffold(source, str(file)) if mode == "infill" else None
        with ProgressLine(f"loading {model_path}") as line:
            engine = load_engine(
                model_path,
                device=device,
                dtype=dtype,
                fast=fast if samples == 1 else False,  # the batch of samples decodes eagerly (best_of.py)
                freeze=True,
                prompt_style=prompt_style,
                prompt_templates=str(prompt_templates) if prompt_templates is not None else None,
            )
            if engine.style_warning:
                click.echo(f"warning: {engine.style_warning}", err=True)
            apply_torch_threads()
            line.update("generating")

            def on_progress(p: Any) -> None:
                num, secs = getattr(p, "num_tokens", 0), getattr(p, "seconds", 0.0)
                line.update(f"generating: {num} tokens · {num / secs if secs else 0.0:.1f} tok/s")

            if samples > 1:
                found = _best_of(
                    engine, file, reference, reference_source, scaffold, config, samples, line, on_progress
                )
            elif scaffold is not None:
                gen = engine.infill(
                    scaffold.prefix, scaffold.suffix, reference_source, config, on_progress=on_progress
                )
            else:
                gen = engine.generate_kernel(reference_source, config, on_progress=on_progress)
    except (
        ModelLoadError,
        ScaffoldError,
        GenerationError,
        PromptTemplateError,
        OSError,
        UnicodeDecodeError,
    ) as exc:
        raise click.ClickException(str(exc)) from exc
    if found is not None:
        _print_best_of(found, as_json, None if scaffold is not None else reference_path_of(file, reference))
        return
    if as_json:
        click.echo(json.dumps(dataclasses.asdict(gen), indent=2))
    elif scaffold is not None:
        click.echo(gen.text, nl=not gen.text.endswith("\n"))
    else:
        text = with_reference_comment(gen.text, reference_path_of(file, reference))
        click.echo(text, nl=not text.endswith("\n"))
    tps = gen.num_tokens / gen.seconds if gen.seconds > 0 else 0.0
    click.echo(
        f"{gen.num_tokens} tokens, {gen.num_forwards} forwards "
        f"({gen.tokens_per_forward:.2f} tokens/forward), "
        f"{gen.seconds:.1f} s ({tps:.1f} tok/s), finished by {gen.finish_reason}",
        err=True,
    )


def _best_of(
    engine: Any,
    file: Path,
    reference: str | None,
    reference_source: str,
    scaffold: Any,
    config: SamplerConfig,
    samples: int,
    line: Any,
    on_progress: Any,
) -> BestOf:
    """`best_of.best_of` for the CLI: the e2e answer gets the reference comment and is verified as
    `<stem>_cuda.py` beside FILE against the reference `cudice verify -r` would be given; an infilled
    file is verified as FILE itself (its own reference or comment, or --reference)."""
    from cudice.model.best_of import best_of

    verify_ref: Path | None
    if scaffold is None:
        ref = reference_path_of(file, reference)
        path, verify_ref = file.with_name(f"{file.stem}_cuda.py"), ref
        parts = None

        def finish(text: str) -> str:
            return with_reference_comment(text, ref)
    else:
        path, verify_ref = file, Path(reference) if reference is not None else None
        parts = (scaffold.prefix, scaffold.suffix)

        def finish(text: str) -> str:
            return text

    done = [0]

    def on_generated() -> None:
        line.update(f"verifying {samples} samples")

    def on_sample(sample: Sample) -> None:  # the lines themselves are printed after the progress line
        done[0] += 1
        line.update(f"verifying: {done[0]} of {samples} samples done")

    return best_of(
        engine,
        reference_source,
        config,
        samples,
        path=path,
        reference=verify_ref,
        scaffold=parts,
        finish=finish,
        on_progress=on_progress,
        on_generated=on_generated,
        on_sample=on_sample,
    )


def _sample_line(sample: Sample) -> str:
    """One stderr line per sample: its verdict, speedup or first error."""
    how = "greedy" if sample.temperature == 0 else f"T={sample.temperature:g}"
    head = f"sample {sample.index} ({how}): "
    if sample.duplicate_of is not None:
        return head + f"same text as sample {sample.duplicate_of} ({sample.verdict})"
    text = head + sample.verdict
    if sample.speedup is not None:
        text += f", {sample.speedup:.2f}x"
    elif sample.error:
        text += ": " + sample.error.strip().splitlines()[0][:160]
    return text


def _print_best_of(found: BestOf, as_json: bool, reference: Path | None) -> None:
    """The chosen sample as `--samples 1` prints an answer (JSON: plus `samples` and `chosen`), then
    one stderr line per sample and the choice. `reference`: the comment an e2e answer gets."""
    best = found.best
    gen = best.generation
    if as_json:
        data = dataclasses.asdict(gen)
        data["samples"] = [s.to_dict() for s in found.samples]
        data["chosen"] = found.chosen
        click.echo(json.dumps(data, indent=2))
    else:
        text = gen.text if reference is None else with_reference_comment(gen.text, reference)
        click.echo(text, nl=not text.endswith("\n"))
    for sample in found.samples:
        click.echo(_sample_line(sample), err=True)
    tokens = sum(s.generation.num_tokens for s in found.samples)
    tps = tokens / found.seconds if found.seconds > 0 else 0.0
    click.echo(
        f"{len(found.samples)} samples in one batch: {tokens} tokens, {found.num_forwards} forwards, "
        f"{found.seconds:.1f} s ({tps:.1f} tok/s)",
        err=True,
    )
    if found.passed:
        click.echo(f"chose sample {found.chosen} ({best.verdict})", err=True)
    else:
        why = (best.error or "no error message").strip().splitlines()[0][:300]
        click.echo(
            f"none of the {len(found.samples)} samples passed (none is correct or compiled); printing "
            f"the best-ranked, sample {found.chosen} ({best.verdict}): {why}",
            err=True,
        )


@click.group("model")
def model_group() -> None:
    """Model utilities: tiny offline checkpoints, checkpoint info."""


@model_group.command("make-tiny")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--sdar-layout", is_flag=True, help="Write config.json as a DICE/SDAR checkpoint (model_type sdar)."
)
@click.option("--seed", type=int, default=0, show_default=True)
def make_tiny_command(directory: Path, sdar_layout: bool, seed: int) -> None:
    """Write a tiny random Qwen3 checkpoint and an offline tokenizer to DIRECTORY."""
    from cudice.model.tiny import make_tiny

    if directory.exists() and any(directory.iterdir()):
        raise click.ClickException(f"{directory} exists and is not empty; pick a new or empty directory")
    out = make_tiny(directory, sdar_layout=sdar_layout, seed=seed)
    size = sum(f.stat().st_size for f in out.iterdir())
    click.echo(
        f"wrote {'SDAR' if sdar_layout else 'Qwen3'}-layout tiny checkpoint to {out} ({size / 1e6:.2f} MB)"
    )


def _parameter_count(folder: Path) -> int | None:
    """Parameters in the folder's safetensors files, from their headers (no torch, no weights read)."""
    import struct

    total, files = 0, sorted(folder.glob("*.safetensors"))
    if not files:
        return None
    for f in files:
        try:
            with f.open("rb") as fh:
                (size,) = struct.unpack("<Q", fh.read(8))
                header = json.loads(fh.read(size))
        except (OSError, ValueError, struct.error):
            return None
        for name, entry in header.items():
            if name != "__metadata__":
                num = 1
                for dim in entry.get("shape", []):
                    num *= int(dim)
                total += num
    return total


def checkpoint_summary(folder: Path) -> dict[str, Any]:
    """What `cudice model info` prints by default, read from config.json, the safetensors headers
    and the demo card alone: no torch import, no weights loaded (milliseconds, not seconds)."""
    from cudice.model.bundled import CARD, demo_card, is_bundled

    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise click.ClickException(
            f"{folder}: no readable config.json ({exc}); pass a DICE/SDAR checkpoint directory"
        ) from exc
    info: dict[str, Any] = {
        "path": str(folder),
        "model_type": config.get("model_type"),
        "block_size": config.get("block_size"),
        "mask_token_id": config.get("mask_token_id"),
        "num_hidden_layers": config.get("num_hidden_layers"),
        "hidden_size": config.get("hidden_size"),
        "vocab_size": config.get("vocab_size"),
        "torch_dtype": config.get("torch_dtype"),
        "num_parameters": _parameter_count(folder),
        "weights_bytes": sum(f.stat().st_size for f in folder.glob("*.safetensors")),
    }
    if is_bundled(str(folder)) or (folder / CARD).is_file():
        info["bundled"] = is_bundled(str(folder))
        info["card"] = demo_card(folder)
    return info


def _summary_text(info: dict[str, Any]) -> str:
    num = info.get("num_parameters")
    size = info.get("weights_bytes") or 0
    lines = [
        f"checkpoint: {info['path']}" + (" (cudice's bundled demo model)" if info.get("bundled") else ""),
        f"type: {info.get('model_type')}, block size {info.get('block_size')}, "
        f"mask token id {info.get('mask_token_id')}",
        f"size: {num / 1e6:.1f}M parameters, {size / 2**20:.1f} MiB of weights"
        if num
        else f"size: {size / 2**20:.1f} MiB of weights",
        f"layers: {info.get('num_hidden_layers')}, hidden size {info.get('hidden_size')}, "
        f"vocabulary {info.get('vocab_size')}, stored as {info.get('torch_dtype')}",
    ]
    card = info.get("card")
    if isinstance(card, dict):
        if card.get("what"):
            lines.append(f"what: {card['what']}")
        checked = card.get("templates_verified")
        if isinstance(checked, dict) and checked.get("num"):
            ok = "all correct" if checked.get("all_correct") else "not all correct"
            lines.append(f"checked: its {checked['num']} corpus templates verified ({ok})")
        if card.get("limitations"):
            lines.append(f"limits: {card['limitations']}")
    lines.append("(--json: everything as JSON, read from the loaded model)")
    return "\n".join(lines)


@model_group.command("info")
@click.argument("path", required=False)
@click.option(
    "--json", "as_json", is_flag=True, help="Load the model and print what cudice read from it as JSON."
)
@click.option("--device", default="auto", show_default=True, help="With --json: where to load it.")
@click.option("--dtype", default="auto", show_default=True, help="With --json: the dtype to load it in.")
def info_command(path: str | None, as_json: bool, device: str, dtype: str) -> None:
    """Say what a checkpoint is (default: the bundled demo model): readable text from its files, or
    with --json the loaded model's description."""
    from cudice.model.bundled import CARD, demo_card, is_bundled, resolve_model_path

    resolved, _ = resolve_model_path(path)
    if resolved is None:
        raise click.ClickException(
            "no PATH given and no bundled demo model (missing, or CUDICE_NO_BUNDLED_MODEL "
            "is set): pass a checkpoint directory"
        )
    if not as_json and Path(resolved).is_dir():
        click.echo(_summary_text(checkpoint_summary(Path(resolved))))
        return
    from cudice.model.engine import engine_info, load_engine
    from cudice.model.loader import ModelLoadError

    try:
        engine = load_engine(resolved, device=device, dtype=dtype, freeze=True)
    except ModelLoadError as exc:
        raise click.ClickException(str(exc)) from exc
    info = engine_info(engine)
    if is_bundled(resolved) or (Path(resolved) / CARD).is_file():
        info["bundled"] = is_bundled(resolved)
        info["card"] = demo_card(resolved)
    json.dump(info, sys.stdout, indent=2)
    click.echo()
