"""Where training figures go: JSON lines, TensorBoard, a rich progress bar (main process only).

`Monitor.log(step, stats)` sends one record to every sink: a JSON line through `emit` (the CLI
prints them on stdout, one object per line, so scripts can parse a run), TensorBoard scalars
under `tensorboard_dir` (when `torch.utils.tensorboard` imports: tensorboard is optional), and
a rich progress bar on stderr showing loss, reward and tokens/s. The loops call it only on
logging steps, after the one device→host read of that step, so the sinks add no sync.

Not covered: Weights & Biases or other trackers (accelerate's `log_with` can add them).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

_BAR_FIELDS = ("loss", "mean_reward", "tokens_per_s")


class Monitor:
    """Sinks for one run. `enabled=False` (ranks other than 0) turns every sink off."""

    def __init__(
        self,
        total_steps: int,
        *,
        emit: Callable[[dict[str, Any]], None] | None = None,
        tensorboard_dir: str | None = None,
        progress: bool = False,
        enabled: bool = True,
        description: str = "train",
    ) -> None:
        self.emit = emit if enabled else None
        self._writer: Any = None
        self._progress: Any = None
        self._task: Any = None
        if enabled and tensorboard_dir:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                log.warning("tensorboard is not installed: pip install tensorboard (logging JSON lines only)")
            else:
                self._writer = SummaryWriter(log_dir=tensorboard_dir)
        if enabled and progress:
            try:
                from rich.console import Console
                from rich.progress import (
                    BarColumn,
                    MofNCompleteColumn,
                    Progress,
                    TextColumn,
                    TimeRemainingColumn,
                )
            except ImportError:
                log.warning("rich is not installed: pip install rich (no progress bar)")
            else:
                self._progress = Progress(
                    TextColumn("{task.description}"),
                    BarColumn(),
                    MofNCompleteColumn(),
                    TextColumn("{task.fields[figures]}"),
                    TimeRemainingColumn(),
                    console=Console(file=sys.stderr),
                )
                self._progress.start()
                self._task = self._progress.add_task(description, total=total_steps, figures="")

    def log(self, step: int, stats: dict[str, Any]) -> None:
        record = {"step": step, **stats}
        if self.emit is not None:
            self.emit(record)
        if self._writer is not None:
            prefix = str(stats.get("stage", "train"))
            for key, value in stats.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    self._writer.add_scalar(f"{prefix}/{key}", value, step)
        if self._progress is not None:
            figures = "  ".join(
                f"{k} {stats[k]:.4g}" for k in _BAR_FIELDS if isinstance(stats.get(k), (int, float))
            )
            self._progress.update(self._task, completed=step, figures=figures)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        if self._progress is not None:
            self._progress.stop()
