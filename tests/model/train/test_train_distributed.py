"""Two CPU processes (gloo, the torchrun environment that `accelerate launch` also sets up) train
exactly like one process with twice the batch, each rank on its own shard of the data."""

from __future__ import annotations

import json
import multiprocessing
import socket
from pathlib import Path

import pytest
import torch
from cudice.model.train import sft
from cudice.model.train.config import SFTConfig
from train_helpers import MASK_ID, PAD_ID, tiny_model, toy_samples


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _launch(out: Path, num_processes: int, batch_size: int, job: str = "sft") -> None:
    """Fork `num_processes` ranks (gloo) of ddp_worker.run_rank and wait for all of them."""
    from ddp_worker import run_rank

    ctx = multiprocessing.get_context("fork")  # the children inherit the imported torch/transformers
    port = _free_port()
    procs = [
        ctx.Process(target=run_rank, args=(r, num_processes, port, out, batch_size, job), daemon=True)
        for r in range(num_processes)
    ]
    for p in procs:
        p.start()
    try:
        for p in procs:
            p.join(timeout=600)  # generous: a loaded 2-core CPU
        assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()


def _reference(batch_size: int, monkeypatch: pytest.MonkeyPatch) -> tuple[list[int], list[dict], dict]:
    seen: list[int] = []
    real = sft.Collate.__call__

    def recording(self: sft.Collate, indices: list[int]) -> sft.Batch:
        seen.extend(indices)
        return real(self, indices)

    monkeypatch.setattr(sft.Collate, "__call__", recording)
    model = tiny_model()
    config = SFTConfig(learning_rate=1e-3, num_epochs=2, batch_size=batch_size, warmup_ratio=0.0, seed=3)
    history = sft.train_sft(
        model, toy_samples(8), config, block_size=4, mask_token_id=MASK_ID, pad_token_id=PAD_ID, cpu=True
    )
    return seen, history, model.state_dict()


def test_two_ranks_see_disjoint_shards_and_match_one_rank_with_double_batch(tmp_path, monkeypatch) -> None:
    seen, history, weights = _reference(4, monkeypatch)  # first: the forked ranks inherit its imports
    monkeypatch.undo()
    _launch(tmp_path, num_processes=2, batch_size=2)
    ranks = [json.loads((tmp_path / f"sft-rank{r}.json").read_text()) for r in (0, 1)]

    per_epoch = 4  # 8 samples over 2 ranks
    for epoch in range(2):
        shards = [set(r["seen"][epoch * per_epoch : (epoch + 1) * per_epoch]) for r in ranks]
        assert not shards[0] & shards[1]  # disjoint
        assert shards[0] | shards[1] == set(range(8))  # together: the whole data set
        assert shards[0] | shards[1] == set(seen[epoch * 8 : (epoch + 1) * 8])
    for step in range(4):  # each step: rank batches = the halves of the single-process batch
        single = set(seen[4 * step : 4 * step + 4])
        assert (
            set(ranks[0]["seen"][2 * step : 2 * step + 2]) | set(ranks[1]["seen"][2 * step : 2 * step + 2])
            == single
        )

    # the logged loss is the mean over both ranks: the same numbers as the single process
    assert ranks[0]["loss"] == pytest.approx([h["loss"] for h in history], rel=1e-5)
    assert ranks[0]["grad_norm"] == pytest.approx([h["grad_norm"] for h in history], rel=1e-4)
    assert ranks[0]["loss"] == ranks[1]["loss"]
    ddp = torch.load(tmp_path / "sft-weights.pt")
    close = [torch.allclose(ddp[k], v, atol=1e-5) for k, v in weights.items()]
    assert sum(close) >= 0.9 * len(close)  # Adam turns ~1e-9 gradient rounding into lr-sized steps


def test_two_ranks_save_their_state_and_resume_like_the_uninterrupted_run(tmp_path, monkeypatch) -> None:
    """Every rank writes its part of train_state/ (rank 0 the weights, each rank its RNG); a
    2-process run cut after 2 steps and resumed logs the losses of one process with twice the batch."""
    from cudice.model.tiny import make_tiny

    _, history, weights = _reference(4, monkeypatch)
    monkeypatch.undo()
    make_tiny(tmp_path / "src", sdar_layout=True)
    _launch(tmp_path, num_processes=2, batch_size=2, job="sft-cut")
    state = tmp_path / "ckpt" / "train_state"
    assert {"random_states_0.pkl", "random_states_1.pkl", "optimizer.bin"} <= {
        p.name for p in state.iterdir()
    }
    assert json.loads((state / "position.json").read_text())["num_processes"] == 2
    _launch(tmp_path, num_processes=2, batch_size=2, job="sft-resume")
    cut, rest = (
        [json.loads((tmp_path / f"{job}-rank{r}.json").read_text()) for r in (0, 1)]
        for job in ("sft-cut", "sft-resume")
    )
    assert len(cut[0]["loss"]) == 2 and cut[0]["loss"] + rest[0]["loss"] == cut[1]["loss"] + rest[1]["loss"]
    assert cut[0]["loss"] + rest[0]["loss"] == pytest.approx([h["loss"] for h in history], rel=1e-5)
    resumed = torch.load(tmp_path / "sft-resume-weights.pt")
    close = [torch.allclose(resumed[k], v, atol=1e-5) for k, v in weights.items()]
    assert sum(close) >= 0.9 * len(close)
    with pytest.raises(ValueError, match="written by 2 process"):  # the shards and RNG files are per rank
        sft.train_sft(
            tiny_model(),
            toy_samples(8),
            SFTConfig(num_epochs=2),
            block_size=4,
            mask_token_id=MASK_ID,
            pad_token_id=PAD_ID,
            cpu=True,
            out_dir=tmp_path / "ckpt",
            resume=True,
        )


@pytest.mark.parametrize("flat", [0, 1])
def test_two_rl_ranks_take_the_update_of_one_rank_on_both_tasks(tmp_path, flat: int) -> None:
    """Rank 0 rolls out task a, rank 1 task b; one minibatch: the all-reduced update is the
    single-process update over both. flat=1: rank 1's group is flat, so it has no rows and joins
    the all-reduce with an idle backward."""
    from ddp_worker import rl_step

    single, model = rl_step("b" if flat else "-", tasks_per_step=2)
    reference = model.state_dict()
    _launch(tmp_path, num_processes=2, batch_size=flat, job="rl")
    ranks = [json.loads((tmp_path / f"rl{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0] == ranks[1]  # figures are reduced over ranks
    assert ranks[0]["groups"] == single["groups"] == 2 - flat and ranks[0]["rows"] == single["rows"]
    assert ranks[0]["reward"] == pytest.approx(single["reward"])
    assert ranks[0]["loss"] == pytest.approx(single["loss"], rel=1e-5, abs=1e-7)
    assert ranks[0]["grad_norm"] == pytest.approx(single["grad_norm"], rel=1e-4)
    w0, w1 = (torch.load(tmp_path / f"rl_weights{r}.pt") for r in (0, 1))
    assert all(torch.equal(w0[k], w1[k]) for k in w0)  # DDP keeps the replicas identical
    close = [torch.allclose(w0[k], v, atol=1e-5) for k, v in reference.items()]
    assert sum(close) >= 0.9 * len(close)
