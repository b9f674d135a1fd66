"""The train / held-out split: by composition, then by answer text.

A composition key such as `unary:gelu>tanh` or `matmul:bias>scale2p0>silu` names which ops are
combined and how. `split_compositions` holds out about `HELDOUT_PERCENT` % of each family's
non-protected compositions, chosen by a hash of the key (stable across seeds, Python versions
and machines), then moves back to training any held-out composition that uses a part (op,
reduction, dim position) that no training composition uses — so every held-out problem is a
NEW COMBINATION of known parts, not an unknown op. Protected compositions (single ops and the
bundled examples' `relu` and row-wise `softmax`) are always trained on.

Then by answer text (`answer_signature`): a held-out problem whose answer, with the kernel's
name, the reference's argument names, every identifier of one or two letters and every number
replaced by placeholders, equals a training answer's is dropped (`build.draw_problems`), so no
held-out answer is byte-identical, or identical up to names and constants (an eps of 1e-5 vs
1e-6, a dim of 1 vs 2), to one the model was trained on.

Not covered: a split by shape, dtype, names or layout (those are the instance's, drawn for every
problem on both sides), and a fuzzy similarity bound (two answers that differ in one fused op
line are different compositions and may sit on both sides: that is the point of the split).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence

from cudice.model.train.corpus.families import Composition

HELDOUT_PERCENT = 20
_IDENT = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")
_NUMBER = re.compile(r"(?<![A-Za-z_])\d+(\.\d*)?([eE][-+]?\d+)?f?")


def answer_signature(answer: str, kernel_name: str, names: Iterable[str]) -> str:
    """`answer` up to names and constants: `kernel_name` -> K, `names` and identifiers of at most
    two characters -> _, numbers -> 0, whitespace runs -> one space."""
    text = answer.replace(kernel_name, "K")
    text = _NUMBER.sub("0", text)
    drop = set(names)
    text = _IDENT.sub(lambda m: "_" if m.group(0) in drop or len(m.group(0)) <= 2 else m.group(0), text)
    return " ".join(text.split())


def key_parts(key: str) -> set[str]:
    """The parts a composition combines: `reduce:sum:r3d0` → {'sum', 'r3d0'}; `unary:a>b` → {'a', 'b'}."""
    body = key.split(":", 1)[1]
    return {p for p in re.split(r"[:>]", body) if p}


def _hash(key: str) -> int:
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "big")


def _hashed_out(key: str) -> bool:
    return _hash(key) % 100 < HELDOUT_PERCENT


def split_compositions(compositions: Sequence[Composition]) -> tuple[list[Composition], list[Composition]]:
    """(train, held_out) for one family's compositions; every held-out part also occurs in training."""
    held_keys = {c.key for c in compositions if not c.protected and _hashed_out(c.key)}
    known = _parts(c for c in compositions if c.key not in held_keys)
    held_keys = {k for k in held_keys if key_parts(k) <= known}
    if not held_keys:  # a small family: hold out its eligible composition with the smallest hash
        eligible = sorted((c for c in compositions if not c.protected), key=lambda c: _hash(c.key))
        for c in eligible:
            rest = [o for o in compositions if o is not c]
            if key_parts(c.key) <= _parts(rest):
                return rest, [c]
    return (
        [c for c in compositions if c.key not in held_keys],
        [c for c in compositions if c.key in held_keys],
    )


def _parts(compositions: Iterable[Composition]) -> set[str]:
    out: set[str] = set()
    for c in compositions:
        out |= key_parts(c.key)
    return out
