"""The paired RL − SFT interval (`heldout.paired_difference`, `evaluate.paired_line`): it covers
the true difference about 95 % of the time, agrees with the large-sample interval, and says
"RL better" only when the interval excludes 0."""

from __future__ import annotations

import math
import random

import pytest
from cudice.model.train.corpus.evaluate import paired_line
from cudice.model.train.corpus.heldout import paired_difference


def _pairs(
    rng: random.Random, n: int, p_both: float, p_after: float, p_before: float
) -> tuple[list[bool], list[bool]]:
    """n problems; each solved by both, only after, only before or neither with these chances."""
    after, before = [], []
    for _ in range(n):
        u = rng.random()
        after.append(u < p_both + p_after)
        before.append(u < p_both or p_both + p_after <= u < p_both + p_after + p_before)
    return after, before


@pytest.mark.parametrize("n", [40, 150])
def test_the_interval_covers_the_true_difference_about_95_percent_of_the_time(n: int) -> None:
    rng = random.Random(n)
    true = 0.12 - 0.04  # P(only after) - P(only before)
    hits, trials = 0, 1500
    for _ in range(trials):
        _, lo, hi = paired_difference(*_pairs(rng, n, 0.25, 0.12, 0.04))
        hits += lo <= true <= hi
    assert 0.925 <= hits / trials <= 0.985


def test_it_agrees_with_the_large_sample_interval_on_many_problems() -> None:
    after, before = _pairs(random.Random(1), 20000, 0.3, 0.1, 0.05)
    d, lo, hi = paired_difference(after, before)
    diffs = [int(a) - int(b) for a, b in zip(after, before, strict=True)]
    mean = sum(diffs) / len(diffs)
    sd = math.sqrt(sum((x - mean) ** 2 for x in diffs) / (len(diffs) - 1))
    half = 1.96 * sd / math.sqrt(len(diffs))
    assert d == pytest.approx(mean)
    assert lo == pytest.approx(mean - half, abs=1.5e-3) and hi == pytest.approx(mean + half, abs=1.5e-3)


def test_only_the_discordant_problems_decide_and_swapping_negates() -> None:
    concordant = [True] * 40 + [False] * 80
    wins = paired_difference([True] * 25 + [False] * 5 + concordant, [False] * 25 + [True] * 5 + concordant)
    assert wins[1] > 0  # 25 against 5 of 150: better, shown
    tie = paired_difference([True] * 10 + [False] * 10 + concordant, [False] * 10 + [True] * 10 + concordant)
    assert tie[0] == 0 and tie[1] < 0 < tie[2]
    back = paired_difference([False] * 25 + [True] * 5 + concordant, [True] * 25 + [False] * 5 + concordant)
    assert back == pytest.approx((-wins[0], -wins[2], -wins[1]))
    assert paired_difference([], []) == (0.0, -1.0, 1.0)
    with pytest.raises(ValueError, match="equal lengths"):
        paired_difference([True], [])


def test_the_line_pairs_problems_by_name_and_states_what_the_interval_shows() -> None:
    def rows(correct: set[int], n: int) -> list[dict[str, object]]:
        return [
            {"problem": f"p{i}.py", "verdict": "correct" if i in correct else "incorrect", "speedup": None}
            for i in range(n)
        ]

    sft = rows(set(range(10)), 150)
    rl = list(reversed(rows(set(range(40)), 150)))  # order differs; names pair them
    line = paired_line(sft, [*rl, {"problem": "only_rl.py", "verdict": "correct", "speedup": None}])
    assert line.startswith("RL - SFT over 150 paired problems")
    assert "correct +20.0 points" in line and "(RL better)" in line
    assert "fast_1 +0.0 points" in line and "(no difference shown)" in line
    assert "(RL worse)" in paired_line(rl, sft)
