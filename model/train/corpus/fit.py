"""Time-budgeted SFT of the demo model on one GPU: bf16 autocast, length-bucketed batches, and a
learning-rate schedule over wall-clock time (linear warm-up, then cosine to `min_lr_ratio`).

`fit(init_dir, sft_path, out_dir, seconds, say)` trains the block-diffusion SFT objective
(`objective.sft_loss`, the loss `cudice train sft` uses) until `seconds` have passed since the
call and saves the checkpoint (`checkpoint.save_checkpoint`; weights stored in the init's dtype).
The budget includes loading and encoding (270k pairs took 108 s on the H100 box, whole texts): the
steps get what is left of it (`train_seconds`). A schedule over time, not steps, decays the
learning rate to its floor exactly when the budget ends, so a fixed GPU allotment is never cut
off at a high learning rate; the price is that two runs of the same budget take slightly
different numbers of steps.

Batches hold samples of similar length (sorted, cut into groups of about `tokens_per_batch`
tokens, the groups shuffled each epoch), so little compute goes to padding; the prompt is never
masked nor trained, as in `sft.Collate`. Encoding runs through the fast tokenizer's batch call,
each distinct line once where the tokenizer cuts at newlines first (the demo's; on a 2-core VM,
25,000 of the 10x corpus's texts in 2.0 s against 11.9 s whole, and its 270k pairs in 48 s).

The doubled sequence's noisy half starts at the batch's first answer block
(`objective.sft_loss`'s `answer_start`): the prompt's noisy copy is never masked nor scored, and
dropping it leaves the loss as it is; on the 10x corpus's length-bucketed batches that is 18 %
fewer tokens and 31 % less attention work per step (counted on 30,000 pairs, not timed).

Not covered: several GPUs (use `cudice train sft` under `accelerate launch`), resuming the
optimizer state (a carried checkpoint restarts with a fresh AdamW), sequence packing.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch


@dataclass(frozen=True, slots=True)
class FitConfig:
    seconds: float
    learning_rate: float = 1.5e-3
    min_lr_ratio: float = 0.05
    warmup_seconds: float = 15.0
    tokens_per_batch: int = 16384
    max_length: int = 4096
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    seed: int = 0
    log_every: int = 20
    # the loss weight of the answer tokens on lines that compute the value (`focus_spans`): a
    # template answer is ~500 tokens of which a handful say which op it is, and a 20M model trained
    # 7 minutes (1.0) wrote `x + y` for `torch.maximum` on problems it had trained on
    focus_weight: float = 1.0
    # on a GPU, compile the decoder layers (`objective.compile_replay_layers`, one dynamic-shape
    # graph for every layer and batch length; at 1.7B it made a forward + backward 0.61x, for a
    # one-time ~26 s); a graph that fails to compile runs eager (dynamo's suppress_errors)
    compile_layers: bool = False

    def __post_init__(self) -> None:
        if self.seconds <= 0:
            raise ValueError(f"seconds={self.seconds} must be > 0: it is the training budget")
        if self.focus_weight < 1.0:
            raise ValueError(f"focus_weight={self.focus_weight} must be >= 1 (1 weighs every token alike)")
        if not 0 < self.min_lr_ratio <= 1:
            raise ValueError(f"min_lr_ratio={self.min_lr_ratio} must be in (0, 1]")
        if self.tokens_per_batch < self.max_length:
            raise ValueError(
                f"tokens_per_batch={self.tokens_per_batch} must be >= max_length={self.max_length} "
                "(one longest sample per batch)"
            )


def train_seconds(config: FitConfig, spent: float) -> FitConfig:
    """`config` with the seconds left for steps once `spent` (loading, encoding) is taken from its
    budget; a ValueError where nothing useful is left, so the caller's later steps keep their time."""
    left = config.seconds - spent
    if left < max(1.0, 0.1 * config.seconds):
        raise ValueError(
            f"loading and encoding took {spent:.0f} s of the {config.seconds:.0f} s training budget: "
            "give fit more seconds or a smaller corpus"
        )
    return replace(config, seconds=left, warmup_seconds=min(config.warmup_seconds, 0.5 * left))


def lr_factor(elapsed: float, config: FitConfig) -> float:
    """The learning rate's multiplier `elapsed` seconds in: linear warm-up, then cosine to the floor."""
    if elapsed < config.warmup_seconds:
        return max(0.01, elapsed / config.warmup_seconds)
    span = max(1e-9, config.seconds - config.warmup_seconds)
    progress = min(1.0, (elapsed - config.warmup_seconds) / span)
    floor = config.min_lr_ratio
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))


def focus_spans(response: str) -> list[tuple[int, int]]:
    """Character spans of `response`'s lines (cut at "\\n") that compute the value register
    (`heldout.compute_lines`: the lines in which two compositions' answers differ), each with the
    comment line right above it when there is one (an op note of `build --op-comments`, which names
    the op the next line computes); [] for an answer without one."""
    from cudice.model.train.corpus.heldout import compute_lines

    spans: list[tuple[int, int]] = []
    at, above = 0, None  # above: the span of the previous line when it is a `//` comment
    for line in response.split("\n"):
        if compute_lines(line):
            if above is not None:
                spans.append(above)
            spans.append((at, at + len(line)))
        above = (at, at + len(line)) if line.lstrip().startswith("//") else None
        at += len(line) + 1
    return spans


Sample = tuple[list[int], int, tuple[int, ...]]  # ids, prompt length, focus positions (absolute)
Encoded = tuple[list[int], list[int]]  # a text's ids, the indices of its tokens on focus lines


def encode_all(
    tokenizer: Any, records: list[dict[str, str]], block_size: int, pad: int, focus: bool = False
) -> list[Sample]:
    """(ids padded to a multiple of `block_size`, prompt length, the positions of answer tokens that
    overlap a `focus_spans` line — only with `focus`, else ()) per record, as `sft.encode_pair`.
    A tokenizer whose pre-tokenizer first cuts before every newline (the demo's) encodes each
    distinct line once (`encode_by_lines`; the same ids); any other, the texts whole."""
    from cudice.model.prompts import chat_prompt

    encode = encode_by_lines if cuts_at_newlines(tokenizer) else encode_whole
    prompts = encode(tokenizer, [chat_prompt(r["prompt"]) for r in records], False)
    answers = encode(tokenizer, [r["response"] + "<|im_end|>" for r in records], focus)
    out: list[Sample] = []
    for (p, _), (a, marks) in zip(prompts, answers, strict=True):
        ids = p + a
        padded = -(-len(ids) // block_size) * block_size
        out.append((ids + [pad] * (padded - len(ids)), len(p), tuple(len(p) + j for j in marks)))
    return out


def encode_whole(tokenizer: Any, texts: list[str], focus: bool) -> list[Encoded]:
    """Each text through the tokenizer's batch call; with `focus`, the tokens overlapping a
    `focus_spans` line by their character offsets."""
    enc = tokenizer(texts, add_special_tokens=False, return_offsets_mapping=focus)
    out: list[Encoded] = []
    for k, ids in enumerate(enc["input_ids"]):
        marks: list[int] = []
        if focus:
            spans = focus_spans(texts[k])
            marks = [
                j
                for j, (lo, hi) in enumerate(enc["offset_mapping"][k])
                if hi > lo and any(lo < b and hi > a for a, b in spans)
            ]
        out.append((list(ids), marks))
    return out


def cuts_at_newlines(tokenizer: Any) -> bool:
    """Whether the fast tokenizer, before anything else, cuts a text before every newline (a `Split`
    on "\\n", merged with the next piece) and normalises nothing: then a text's ids are its
    pieces' ids one after the other, and a piece's ids do not depend on its neighbours."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return False
    spec = json.loads(backend.to_str())
    pre = spec.get("pre_tokenizer") or {}
    first = pre["pretokenizers"][0] if pre.get("type") == "Sequence" and pre.get("pretokenizers") else pre
    return (
        spec.get("normalizer") is None
        and first.get("type") == "Split"
        and first.get("pattern") == {"String": "\n"}
        and first.get("behavior") == "MergedWithNext"
    )


def _pieces(text: str) -> list[str]:
    """`text` cut as `cuts_at_newlines` says the tokenizer cuts it: the first line, then each line
    with the newline before it."""
    first, *rest = text.split("\n")
    return [first, *("\n" + line for line in rest)]


def encode_by_lines(tokenizer: Any, texts: list[str], focus: bool) -> list[Encoded]:
    """`encode_whole`'s result for a tokenizer that `cuts_at_newlines`, each distinct piece (a line
    with the newline before it) encoded once: a corpus's prompts and answers repeat most of their
    lines, so this is several times faster (tests/model/train/corpus/test_demo_fit.py holds it equal
    to `encode_whole`)."""
    from cudice.model.train.corpus.heldout import compute_lines

    split = [_pieces(text) for text in texts]
    order = list({piece for pieces in split for piece in pieces} - {""})
    # per piece: ids, the marks of a compute line, the marks it gets as a comment above one
    cache: dict[str, tuple[list[int], list[int], list[int]]] = {"": ([], [], [])}
    for piece, enc in zip(
        order, tokenizer.backend_tokenizer.encode_batch(order, add_special_tokens=False), strict=True
    ):
        line_at = 1 if piece.startswith("\n") else 0
        line = piece[line_at:]
        on_line = [j for j, (lo, hi) in enumerate(enc.offsets) if hi > lo and hi > line_at]
        computes = focus and bool(compute_lines(line))
        comment = focus and line.lstrip().startswith("//")
        cache[piece] = (enc.ids, on_line if computes else [], on_line if comment else [])
    out: list[Encoded] = []
    for pieces in split:
        ids: list[int] = []
        marks: list[int] = []
        above: list[int] = []  # the previous piece's marks as a comment line, absolute
        for piece in pieces:
            piece_ids, piece_marks, comment_marks = cache[piece]
            if piece_marks:
                marks.extend(above)
                marks.extend(len(ids) + j for j in piece_marks)
            above = [len(ids) + j for j in comment_marks]
            ids.extend(piece_ids)
        out.append((ids, marks))
    return out


def length_batches(lengths: list[int], tokens_per_batch: int, rng: random.Random) -> list[list[int]]:
    """Indices grouped by similar length, each group's (size x longest) within `tokens_per_batch`."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], rng.random()))
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:
        if current and (len(current) + 1) * lengths[i] > tokens_per_batch:
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    rng.shuffle(batches)
    return batches


def fit(
    init_dir: str | Path,
    sft_path: str | Path,
    out_dir: str | Path,
    config: FitConfig,
    say: Callable[[str], None],
) -> dict[str, Any]:
    """Train until `config.seconds` pass; save to `out_dir`; return {"steps", "history", ...}."""
    from cudice.model.loader import load_checkpoint
    from cudice.model.train.checkpoint import save_checkpoint
    from cudice.model.train.objective import sft_loss

    start = time.monotonic()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    loaded = load_checkpoint(str(init_dir), device=device, dtype="float32")
    model, tok = loaded.model, loaded.tokenizer
    block, mask_id, pad = loaded.block_size, loaded.ids.mask, loaded.ids.pad
    if block is None or mask_id is None:
        raise ValueError(
            f"{init_dir} is not a block-diffusion checkpoint (block size {block}, mask id {mask_id}): "
            "fit starts from a checkpoint made by `cudice model make-tiny --sdar-layout` or the demo recipe"
        )
    records = [json.loads(line) for line in Path(sft_path).read_text(encoding="utf-8").splitlines()]
    focus = config.focus_weight != 1.0
    samples = [s for s in encode_all(tok, records, block, pad, focus) if len(s[0]) <= config.max_length]
    lengths = [len(ids) for ids, _, _ in samples]
    weighted = sum(len(m) for _, _, m in samples)
    focused = f", {weighted:,} of them weighted x{config.focus_weight:g}" if focus else ""
    say(
        f"fit: {len(samples)} samples, {sum(lengths) / 1e6:.1f}M tokens{focused}, longest {max(lengths)}, "
        f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters, encoded in "
        f"{time.monotonic() - start:.0f} s"
    )
    if config.compile_layers and device == "cuda":
        from cudice.model.train.objective import compile_replay_layers
        from torch._dynamo import config as dynamo_config

        dynamo_config.suppress_errors = True  # a layer that cannot compile runs eager
        say(f"fit: {compile_replay_layers(model)} decoder layers compiled (the first steps pay for it)")
    config = train_seconds(config, time.monotonic() - start)
    say(f"fit: {config.seconds:.0f} s left of the budget for steps")
    rng = random.Random(config.seed)
    gen = torch.Generator(device=device).manual_seed(config.seed)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=config.learning_rate, betas=(0.9, 0.95), weight_decay=config.weight_decay
    )
    model.train()
    history: list[dict[str, float]] = []
    step, epoch, tokens = 0, 0, 0
    clock = tick = time.monotonic()  # the schedule's zero: after loading and encoding
    loss_sum = torch.zeros((), device=device)
    done = False
    while not done:
        for batch in length_batches(lengths, config.tokens_per_batch, rng):
            elapsed = time.monotonic() - clock
            if elapsed >= config.seconds:
                done = True
                break
            longest = max(lengths[i] for i in batch)
            ids = torch.full((len(batch), longest), pad, dtype=torch.long)
            loss_mask = torch.zeros(ids.shape, dtype=torch.bool)
            weight = torch.ones(ids.shape) if focus else None
            for row, i in enumerate(batch):
                seq, num_prompt, marked = samples[i]
                ids[row, : len(seq)] = torch.tensor(seq)
                loss_mask[row, num_prompt : len(seq)] = True
                if weight is not None and marked:
                    weight[row, list(marked)] = config.focus_weight
            ids, loss_mask = ids.to(device, non_blocking=True), loss_mask.to(device, non_blocking=True)
            if weight is not None:
                weight = weight.to(device, non_blocking=True)
            for group in optimizer.param_groups:
                group["lr"] = config.learning_rate * lr_factor(elapsed, config)
            with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
                loss, _ = sft_loss(
                    model, ids, loss_mask, block_size=block, mask_token_id=mask_id, generator=gen,
                    token_weight=weight, answer_start=min(samples[i][1] for i in batch),
                )  # fmt: skip
            loss.backward()  # type: ignore[no-untyped-call]
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            loss_sum += loss.detach()
            tokens += sum(lengths[i] for i in batch)
            step += 1
            if step % config.log_every == 0:
                now = time.monotonic()
                stats = {
                    "step": step,
                    "epoch": epoch,
                    "seconds": now - clock,
                    "loss": float(loss_sum) / config.log_every,  # sync point
                    "grad_norm": float(norm),
                    "lr": optimizer.param_groups[0]["lr"],
                    "tokens_per_s": tokens / max(1e-9, now - tick),
                }
                tick = now
                history.append(stats)
                say(
                    f"step {step} epoch {epoch} t={stats['seconds']:.0f}s loss {stats['loss']:.4f} "
                    f"lr {stats['lr']:.2e} gnorm {stats['grad_norm']:.2f} "
                    f"{stats['tokens_per_s'] / 1e3:.0f}k tok/s"
                )
                loss_sum.zero_()
                tokens = 0
        epoch += 1
    last = history[-1] if history else {}
    metrics = dict(last)
    save_checkpoint(model, init_dir, out_dir, step=step, metrics=metrics)
    return {
        "steps": step,
        "epochs": epoch,
        "num_samples": len(samples),
        "history": history,
    }
