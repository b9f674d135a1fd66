"""Every template family of the corpus is `correct` under cudice's verifier (on a GPU); a carried
corpus without its training files samples what it holds (any machine)."""

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


def test_a_corpus_carried_with_its_held_out_files_only_samples_those(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The GPU box gets the 10x corpus without its training files; picking training templates
    # there made every one an `invalid_input` for a file that was never carried.
    import shutil

    import cudice.verifier.api as api
    from cudice.model.train.corpus.build import build_corpus
    from cudice.model.train.corpus.families import FAMILIES
    from cudice.model.train.corpus.verify_templates import verify_templates

    monkeypatch.setattr(api, "gpu_available", lambda: False)  # the static stage: seconds, any machine
    build_corpus(tmp_path, seed=5, train_per_family=3, heldout_per_family=1)
    shutil.rmtree(tmp_path / "solutions" / "train")
    lines: list[str] = []
    table = verify_templates(tmp_path, per_family=2, say=lines.append)
    assert {r["split"] for r in table["rows"]} == {"heldout"}
    assert {r["family"] for r in table["rows"]} == set(FAMILIES)
    assert table["all_static_ok"], "\n".join(lines)
    assert any("have no files in" in line for line in lines)
