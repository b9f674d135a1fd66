"""The train / held-out split by composition: a held-out combination is never seen in training.

A composition key such as `unary:gelu>tanh` or `matmul:bias>scale2p0>silu` names which ops are
combined and how. `split_compositions` holds out about `HELDOUT_PERCENT` % of each family's
non-protected compositions, chosen by a hash of the key (stable across seeds, Python versions
and machines), then moves back to training any held-out composition that uses a part (op,
reduction, dim position) that no training composition uses — so every held-out problem is a
NEW COMBINATION of known parts, not an unknown op. Protected compositions (single ops and the
bundled examples' `relu` and row-wise `softmax`) are always trained on.

Not covered: a split by shape or dtype (the instances of one composition differ only in those,
and all of them fall on the same side).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence

from cudice.model.train.corpus.families import Composition

HELDOUT_PERCENT = 20


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
    held = [c for c in compositions if not c.protected and _hashed_out(c.key)]
    train = [c for c in compositions if c not in held]
    known = _parts(train)
    moved = [c for c in held if not key_parts(c.key) <= known]
    held = [c for c in held if c not in moved]
    if not held:  # a small family: hold out its eligible composition with the smallest hash
        eligible = sorted((c for c in compositions if not c.protected), key=lambda c: _hash(c.key))
        for c in eligible:
            rest = [o for o in compositions if o is not c]
            if key_parts(c.key) <= _parts(rest):
                return rest, [c]
    return [c for c in compositions if c not in held], held


def _parts(compositions: Iterable[Composition]) -> set[str]:
    out: set[str] = set()
    for c in compositions:
        out |= key_parts(c.key)
    return out
