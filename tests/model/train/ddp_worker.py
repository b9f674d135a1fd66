"""One rank of the multi-process SFT test.

Runs `train_sft` on a tiny model and fixed samples; writes, per rank, the sample indices this
rank trained on, the logged losses and grad norms, and (rank 0) the final weights.
test_train_distributed.py forks the ranks (`run_rank`: no fresh interpreter to import torch
and transformers into); by hand: python -m torch.distributed.run --nproc_per_node N
sft_ddp_worker.py OUT_DIR BATCH_SIZE.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from cudice.model.train import sft
from cudice.model.train.config import SFTConfig
from train_helpers import MASK_ID, PAD_ID, tiny_model, toy_samples


def run_rank(rank: int, world_size: int, port: int, out: Path, batch_size: int) -> None:
    """Entry point of a forked rank: the torchrun environment, then `main`; dies with its parent."""
    import ctypes
    import os
    import signal

    ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with the test process
    os.environ.update({"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world_size),
                       "LOCAL_WORLD_SIZE": str(world_size), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    from accelerate.state import PartialState

    PartialState._reset_state()  # a forked child inherits the parent's single-process state
    main(out, batch_size)


def main(out: Path, batch_size: int) -> None:
    seen: list[int] = []
    real_call = sft.Collate.__call__

    def recording(self: sft.Collate, indices: list[int]) -> sft.Batch:
        seen.extend(indices)
        return real_call(self, indices)

    sft.Collate.__call__ = recording  # type: ignore[method-assign]
    torch.set_num_threads(1)
    model = tiny_model()
    config = SFTConfig(learning_rate=1e-3, num_epochs=2, batch_size=batch_size, warmup_ratio=0.0, seed=3)
    history = sft.train_sft(model, toy_samples(8), config, block_size=4, mask_token_id=MASK_ID,
                            pad_token_id=PAD_ID, cpu=True)
    rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
    record = {"seen": seen, "loss": [h["loss"] for h in history], "grad_norm": [h["grad_norm"] for h in history]}
    (out / f"rank{rank}.json").write_text(json.dumps(record))
    if rank == 0:
        torch.save({k: v.detach().clone() for k, v in model.state_dict().items()}, out / "weights.pt")


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]))
