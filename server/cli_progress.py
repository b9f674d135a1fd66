"""A progress line for the `cudice` commands: what is running and for how long, on stderr.

`with ProgressLine("compiling") as line: ...; line.update("running")` keeps one line on a
terminal up to date (every `tty_interval_s`, rewritten in place with `\\r`) and, when stderr is
not a terminal (CI logs, `2> file`), writes a plain line every `log_interval_s` so a long build
still shows it is alive. stdout is never touched, so `--json` and piped reports stay clean.

Not covered: a percentage (callers put counts in the label), nested lines.
"""

from __future__ import annotations

import sys
import threading
import time
from types import TracebackType
from typing import TextIO


class ProgressLine:
    def __init__(
        self,
        label: str,
        *,
        stream: TextIO | None = None,
        tty_interval_s: float = 0.5,
        log_interval_s: float = 15.0,
        prefix: str = "cudice",
    ) -> None:
        if tty_interval_s <= 0 or log_interval_s <= 0:
            raise ValueError(
                f"progress intervals must be positive, got {tty_interval_s} and {log_interval_s}"
            )
        self.stream = stream if stream is not None else sys.stderr
        self.is_tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.interval_s = tty_interval_s if self.is_tty else log_interval_s
        self.prefix = prefix
        self.label = label
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="cudice-progress", daemon=True)
        self._width = 0

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    def text(self) -> str:
        return f"{self.prefix}: {self.label} · {self.elapsed_s:.0f} s"

    def update(self, label: str) -> None:
        """Change what the line says (shown at the next tick; at once on a terminal)."""
        with self._lock:
            self.label = label
        if self.is_tty:
            self._draw()

    def _draw(self) -> None:
        with self._lock:
            text = self.text()
            if self.is_tty:
                self.stream.write("\r" + text.ljust(self._width))
                self._width = len(text)
            else:
                self.stream.write(text + "\n")
            self.stream.flush()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._draw()

    def __enter__(self) -> ProgressLine:
        if self.is_tty:
            self._draw()
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        if self.is_tty:  # leave the terminal line empty for the report
            with self._lock:
                self.stream.write("\r" + " " * self._width + "\r")
                self.stream.flush()
