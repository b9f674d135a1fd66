"""On a GPU: every template family of the corpus is `correct` under cudice's verifier."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.mark.gpu
def test_a_sample_of_every_template_family_verifies_correct(tmp_path: Path) -> None:
    from cudice.model.train.corpus.build import build_corpus
    from cudice.model.train.corpus.families import FAMILIES
    from cudice.model.train.corpus.verify_templates import verify_templates

    build_corpus(tmp_path, seed=5, train_per_family=24, heldout_per_family=1)
    lines: list[str] = []
    table = verify_templates(tmp_path, per_family=2, say=lines.append)
    assert table["gpu"] is True
    assert {r["family"] for r in table["rows"]} == set(FAMILIES)
    bad = [
        (r["file"], r["verdict"], r.get("error"), r.get("diagnostics"))
        for r in table["rows"]
        if r["verdict"] != "correct"
    ]
    assert not bad, "\n".join(lines)
