"""A preprocessor step of nvcc's that reads the headers' part of a source once per include set.

Role: nvcc's host and device preprocessor steps (`gcc -E ... cuda.cu -o cuda.cpp4.ii`) read
torch's headers again for every candidate, about half a second each on a 2-core box, though a
candidate's `cuda.cu` starts with the same `#include <...>` lines as the last one. `run_step()`
splits the source into that leading block H (only `#include <...>` lines, `//` comments and blank
lines, up to the last include) and the rest U, and keeps, per preprocessor command and H (the step's
`-DTORCH_EXTENSION_NAME=` value left out), under `cache_root/ppcache/<key>/`:
  - H's own `gcc -E` output (the step's command on a file holding H alone, at another path), and
  - the macros H leaves behind (a `-dD` run of the same file: each `#define` and `#undef` with the
    file it was in), written back as `#define` lines in three files that the preprocessor reads
    as plain, system and implicitly `extern "C"` system headers, as the files that defined them
    were (macro expansions carry their definition's header flags into the output), and the
    number of `__COUNTER__` uses, replayed by as many `#if __COUNTER__` lines.
A step then runs the command on U alone (H's lines blank, same line numbers) with those files
`-include`d in place of the command's own `-include`s, a few hundredths of a second, and writes
H's output followed by U's from its main file's first line marker on, the temporary files'
paths replaced by the source's. The front ends read the same tokens, on the same lines of the
same files, with the same system-header flags, as in the step's own output (the tests compare
both, line by line, on the benchmark's candidates and on sources made to differ).

Contract: `run_step()` returns None, and the caller runs the step itself, whenever the split
cannot be shown equivalent here: a command of another shape (no `-E`, no single source, `$` or
quotes that `shlex` cannot read), a source without such a leading block, a U with a quoted
`#include` or `__has_include("...")` (they search the main file's folder), `push_macro` or
`pop_macro`, a path with characters gcc escapes, any output of the preprocessor on stderr or a
failure in H or U (a warning or error then comes from the step itself, with its own text), an
`#pragma once` file that U enters and H had entered already (the step itself would skip it; a
file guarded by a macro is skipped or read alike, the macro being defined alike), an H whose
output has a `GCC diagnostic` that turns a warning on or names the placeholder module name, a
word that a `GCC poison` line of H's headers names (active or not: the preprocessor consumes
that pragma) anywhere in U, its output or the files it enters, or a header of H's whose size or
modification time changed since. What differs from the step's own output: line markers and
blank lines (U's text starts with a marker of its own; a guarded header U includes again is
entered and left empty where gcc skips it unread), so the files nothing reads but cicc's
`.cudafe1.gpu` (local names there carry a line of the preprocessed text) may differ; the host
front end's messages and host source, cicc's messages and PTX are the same (tests).
Entries are written whole (a temporary folder renamed into place); processes run through
`process.run_process` (own session, killed on cancel or timeout).

Not covered: a header added where it would shadow one of H's (the object cache has the same
blind spot: its keys are the commands and texts, not the headers); preprocessors other than
gcc's (the command must take `-E`, `-dD`, `-include`, `-iquote`, `-isystem` as gcc does).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import tempfile
import threading
import time
from pathlib import Path

from cudice.verifier.process import CancelToken, run_process

VERSION = "1"
_PLACEHOLDER = "cudice_ppcache_module_name_0f3a"
_EXT_NAME = "TORCH_EXTENSION_NAME="
_PLAIN_PATH = re.compile(r"^[\w./+-]+$")
# an `#include <...>`, a `//` comment (not continued by a backslash) or a blank line
_HEAD_LINE = re.compile(r"^[ \t]*(?:#[ \t]*include[ \t]*<[^<>\n]+>[ \t]*|//.*(?<!\\))?$")
_INCLUDE = re.compile(r"^[ \t]*#[ \t]*include[ \t]*<", re.M)
_REFUSED_IN_REST = re.compile(
    r'(?:#[ \t]*include(?:_next)?[ \t]*"|__has_include(?:_next)?[ \t]*\([ \t]*"|push_macro|pop_macro)'
)
_MARKER = re.compile(r'^# (\d+) "((?:[^"\\]|\\.)*)"((?: [1-4])*)$', re.M)
_DIRECTIVE = re.compile(r"^#(define|undef) ([A-Za-z_$][\w$]*)")
_CLASSES = ("plain", "sys", "c")  # no flag, "3" (a system header), "3 4" (also implicitly extern "C")
_DELTA = "cudice-ppcache-{}.h"
_WATCHED_ENV = ("CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "GCC_EXEC_PREFIX", "COMPILER_PATH")


def run_step(
    step: str,
    source: Path,
    cache_root: Path,
    env: dict[str, str],
    cwd: Path | None,
    timeout_s: float,
    cancel: CancelToken | None,
) -> tuple[int, str, bool, bool] | None:
    """Run the preprocessor command `step` (a shell line of `nvcc --dryrun`) on `source` through
    the cache: (returncode, output, cancelled, timed_out) as `process.run_process` reports the
    step itself, or None when the caller must run the step (module docstring)."""
    deadline = time.monotonic() + timeout_s
    try:
        args = shlex.split(step)
    except ValueError:
        return None
    if "$" in step or "-E" not in args or "-o" not in args or args.count(str(source)) != 1:
        return None
    out = Path(args[args.index("-o") + 1])
    try:
        text = source.read_text()
    except (OSError, UnicodeDecodeError):
        return None
    head_lines = _head(text)
    if head_lines == 0 or not _PLAIN_PATH.match(str(source)) or not _PLAIN_PATH.match(str(cache_root)):
        return None
    lines = text.split("\n")
    head = "\n".join(lines[:head_lines]) + "\n"
    rest = "\n" * head_lines + "\n".join(lines[head_lines:])
    if _REFUSED_IN_REST.search(rest):
        return None
    key_args = ["<SRC>" if a == str(source) else "<OUT>" if a == str(out) else _without_name(a) for a in args]
    key = hashlib.sha256(
        json.dumps(
            [VERSION, key_args, head, shutil.which(args[0], path=env.get("PATH")), source.name]
            + [env.get(v, "") for v in _WATCHED_ENV]
        ).encode()
    ).hexdigest()[:32]
    entry = cache_root / "ppcache" / key
    if not _fresh(entry):
        made = _make_entry(args, source, out, head, entry, env, deadline, cancel)
        if made is not None:
            return made if made[2] or made[3] else None  # cancelled or timed out: as the step would be
        if not _fresh(entry):
            return None
    return _rest_step(args, source, out, rest, entry, env, cwd, deadline, cancel)


def _head(text: str) -> int:
    """Lines in the leading block of `#include <...>` and blank lines, to its last include (0: none)."""
    last = 0
    for i, line in enumerate(text.split("\n")):
        if not _HEAD_LINE.match(line):
            break
        if line.strip():
            last = i + 1
    return last


def _without_name(arg: str) -> str:
    """`arg` with the module's name, which only U may read, replaced by the placeholder."""
    for prefix in ("-D" + _EXT_NAME, _EXT_NAME):
        if arg.startswith(prefix):
            return prefix + _PLACEHOLDER
    return arg


def _fresh(entry: Path) -> bool:
    """The entry is whole and every header it read is as it was."""
    try:
        files = json.loads((entry / "files.json").read_text())
        for path, size, mtime in files:
            st = os.stat(path)
            if st.st_size != size or st.st_mtime_ns != mtime:
                return False
    except (OSError, ValueError, TypeError):
        return False
    return True


def _make_entry(
    args: list[str],
    source: Path,
    out: Path,
    head: str,
    entry: Path,
    env: dict[str, str],
    deadline: float,
    cancel: CancelToken | None,
) -> tuple[int, str, bool, bool] | None:
    """Preprocess H (text and `-dD`, side by side) and write the entry; None when written or refused,
    the failing run's result when cancelled or out of time."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".tmp-", dir=entry.parent))
    try:
        h_src = work / "h" / source.name
        h_src.parent.mkdir()
        h_src.write_text(head + "__COUNTER__\n")  # its value after H, on the last line of the text
        base = [_without_name(a) for a in args]
        runs: dict[str, tuple[int, str, bool, bool]] = {}

        def one(kind: str) -> None:
            extra = ["-dD"] if kind == "macros" else []
            cmd = _with(base, source, h_src, out, work / f"{kind}.ii", extra)
            left = max(deadline - time.monotonic(), 0.1)
            runs[kind] = run_process(cmd, left, cancel, work, None, env=env)

        threads = [threading.Thread(target=one, args=(k,), daemon=True) for k in ("text", "macros")]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        for res in runs.values():
            if res[2] or res[3]:
                return res
        if len(runs) != 2 or any(rc != 0 or output.strip() for rc, output, _, _ in runs.values()):
            return None
        written = _write_entry(work, h_src)
        if written is None:
            return None
        try:
            work.rename(entry)
        except OSError:  # another process wrote it first (or an old one is there): keep that one
            if entry.exists() and not _fresh(entry):
                shutil.rmtree(entry, ignore_errors=True)
                work.rename(entry)
        return None
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _write_entry(work: Path, h_src: Path) -> bool | None:
    """Turn the two runs in `work` into the entry's files; None when H cannot be cached."""
    text = (work / "text.ii").read_text()
    body = text.rstrip("\n")
    last = body.rfind("\n")
    counter = body[last + 1 :]
    if not counter.isdigit() or _PLACEHOLDER in text:
        return None
    text = body[: last + 1] + "\n"  # the counter's line left blank
    if re.search(r"^#pragma GCC (?:poison|diagnostic (?:warning|error)|push_options)", text, re.M):
        return None
    files: dict[str, None] = {}
    for mark in _MARKER.finditer(text):
        f = mark.group(2)
        if not f.startswith("<") and f != str(h_src):
            files[f] = None
    final: dict[str, tuple[str, str] | None] = {}  # macro -> (#define line, class) or None (#undef)
    current, klass = "", "plain"
    for line in (work / "macros.ii").read_text().split("\n"):
        at = _MARKER.match(line)
        if at is not None:
            current = at.group(2)
            flags = at.group(3).split()
            klass = "c" if "4" in flags else "sys" if "3" in flags else "plain"
            continue
        d = _DIRECTIVE.match(line)
        if d is None or current.startswith("<"):
            continue  # text, or gcc's built-in and command-line macros (the same for U)
        final[d.group(2)] = (line, klass) if d.group(1) == "define" else None
    parts: dict[str, list[str]] = {k: [] for k in _CLASSES}
    parts["plain"] += [f"#undef {n}" for n, v in final.items() if v is None]
    parts["plain"] += ["#if __COUNTER__", "#endif"] * int(counter)
    for v in final.values():
        if v is not None:
            parts[v[1]].append(v[0])
    parts["sys"].insert(0, "#pragma GCC system_header")
    for k in _CLASSES:
        (work / k).mkdir()
        (work / k / _DELTA.format(k)).write_text("\n".join(parts[k]) + "\n")
    # H's text without its file's path, and the lengths of the pieces the path went between
    pieces = text.encode().split(str(h_src).encode())
    (work / "head.ii").write_bytes(b"".join(pieces))
    (work / "head.json").write_text(json.dumps([len(x) for x in pieces]))
    stats = []
    poisonable: set[str] = set()  # the pragma leaves no trace in the output: every word it may name
    for f in files:
        for hit in _POISON.finditer(Path(f).read_bytes()):
            poisonable.update(_WORD.findall(hit.group(1).decode(errors="replace")))
        st = os.stat(f)
        stats.append((f, st.st_size, st.st_mtime_ns))
    for f in ("text.ii", "macros.ii"):
        (work / f).unlink()
    (work / "poisonable.json").write_text(json.dumps(sorted(poisonable)))
    (work / "files.json").write_text(json.dumps(stats))
    return True


_POISON = re.compile(rb"GCC[ \t]+poison[ \t]+([^\n]*)")
_WORD = re.compile(r"[A-Za-z_$][\w$]*")
_ONCE = re.compile(r"(?:#[ \t]*pragma[ \t]+once|_Pragma[ \t]*\([ \t]*\"once)")


def _write_head(entry: Path, path: bytes, dest: Path) -> None:
    """H's text with `path` as its file's, to `dest` (copied by the kernel where it can)."""
    lengths = json.loads((entry / "head.json").read_text())
    with open(entry / "head.ii", "rb") as src, open(dest, "wb") as out:
        for i, n in enumerate(lengths):
            if i:
                out.write(path)
            out.flush()
            left = n
            while left > 0:
                try:
                    done = os.copy_file_range(src.fileno(), out.fileno(), left)
                except OSError:
                    done = 0
                if done <= 0:  # not supported here, or at an end: plain reads
                    out.write(src.read(left))
                    out.flush()
                    break
                left -= done


def _with(
    args: list[str], source: Path, new_source: Path, out: Path, new_out: Path, extra: list[str]
) -> list[str]:
    """`args` on `new_source`, writing `new_out`, with `extra` before the source."""
    cmd: list[str] = []
    for a in args:
        if a == str(source):
            cmd += [*extra, str(new_source)]
        elif a == str(out):
            cmd.append(str(new_out))
        else:
            cmd.append(a)
    return cmd


def _rest_step(
    args: list[str],
    source: Path,
    out: Path,
    rest: str,
    entry: Path,
    env: dict[str, str],
    cwd: Path | None,
    deadline: float,
    cancel: CancelToken | None,
) -> tuple[int, str, bool, bool] | None:
    """Preprocess U with H's macros, and write H's output and U's as the step's output."""
    work = Path(tempfile.mkdtemp(prefix="ppcache-", dir=out.parent))
    try:
        u_src = work / source.name
        u_src.write_text(rest)
        cmd: list[str] = []
        skip = False
        for a in args:  # the command's own `-include`s were read with H
            if skip:
                skip = False
            elif a == "-include":
                skip = True
            else:
                cmd.append(a)
        extra = ["-iquote", str(entry / "plain"), "-iquote", str(entry / "sys"), "-isystem", str(entry / "c")]
        extra += [x for k in _CLASSES for x in ("-include", _DELTA.format(k))]  # `#undef`s first
        cmd = _with(cmd, source, u_src, out, work / "rest.ii", extra)
        res = run_process(cmd, max(deadline - time.monotonic(), 0.1), cancel, cwd, None, env=env)
        if res[2] or res[3]:
            return res
        if res[0] != 0 or res[1].strip():
            return None
        u_text = (work / "rest.ii").read_text()
        start = u_text.find(f'\n# 1 "{u_src}"\n')
        if start < 0:
            return None
        preamble, tail = u_text[: start + 1], u_text[start + 1 :]
        marks = {(m.group(2), m.group(3)) for m in _MARKER.finditer(preamble)}
        plain, system, extern_c = (str(entry / k / _DELTA.format(k)) for k in _CLASSES)
        if not {(plain, " 1"), (system, " 3"), (extern_c, " 1 3 4")} <= marks:
            return None  # a macro file was not read as the header class it stands for
        head_files = {f for f, _, _ in json.loads((entry / "files.json").read_text())}
        rest_files = {m.group(2) for m in _MARKER.finditer(tail) if m.group(3).startswith(" 1")}
        if any(_ONCE.search(Path(f).read_text(errors="replace")) for f in rest_files & head_files):
            return None  # U enters an `#pragma once` file H entered: the step itself skips it
        poisonable = set(json.loads((entry / "poisonable.json").read_text()))
        if poisonable and any(  # as a substring: a word in a longer one counts too
            w in t
            for t in (rest, tail, *(Path(f).read_text(errors="replace") for f in rest_files))
            for w in poisonable
        ):
            return None  # a word H may have poisoned, where the step itself could refuse it
        tmp = out.with_name(out.name + ".tmp")
        _write_head(entry, str(source).encode(), tmp)
        with open(tmp, "ab") as f:
            f.write(tail.replace(str(u_src), str(source)).encode())
        tmp.replace(out)
        return 0, "", False, False
    except OSError:
        return None
    finally:
        shutil.rmtree(work, ignore_errors=True)
