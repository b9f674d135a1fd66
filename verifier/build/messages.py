"""Parse nvcc (EDG front end) and g++/clang messages into `CompilerMessage` records.

Formats handled:
- nvcc:  `path/cuda.cu(14): error: identifier "vv" is undefined` (also `warning #177-D:`,
  `remark`, `catastrophic error`), followed by the source line and a caret line that gives
  the column; `detected during instantiation of ... at line N of path` becomes a note;
- gcc/clang: `path:line:col: error|warning|note|fatal error: message`, with
  `In file included from path:line` chains kept as the message's include chain; the source
  and caret lines gcc echoes under a message (`  7 | #error x`) are skipped, not read as messages;
- anything else that says `error` (linker, ninja) is kept as an unlocated message.

Not covered: SARIF/JSON diagnostics output and localised (non-English) compiler messages;
set `LC_ALL=C` when running the compilers (build/compile.py does).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

NVCC = re.compile(
    r"^(?P<file>[^\s(][^(]*)\((?P<line>\d+)\): (?P<sev>catastrophic error|error|warning|remark)"
    r"(?: #(?P<num>[\w-]+))?: (?P<msg>.*)$"
)
GCC = re.compile(
    r"^(?P<file>[^\s:][^:]*):(?P<line>\d+):(?:(?P<col>\d+):)? (?P<sev>fatal error|error|warning|note)"
    r": (?P<msg>.*)$"
)
INCLUDED = re.compile(r"^(?:In file included|\s+) from (?P<file>[^:]+):(?P<line>\d+)")
INSTANTIATION = re.compile(r"detected during.*? at line (?P<line>\d+) of (?P<file>\S+)")
UNLOCATED_ERROR = re.compile(r"(?i)\b(error|undefined reference|ld returned)\b")
# gcc (9+) echoes the source line and its caret under a message: `    7 | #error x`, `      |  ^~~~~`
GCC_ECHO = re.compile(r"^ *\d* \|(?: |$)")


@dataclass(frozen=True, slots=True)
class CompilerMessage:
    file: str | None
    line: int | None
    column: int | None
    severity: str  # "error", "warning", "note", "remark"
    message: str
    tool: str  # "nvcc", "gcc", "other"
    code: str = ""  # nvcc diagnostic number (e.g. "177-D")
    notes: tuple[CompilerMessage, ...] = ()
    include_chain: tuple[tuple[str, int], ...] = ()
    caret_text: tuple[str, str] | None = field(default=None, compare=False)  # (source line, caret line)


def parse_messages(output: str) -> list[CompilerMessage]:
    """All messages in compiler output, in order; gcc notes attach to the message before them."""
    lines = output.splitlines()
    out: list[CompilerMessage] = []
    chain: list[tuple[str, int]] = []
    i = 0
    while i < len(lines):
        text = lines[i]
        if text.startswith("FAILED:"):  # ninja echoes the failed command on the next line: not a message
            i += 2
            continue
        if m := INCLUDED.match(text):
            chain.append((m.group("file"), int(m.group("line"))))
            i += 1
            continue
        if m := NVCC.match(text):
            caret = _caret_after(lines, i)
            column = None
            if caret is not None:
                column = caret[1].index("^") + 1
            msg = _with(_matched(m, column, "nvcc"), code=m.group("num") or "", caret_text=caret)
            j = i + (3 if caret else 1)
            notes = []
            while j < len(lines) and lines[j].startswith("          "):
                if n := INSTANTIATION.search(lines[j]):
                    notes.append(
                        CompilerMessage(
                            n.group("file"), int(n.group("line")), None, "note", lines[j].strip(), "nvcc"
                        )
                    )
                j += 1
            out.append(_with(msg, notes=tuple(notes)))
            chain = []
            i = j
            continue
        if m := GCC.match(text):
            col = int(m.group("col")) if m.group("col") else None
            msg = _with(_matched(m, col, "gcc"), include_chain=tuple(chain))
            chain = []
            if msg.severity == "note" and out:
                out[-1] = _with(out[-1], notes=(*out[-1].notes, msg))
            else:
                out.append(msg)
            i += 1
            while i < len(lines) and GCC_ECHO.match(lines[i]):  # a source line saying `error` is no message
                i += 1
            continue
        if (
            UNLOCATED_ERROR.search(text)
            and not text.lstrip().startswith(("FAILED:", "ninja:", "["))
            and "error detected in the compilation" not in text
            and "errors detected" not in text
        ):
            out.append(CompilerMessage(None, None, None, "error", text.strip(), "other"))
        i += 1
    return out


def _matched(m: re.Match[str], column: int | None, tool: str) -> CompilerMessage:
    """The message on a line that NVCC or GCC matched (both name the groups file, line, sev, msg)."""
    file, message = m.group("file").strip(), m.group("msg").strip()
    return CompilerMessage(file, int(m.group("line")), column, _sev(m.group("sev")), message, tool)


def _sev(word: str) -> str:
    return {"catastrophic error": "error", "fatal error": "error"}.get(word, word)


def _caret_after(lines: list[str], i: int) -> tuple[str, str] | None:
    if (i + 2 < len(lines) and lines[i + 2].strip() == "^") or (
        i + 2 < len(lines)
        and lines[i + 2].strip().startswith("^")
        and set(lines[i + 2].strip()) <= {"^", "~"}
    ):
        return lines[i + 1], lines[i + 2]
    return None


def _with(msg: CompilerMessage, **changes: object) -> CompilerMessage:
    import dataclasses

    return dataclasses.replace(msg, **changes)  # type: ignore[arg-type]


def caret_column(printed_line: str, caret_line: str, actual_line: str) -> int:
    """Column in `actual_line` of the caret under `printed_line` (nvcc expands tabs when printing).

    Counts the non-blank characters before the caret in the printed line and finds the same
    count in the real line.
    """
    caret = caret_line.index("^")
    k = sum(1 for ch in printed_line[:caret] if not ch.isspace())
    seen = 0
    for idx, ch in enumerate(actual_line):
        if not ch.isspace():
            if seen == k:
                return idx + 1
            seen += 1
    return len(actual_line) + 1
