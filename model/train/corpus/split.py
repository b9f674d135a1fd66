"""The train / RL / held-out split: by composition, then by answer text.

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

`split_rl_pool` then takes the RL pool out of the training side, leaving the held-out side
exactly `split_compositions`'s. Its unit is wider, the `constant_class`: an answer class with
every constant in a part's name blanked (`scale2p0` and `scale0p5`, `clamp0p5` and `hardtanh`),
since such compositions' answers are equal up to constants and the answer-text rule below would
drop every RL problem of one whose twin trains. The units whose hash falls in the next
`RL_PERCENT` % of the hash range (after the held-out band) are taken in hash order while every
part of an RL or held-out composition still occurs in a remaining training composition — so an
RL problem is, like a held-out one, a NEW COMBINATION of parts SFT taught. A family where no unit
in the band can go gives the eligible unit of smallest hash. Their problems reach only the RL
task files (`build.draw_problems`).

Then by answer text (`answer_signature`): a held-out problem whose answer, with the kernel's
name, the reference's argument names, every identifier of one or two letters and every number
replaced by placeholders, equals a training answer's is dropped (`build.draw_problems`), so no
held-out answer is byte-identical, or identical up to names and constants (an eps of 1e-5 vs
1e-6, a dim of 1 vs 2), to one the model was trained on. The same rule drops an RL problem whose
answer equals an SFT answer, and a held-out problem whose answer equals an RL problem's (held-out
draws are compared with every training-side draw, SFT and RL alike), so held-out stays
never-seen after RL too.

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
RL_PERCENT = 12  # of the hash range, after the held-out band (split_rl_pool)
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
_CONSTANT = re.compile(r"m?\d+p\d+")  # a constant in a part's name: scale2p0, shiftm0p5, huber_loss1p0


def answer_class(key: str, twins: dict[str, str] | None = None) -> str:
    """`key` with every part that has a twin (`families.twin_parts`: the same CUDA text) replaced
    by the group's name: compositions of one class have byte-identical answers (generic names,
    same instance), so the split keeps a class on one side. Most classes have one member."""
    table = twin_parts() if twins is None else twins
    return _WORD.sub(lambda m: table.get(m.group(0), m.group(0)), key)


def constant_class(key: str, twins: dict[str, str] | None = None) -> str:
    """`answer_class(key)` with every constant spelled in a part's name (`2p0`, `m0p5`) -> `#`:
    `unary:scale2p0>relu` and `unary:scale0p5>relu` share one, as do `clamp0p5` and `hardtanh`
    (whose twin is `clamp1p0`). `add3`, `relu6` and `l1_loss` name ops, not constants, and stay."""
    return _CONSTANT.sub("#", answer_class(key, twins))


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


def split_rl_pool(
    compositions: Sequence[Composition],
) -> tuple[list[Composition], list[Composition], list[Composition]]:
    """(train, rl, held_out) for one family's compositions. `held_out` is `split_compositions`'s;
    `rl` holds the training-side classes whose hash lies in [HELDOUT_PERCENT, HELDOUT_PERCENT +
    RL_PERCENT) % of the range, by `constant_class` of the training side (never one with a
    protected member), taken in hash order while every part of every RL and held-out composition
    still occurs in the remaining `train`; where none can be, the eligible class of smallest hash
    (a small family still gets RL problems) when one is."""
    trained, held = split_compositions(compositions)
    twins = twin_parts()
    unit = {c.key: constant_class(c.key, twins) for c in trained}
    members: dict[str, list[Composition]] = {}
    for c in trained:
        members.setdefault(unit[c.key], []).append(c)
    parts = {c.key: key_parts(c.key) for c in trained}
    protected = {k for k, cs in members.items() if any(c.protected for c in cs)}
    eligible = sorted((k for k in members if k not in protected), key=lambda k: (_hash(k), k))
    banded = [k for k in eligible if HELDOUT_PERCENT <= _hash(k) % 100 < HELDOUT_PERCENT + RL_PERCENT]
    needed = _parts(held)
    taken = _take(banded, members, parts, needed, limit=len(banded)) or _take(
        eligible, members, parts, needed, 1
    )
    rl = set(taken)
    return (
        [c for c in trained if unit[c.key] not in rl],
        [c for c in trained if unit[c.key] in rl],
        held,
    )


def _take(
    candidates: Sequence[str],
    members: dict[str, list[Composition]],
    parts: dict[str, set[str]],
    needed: set[str],
    limit: int,
) -> list[str]:
    """Up to `limit` of `candidates` (in order) whose removal from training keeps `needed` and
    the taken classes' own parts among the remaining compositions' parts."""
    taken: list[str] = []
    need = set(needed)
    count: dict[str, int] = {}  # part -> number of remaining training compositions using it
    for cs in members.values():
        for c in cs:
            for part in parts[c.key]:
                count[part] = count.get(part, 0) + 1
    for k in candidates:
        if len(taken) >= limit:
            break
        mine = [parts[c.key] for c in members[k]]
        after = dict(count)
        for ps in mine:
            for part in ps:
                after[part] -= 1
        if all(after.get(part, 0) > 0 for part in need.union(*mine)):
            taken.append(k)
            count = after
            need = need.union(*mine)
    return taken
