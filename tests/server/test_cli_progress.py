"""The CLI's progress line (`cudice.server.cli_progress.ProgressLine`): plain timed lines on a stream
that is not a terminal (CI logs, `2> file`), one line rewritten in place on a terminal, and
nothing left on the terminal line once the work is done. Waits poll the stream, bounded."""

from __future__ import annotations

import io
import re
import threading
import time

import pytest
from cudice.server.cli_progress import ProgressLine


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class _Log(io.StringIO):
    """A non-terminal stream whose writes can be waited for from the test's thread."""

    def __init__(self) -> None:
        super().__init__()
        self.wrote = threading.Event()

    def write(self, s: str) -> int:
        num = super().write(s)
        self.wrote.set()
        return num


def _lines_until(stream: _Log, label: str, timeout_s: float = 30.0) -> list[str]:
    """The stream's lines once one of them shows `label`."""
    deadline = time.monotonic() + timeout_s
    while True:
        lines = stream.getvalue().splitlines()
        if any(label in line for line in lines):
            return lines
        assert time.monotonic() < deadline, f"no progress line with {label!r} in {timeout_s} s: {lines}"
        stream.wrote.wait(0.1)
        stream.wrote.clear()


def test_without_a_terminal_plain_lines_with_the_elapsed_time_keep_coming() -> None:
    log = _Log()
    with ProgressLine("compiling", stream=log, log_interval_s=0.05) as line:
        _lines_until(log, "compiling")
        line.update("running")
        lines = _lines_until(log, "running")  # the new label shows at a later tick
    assert all(re.fullmatch(r"cudice: (compiling|running) · \d+ s", t) for t in lines), lines
    assert lines[0].startswith("cudice: compiling") and lines[-1].startswith("cudice: running")
    assert "\r" not in log.getvalue()  # a log file gets whole lines, never terminal rewrites
    num = len(log.getvalue().splitlines())
    log.wrote.clear()
    assert not log.wrote.wait(0.3)  # the ticking stops with the block: nothing after it
    assert len(log.getvalue().splitlines()) == num


def test_on_a_terminal_one_line_is_rewritten_and_cleared_at_the_end() -> None:
    term = _Terminal()
    with ProgressLine("verifying", stream=term, tty_interval_s=60.0) as line:
        assert re.fullmatch(r"\rcudice: verifying · \d+ s", term.getvalue())  # at once, not after a tick
        line.update("compiling relu_cuda.py")  # on a terminal a change shows at once
        last = term.getvalue().rsplit("\r", 1)[1]
        assert re.fullmatch(r"cudice: compiling relu_cuda.py · \d+ s", last), term.getvalue()
    text = term.getvalue()
    assert "\n" not in text  # the report that follows starts on a clean line
    assert text.endswith("\r" + " " * len(last) + "\r")


def test_intervals_must_be_positive() -> None:
    with pytest.raises(ValueError, match="progress intervals must be positive, got 0"):
        ProgressLine("x", tty_interval_s=0)
    with pytest.raises(ValueError, match=r"must be positive, got 0\.5 and -1"):
        ProgressLine("x", log_interval_s=-1)
