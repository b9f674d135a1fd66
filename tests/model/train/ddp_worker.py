"""One rank of the multi-process training tests (SFT and RL).

`main` runs `train_sft` on a tiny model and fixed samples (whole, or cut after 2 steps and then
resumed); it writes, per rank, the sample indices this rank trained on, the logged losses and
grad norms, and (rank 0) the final weights.
`rl_main` runs one BiC-RL step with scripted rollouts and writes the step's figures and weights.
test_train_distributed.py forks the ranks (`run_rank`: no fresh interpreter to import torch
and transformers into); by hand: python -m torch.distributed.run --nproc_per_node N
ddp_worker.py OUT_DIR BATCH_SIZE [sft|sft-cut|sft-resume].
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


def run_rank(rank: int, world_size: int, port: int, out: Path, batch_size: int, job: str = "sft") -> None:
    """Entry point of a forked rank: the torchrun environment, then `main`; dies with its parent."""
    import ctypes
    import os
    import signal

    ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with the test process
    os.environ.update(
        {
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(world_size),
            "LOCAL_WORLD_SIZE": str(world_size),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
        }
    )
    from accelerate.state import PartialState

    PartialState._reset_state()  # a forked child inherits the parent's single-process state
    if job == "rl":
        rl_main(out, batch_size)
    else:
        main(out, batch_size, job)


def main(out: Path, batch_size: int, job: str = "sft") -> None:
    """job "sft": the whole run; "sft-cut": its first 2 steps, saved to out/ckpt; "sft-resume": the rest."""
    seen: list[int] = []
    real_call = sft.Collate.__call__

    def recording(self: sft.Collate, indices: list[int]) -> sft.Batch:
        seen.extend(indices)
        return real_call(self, indices)

    sft.Collate.__call__ = recording  # type: ignore[method-assign]
    torch.set_num_threads(1)
    model = tiny_model(seed=7 if job == "sft-resume" else 0)  # resumed: the weights come from the state
    config = SFTConfig(
        learning_rate=1e-3,
        num_epochs=2,
        batch_size=batch_size,
        warmup_ratio=0.0,
        seed=3,
        max_steps=2 if job == "sft-cut" else 0,
        save_every_steps=1 if job != "sft" else 0,
    )
    saving = {"source_dir": out / "src", "out_dir": out / "ckpt"} if job != "sft" else {}
    history = sft.train_sft(
        model,
        toy_samples(8),
        config,
        block_size=4,
        mask_token_id=MASK_ID,
        pad_token_id=PAD_ID,
        cpu=True,
        resume=job == "sft-resume",
        **saving,
    )
    rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
    record = {
        "seen": seen,
        "loss": [h["loss"] for h in history],
        "grad_norm": [h["grad_norm"] for h in history],
    }
    (out / f"{job}-rank{rank}.json").write_text(json.dumps(record))
    if rank == 0:
        torch.save({k: v.detach().clone() for k, v in model.state_dict().items()}, out / f"{job}-weights.pt")


def rl_step(flat_task: str, tasks_per_step: int) -> tuple[dict, torch.nn.Module]:
    """One RL step on tasks "a" and "b" (scripted answers); `flat_task`'s group gets equal rewards."""
    from cudice.model.train.config import RLConfig
    from cudice.model.train.data import RLTask
    from cudice.model.train.rl import run_stage
    from cudice.model.train.types import Rollout

    def rollout(tasks, n, cfg):  # type: ignore[no-untyped-def]
        return [
            Rollout(t, [1, 2, 3], [20 + k, 21, 22, 23, 24, 25 + k], [0, 1, 0, 1, 2, 0], f"{t.task_id}{k}")
            for t in tasks
            for k in range(n)
        ]

    def reward(rollouts, cfg):  # type: ignore[no-untyped-def]
        return [1.0 if r.text.startswith(flat_task) else float(r.text.endswith(("0", "2"))) for r in rollouts]

    model = tiny_model()
    config = RLConfig(
        stage="e2e",
        num_steps=1,
        tasks_per_step=tasks_per_step,
        samples_per_task=4,
        learning_rate=1e-3,
        ppo_epochs=1,
        num_minibatches=1,
    )
    tasks = [RLTask("e2e", 1, "# a", task_id="a"), RLTask("e2e", 1, "# b", task_id="b")]
    stats = run_stage(
        model,
        tasks,
        config,
        rollout_fn=rollout,
        reward_fn=reward,
        block_size=4,
        mask_token_id=MASK_ID,
        pad_token_id=PAD_ID,
        cpu=True,
    )[0]
    return {
        "loss": stats.loss,
        "kl": stats.kl,
        "grad_norm": stats.grad_norm,
        "groups": stats.num_kept_groups,
        "rows": stats.num_rows,
        "reward": stats.mean_reward,
        "updates": stats.num_updates,
    }, model


def rl_main(out: Path, flat: int) -> None:
    torch.set_num_threads(1)
    record, model = rl_step("b" if flat else "-", tasks_per_step=2)
    rank = torch.distributed.get_rank()
    (out / f"rl{rank}.json").write_text(json.dumps(record))
    torch.save({k: v.detach().clone() for k, v in model.state_dict().items()}, out / f"rl_weights{rank}.pt")


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]), *sys.argv[3:4])
