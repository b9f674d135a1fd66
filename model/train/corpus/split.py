"""The train / held-out split: by composition, then by answer text.

A composition key such as `unary:gelu>tanh` or `matmul:bias>scale2p0>silu` names which ops are
combined and how. `split_compositions` holds out about `HELDOUT_PERCENT` % of each family's
non-protected compositions, chosen by a hash of the key (stable across seeds, Python versions
and machines), then moves back to training any held-out composition that uses a part (op,
reduction, dim position) that no training composition uses — so every held-out problem is a
NEW COMBINATION of known parts, not an unknown op. Protected compositions (single ops and the
bundled examples' `relu` and row-wise `softmax`) are always trained on. Compositions whose
answers are byte-identical (`answer_class`: they differ only by ops that compile to the same
CUDA line, `hardtanh` and `clamp1p0`; with generic names, `families.NAMINGS`, nothing else tells
their answers apart) are one unit: held out by the class's hash, all together.

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

from cudice.model.train.corpus.families import Composition, twin_parts

HELDOUT_PERCENT = 20
_IDENT = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")
_COMMENT = re.compile(r"//[^\n]*")  # C++ line comments (an answer's notes) say nothing the code does not
_NUMBER = re.compile(r"(?<![A-Za-z_])\d+(\.\d*)?([eE][-+]?\d+)?f?")


def answer_signature(answer: str, kernel_name: str, names: Iterable[str]) -> str:
    """`answer` up to names, constants and comments: `//` comments dropped, `kernel_name` -> K,
    `names` and identifiers of at most two characters -> _, numbers -> 0, whitespace runs -> one
    space."""
    text = _COMMENT.sub("", answer).replace(kernel_name, "K")
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


_WORD = re.compile(r"[A-Za-z0-9_]+")


def answer_class(key: str, twins: dict[str, str] | None = None) -> str:
    """`key` with every part that has a twin (`families.twin_parts`: the same CUDA text) replaced
    by the group's name: compositions of one class have byte-identical answers (generic names,
    same instance), so the split keeps a class on one side. Most classes have one member."""
    table = twin_parts() if twins is None else twins
    return _WORD.sub(lambda m: table.get(m.group(0), m.group(0)), key)


def split_compositions(compositions: Sequence[Composition]) -> tuple[list[Composition], list[Composition]]:
    """(train, held_out) for one family's compositions; every held-out part also occurs in training,
    and compositions of one `answer_class` are on the same side (held out by the class's hash,
    never when one of them is protected)."""
    twins = twin_parts()
    cls = {c.key: answer_class(c.key, twins) for c in compositions}
    members: dict[str, list[Composition]] = {}
    for c in compositions:
        members.setdefault(cls[c.key], []).append(c)
    protected = {cls[c.key] for c in compositions if c.protected}
    held = {k for k in members if k not in protected and _hashed_out(k)}
    known = _parts(c for c in compositions if cls[c.key] not in held)
    held = {k for k in held if all(key_parts(c.key) <= known for c in members[k])}
    if not held:  # a small family: hold out its eligible class with the smallest hash
        for k in sorted((k for k in members if k not in protected), key=lambda k: (_hash(k), k)):
            rest = [o for o in compositions if cls[o.key] != k]
            if all(key_parts(c.key) <= _parts(rest) for c in members[k]):
                return rest, members[k]
    return (
        [c for c in compositions if cls[c.key] not in held],
        [c for c in compositions if cls[c.key] in held],
    )


def _parts(compositions: Iterable[Composition]) -> set[str]:
    out: set[str] = set()
    for c in compositions:
        out |= key_parts(c.key)
    return out
