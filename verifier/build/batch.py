"""Many candidates' compile-only checks in one pass of nvcc's front ends.

Role: a compile-only check (`build_module(link=False)`) spends most of its time in `cudafe++` and
`cicc` parsing the ~7 MB of headers in front of a candidate's own code (docs/benchmarks.md).
`check_many()` checks N candidates' `cuda.cu` files (with the C-ABI shim: build/cabi.py) as one
translation unit: the shared `#include <...>` block once, then each candidate's own code in a
namespace of its own (`cudice_batch_<i>`), opened by a `#line` directive that names the very file
the single check compiles (`<cache>/objects/<key>/cuda.cu`, objects.compile_object) at the line
it has there, so every message names the candidate's file and line as the single check's would.
After every candidate's code come the shim's fixed prelude (its `#include`s and `namespace
cudice_cabi`) once, then each candidate's part of the shim in its namespace again. What each
candidate would have printed alone (its messages with the qualifiers `cudice_batch_<i>::` removed,
EDG's warnings remark after its first warning, the "N errors detected" line) is written into the
object cache under the single check's key; `build_module` then reads it there and does all the
rest as always (slim error verdicts, the full-header rebuild, the pybind11 fallback, the mapping
into the document), so a result is the single check's wherever the cached output is (a result a
batch decided in the call says `cached=False`, as a check compiled then does).

Contract: the cached output is what the single check would have printed, or nothing is cached and
the single check runs. Decided from a batch are (1) with a clean pass, every candidate; (2) with
errors, the candidates with errors in their own lines (the host front end's when it failed, else
the device front end's); the others go into the next batch (`cicc` does not run after a host
front-end error, and a failed `cicc` compiles nothing). The single check gets: the candidates a
message outside their own lines names (a header's message through its instantiation notes); every
candidate of a round with a message that names none (the wrapper's lines, the shim's prelude), a
preprocessor message without a candidate's file, output of `ptxas` or `fatbinary`, a catastrophic
error, a step that failed without a message, or no candidate decided; a candidate alone with its
`#include` list. Refused up front (`BatchReport.how` says why): modules the single check would not
build as a slim C-ABI `cuda.cu`, a `cuda.cu` without a leading `#include <...>` block, a shim of
another layout, a cache path a `#line` cannot name; and code after the leading block that the
source scanner refuses (build/batch_scan.py `scan_code`, `clash`, whose docstring lists what: other
directives, names and macros the headers or the shim spell, internal-linkage names not clearly
referenced, ...). This module runs the batches and attributes their messages; the scanner reads
the candidates' code.

Why: two candidates may define the same kernels, helpers and macros. A namespace keeps their
declarations apart and `#undef` of each macro a candidate defined keeps the preprocessor apart.
In a namespace a candidate's names would hide header names of the same spelling instead of
overloading or clashing with them, `::x`, `extern "C"` and using-directives mean other things,
and operators are found by argument-dependent lookup from other namespaces: hence those refusals.
EDG reports an unreferenced internal-linkage entity ("declared but never referenced") only in
the main file, which a `#line`d section is not. A preprocessor message echoes the source line from
the file it names, which the batch never wrote.

Not covered: argument-dependent lookup from a header template on a candidate's own class type no
longer reaches global-scope functions declared after that template (the class's namespace is no
longer the global one); a header's warning for an instantiation two candidates share is printed
once and, with no note naming a candidate, sends the round to single checks; what the scanner
misses (build/batch_scan.py); `main.cpp`.
A build that links reads only a failed outcome, as its own failure (build/objects.py): a clean
one still compiles its object. Every step runs through `process.run_process` (own session, killed
on cancel or timeout, dies with the thread that started it), as nvcc_split.run's steps do.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import re
import shlex
import shutil
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cudice.verifier.build import nvcc_split
from cudice.verifier.build.batch_scan import Scan, clash, scan_code
from cudice.verifier.build.cabi import shim
from cudice.verifier.build.compile import BuildResult, build_module, cabi_module, module_slim_blocker
from cudice.verifier.build.generated import CUDA_CU, GeneratedModule
from cudice.verifier.build.headers import WORD, ensure_overlay, full_header_names
from cudice.verifier.build.messages import NVCC
from cudice.verifier.build.objects import cache_key, read_outcome, write_outcome
from cudice.verifier.build.toolchain import Toolchain, probe_toolchain
from cudice.verifier.config import VerifyConfig
from cudice.verifier.process import CancelToken, run_process

MAX_BATCH = 16
_NS = "cudice_batch_{}"
_QUALIFIER = re.compile(r"\bcudice_batch_\d+::")
_SUMMARY = re.compile(r'^(\d+) errors? detected in the compilation of "(.*)"\.$')
_REMARK = 'Remark: The warnings can be suppressed with "-diag-suppress <warning-number>"'
_NOTE_FILE = re.compile(r"at line \d+ of (\S+)")
_HEAD_LINE = re.compile(r"^[ \t]*(?:#[ \t]*include[ \t]*<[^<>\n]+>[ \t]*|//.*(?<!\\))?$")
_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*(<[^>\n]+>|"[^"\n]+")', re.M)


@dataclass(frozen=True, slots=True, eq=False)  # one per candidate: compared and hashed by identity
class Job:
    """One candidate's slim C-ABI check: the single check's command and file, split for a batch."""

    index: int
    module: GeneratedModule  # the shimmed module the single check compiles
    flags: str
    key: str  # objects.compile_object's key of the check
    head: tuple[str, ...]  # the `#include <...>` lines of the leading block
    head_lines: int
    code: str  # the candidate's own lines after the head (lines head_lines+1 ...)
    prelude_line: int  # where the shim's fixed prelude starts in the single check's file
    tail: str  # the shim after its prelude
    tail_line: int
    scan: Scan
    source: str  # the file the single check compiles, which every message of the candidate names


@dataclass(slots=True)
class BatchReport:
    """What `prefill` did: candidates decided from batches, sent to single checks (and why), rounds."""

    decided: int = 0
    cached: int = 0
    refused: dict[str, int] = field(default_factory=dict)
    single: int = 0
    rounds: int = 0
    wall_s: float = 0.0
    how: dict[int, str] = field(default_factory=dict)  # candidate index -> "batch", "cached", "single: why"


def check_many(
    modules: Sequence[tuple[GeneratedModule, str]],
    config: VerifyConfig,
    *,
    cancel: CancelToken | None = None,
    max_batch: int = MAX_BATCH,
    report: BatchReport | None = None,
) -> list[BuildResult]:
    """`build_module(module, path, config, link=False)` for each (module, document path), in order:
    the same results, with the slim checks of the C-ABI `cuda.cu` files run `max_batch` at a time
    in one translation unit (`prefill`; module docstring)."""
    rep = prefill([m for m, _ in modules], config, cancel=cancel, max_batch=max_batch, report=report)
    results = [build_module(m, path, config, link=False, cancel=cancel) for m, path in modules]
    # a check a batch decided in this call was compiled now, not served from an earlier one
    return [
        dataclasses.replace(r, cached=False) if rep.how.get(i) == "batch" else r
        for i, r in enumerate(results)
    ]


def prefill(
    modules: Sequence[GeneratedModule],
    config: VerifyConfig,
    *,
    cancel: CancelToken | None = None,
    max_batch: int = MAX_BATCH,
    report: BatchReport | None = None,
) -> BatchReport:
    """Write the slim check outcome of every module a batch can decide into the object cache."""
    if max_batch < 1:
        raise ValueError(f"max_batch={max_batch} must be >= 1; use {MAX_BATCH} (or 1 for no batching).")
    rep = report if report is not None else BatchReport()
    t0 = time.perf_counter()
    tc = probe_toolchain(config.cache_dir, config.arch_list_env, cancel=cancel)
    overlay = ensure_overlay(config.cache_dir, tc.cflags)
    standins = shlex.quote(str(overlay.standins))
    jobs: list[Job] = []
    seen: set[str] = set()
    for i, m in enumerate(modules):
        job, why = _job(i, m, config, tc, f"-I{shlex.quote(str(overlay.device))}", standins)
        if job is None:
            _refuse(rep, i, why or "")
            continue
        if job.key in seen:  # its check is the earlier candidate's: read from the cache after
            rep.how[i] = "duplicate"
            continue
        if read_outcome(_dir(config, job)) is not None:
            rep.cached += 1
            rep.how[i] = "cached"
            continue
        seen.add(job.key)
        jobs.append(job)
    groups: dict[tuple[str, ...], list[Job]] = {}  # one shared prefix per `#include` list
    for job in jobs:
        groups.setdefault(job.head, []).append(job)
    probe_flags = f"{tc.cuda_cflags} -Xcompiler -idirafter,{standins}"
    for group in groups.values():
        if len(group) == 1:  # nothing to share a pass with: the single check
            rep.single += 1
            rep.how[group[0].index] = "single: alone"
            continue
        names = full_header_names(overlay, tc.nvcc, probe_flags, True, _includes(group[0]), cancel=cancel)
        spelled = _prelude_words(config, tc, group[0], cancel)
        pending = []
        for job in group:
            why = (
                "header lists unavailable"
                if names is None or spelled is None
                else clash(job.scan, job.tail, names, spelled)
            )
            if why is None:
                pending.append(job)
            else:
                _refuse(rep, job.index, why)
        while pending and not (cancel is not None and cancel.is_set()):
            batch: list[Job] = []
            later: list[Job] = []
            # one left over would be checked alone: leave two for the next batch instead
            size = max_batch - 1 if len(pending) == max_batch + 1 and max_batch > 2 else max_batch
            for job in pending:  # one module name per batch: the shim's `PyInit_<name>` is extern "C"
                fits = len(batch) < size and all(b.module.name != job.module.name for b in batch)
                (batch if fits else later).append(job)
            if len(batch) == 1:  # nothing to share a pass with: the single check
                rep.single += 1
                rep.how[batch[0].index] = "single: alone"
                pending = later
                continue
            decided, retry = _round(batch, config, tc, cancel)
            rep.rounds += 1
            for job, (ok, output) in decided.items():
                d = _dir(config, job)
                with open(d / "lock", "w") as lock:
                    fcntl.flock(lock, fcntl.LOCK_EX)  # as objects.compile_object writes it
                    write_outcome(d, ok, output)
                rep.how[job.index] = "batch"
            rep.decided += len(decided)
            if not decided and len(retry) == len(batch):  # no progress: the single checks decide
                retry = []
            for job in batch:
                if job not in decided and job not in retry:
                    rep.single += 1
                    rep.how[job.index] = "single: the batch could not decide"
            pending = retry + later
    rep.wall_s += time.perf_counter() - t0
    return rep


def _refuse(rep: BatchReport, i: int, why: str) -> None:
    rep.refused[why] = rep.refused.get(why, 0) + 1
    rep.how[i] = f"single: {why}"


# -- preparing a candidate ---------------------------------------------------------------------


def _dir(config: VerifyConfig, job: Job) -> Path:
    d = config.cache_dir / "objects" / job.key[:32]
    d.mkdir(parents=True, exist_ok=True)
    return d


def _includes(job: Job) -> tuple[str, ...]:
    """The file's `#include`s as build/compile.py lists them for its header lists (same cache entry)."""
    text = job.module.files[0].text
    return tuple(m.group(1) for m in _INCLUDE.finditer(text))


def _job(
    i: int, module: GeneratedModule, config: VerifyConfig, tc: Toolchain, slim_dir: str, standins: str
) -> tuple[Job | None, str | None]:
    """The candidate's batch job, or None and why its check is left to `build_module`."""
    if module.binding is None or not config.cabi_binding or not module.has_cuda:
        return None, "not a C-ABI module"
    shimmed = dataclasses.replace(cabi_module(module), binding=None)
    if module_slim_blocker(shimmed, tc.cflags) is not None:
        return None, "slim headers blocked"
    cu = module.file(CUDA_CU)
    assert cu is not None
    text = shimmed.files[0].text
    _, cuda_cflags = tc.flags_for(module.name)
    flags = f"{slim_dir} {cuda_cflags} -Xcompiler -idirafter,{standins}"
    key = cache_key(tc.nvcc, flags, CUDA_CU, text, "check-only")
    lines = cu.text.split("\n")
    head_lines = _head(lines)
    if head_lines == 0:
        return None, "no leading #include block"
    code = "\n".join(lines[head_lines:])
    glue = shim(module.binding)
    prelude = _prelude()
    if not glue.startswith(prelude) or text != cu.text + "\n" + glue:
        return None, "unknown shim layout"
    prelude_line = len(lines) + 1
    tail_line = prelude_line + prelude.count("\n")
    scan, why = scan_code(code)
    if scan is None:
        return None, why
    source = str(config.cache_dir / "objects" / key[:32] / CUDA_CU)
    if '"' in source or "\\" in source:
        return None, "a cache path #line cannot name"
    head = tuple(ln.strip() for ln in lines[:head_lines] if ln.strip() and not ln.strip().startswith("//"))
    job = Job(
        i,
        shimmed,
        flags,
        key,
        head,
        head_lines,
        code,
        prelude_line,
        glue[len(prelude) :],
        tail_line,
        scan,
        source,
    )
    return job, None


def _head(lines: list[str]) -> int:
    """Lines of the leading `#include <...>` block, to its last include (0: none)."""
    last = 0
    for n, line in enumerate(lines):
        if not _HEAD_LINE.match(line):
            break
        if line.strip():
            last = n + 1
    return last


_PRELUDE: list[str] = []


def _prelude() -> str:
    """The shim's fixed part: `shim()` of no function up to its method table (every shim starts so)."""
    if not _PRELUDE:
        empty = shim(())
        _PRELUDE.append(empty[: empty.index("static PyMethodDef")])
    return _PRELUDE[0]


def _prelude_words(
    config: VerifyConfig, tc: Toolchain, job: Job, cancel: CancelToken | None
) -> frozenset[str] | None:
    """Every word of the shim's prelude and of the headers its `#include`s enter after the head (both
    of nvcc's preprocessor passes, read from `-M` lists): a candidate macro spelled there would change
    them in the single check. Cached in the build cache per command and head; None on failure."""
    prelude = _prelude()
    flags = job.flags.replace(f"TORCH_EXTENSION_NAME={job.module.name}", "TORCH_EXTENSION_NAME=cudice_probe")
    key = hashlib.sha256(json.dumps([tc.nvcc, flags, job.head, prelude]).encode()).hexdigest()[:32]
    cached = config.cache_dir / "batch" / f"prelude-{key}.txt"
    if cached.is_file():
        return frozenset(cached.read_text().split())
    work = config.cache_dir / "batch" / f"probe-{key}-{threading.get_ident()}"
    work.mkdir(parents=True, exist_ok=True)
    try:
        src = work / CUDA_CU
        src.write_text("\n".join(job.head) + "\n")
        cmd = [*shlex.split(tc.nvcc), *shlex.split(flags), "-c", str(src), "-o", str(work / "cuda.o")]
        p = nvcc_split.plan(cmd, work / "steps", key, nvcc_split.environment())
        if p is None:
            return None
        includes = "".join(ln + "\n" for ln in prelude.split("\n") if ln.startswith("#include"))
        deps: dict[str, set[str]] = {}
        for name, text in (("head", ""), ("prelude", includes)):
            probe = work / name / CUDA_CU
            probe.parent.mkdir()
            probe.write_text("\n".join(job.head) + "\n" + text)
            deps[name] = set()
            for step in (p.check_front[0], p.device[0]):
                args = shlex.split(step)
                args = [str(probe) if a == str(src) else a for a in args]
                out = work / name / "deps.d"
                args[args.index("-o") + 1] = str(out)
                rc, _, cancelled, timed_out = run_process(
                    [*args[:-2], "-M", *args[-2:]], config.compile_timeout_s, cancel, work, None, env=p.env
                )
                if rc != 0 or cancelled or timed_out:
                    return None
                deps[name] |= set(out.read_text().replace("\\\n", " ").split()[1:])
        words = set(WORD.findall(prelude))
        for f in deps["prelude"] - deps["head"] - {str(work / "prelude" / CUDA_CU)}:
            words.update(WORD.findall(Path(f).read_text(errors="replace")))
        tmp = work / "words.txt"
        tmp.write_text("\n".join(sorted(words)) + "\n")
        tmp.replace(cached)
        return frozenset(words)
    except OSError:
        return None
    finally:
        shutil.rmtree(work, ignore_errors=True)


# -- one batch ---------------------------------------------------------------------------------


def _batch_text(batch: list[Job]) -> str:
    """The translation unit of `batch` (module docstring): head, codes, shim prelude, shim tails."""
    out = list(batch[0].head)

    def section(i: int, job: Job, line: int, text: str) -> None:
        out.extend(
            [
                "#undef TORCH_EXTENSION_NAME",
                f"#define TORCH_EXTENSION_NAME {job.module.name}",
                f"namespace {_NS.format(i)} {{",
                f'#line {line} "{job.source}"',
                text,
                f'#line 1 "cudice-batch-end-{i}"',
                "}",
            ]
        )

    for i, job in enumerate(batch):
        section(i, job, job.head_lines + 1, job.code)
        out.extend(f"#undef {m}" for m in job.scan.macros)
    out += ['#line 1 "cudice-batch-prelude"', _prelude()]
    for i, job in enumerate(batch):
        section(i, job, job.tail_line, job.tail)
    return "\n".join(out) + "\n"


Step = nvcc_split.Step


def _round(
    batch: list[Job], config: VerifyConfig, tc: Toolchain, cancel: CancelToken | None
) -> tuple[dict[Job, tuple[bool, str]], list[Job]]:
    """Check `batch` in one pass: (outcome and output of each decided job, jobs for the next batch);
    the others get the single check."""
    text = _batch_text(batch)
    key = hashlib.sha256(text.encode()).hexdigest()
    d = config.cache_dir / "batch" / key[:32]
    d.mkdir(parents=True, exist_ok=True)
    try:
        src = d / CUDA_CU
        src.write_text(text)
        cmd = [*shlex.split(tc.nvcc), *shlex.split(batch[0].flags), "-c", str(src), "-o", str(d / "cuda.o")]
        p = nvcc_split.plan(cmd, d / "steps", key, nvcc_split.environment(), config.cache_dir)
        if p is None:
            return {}, []
        front, device = _chains(p, config.compile_timeout_s, cancel, d)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    if any(s[2] or s[3] for s in (*front, *device)):
        return {}, []  # cancelled or out of time: the single checks meet the same
    return _attribute(batch, front, device, str(src))


def _chains(
    p: nvcc_split.Plan, timeout_s: float, cancel: CancelToken | None, cwd: Path
) -> tuple[list[Step], list[Step]]:
    """nvcc_split.run's check (host front end beside the device chain, the device chain stopped when
    the host front end fails), each chain's steps' results kept apart."""
    front, device = nvcc_split.run_chains(
        p, p.check_front, time.monotonic() + timeout_s, cancel, cwd, preprocess_cached=True
    )
    if front[-1][0] != 0:
        device = []  # nvcc would not have started it
    return front, device


@dataclass(slots=True)
class _Blocks:
    """One front end's output cut into messages per job."""

    own: dict[int, list[tuple[str, str]]] = field(default_factory=dict)  # job -> (severity, text), in order
    errors: dict[int, int] = field(default_factory=dict)
    foreign: set[int] = field(default_factory=set)  # jobs a message outside their lines names
    unknown: bool = False  # a message or line that names no job, or does not parse
    remark: bool = False


def _blocks(output: str, by_source: dict[str, int], batch_source: str) -> _Blocks:
    """Cut EDG output into messages (header line to the next header, summary or remark), each given
    to the job whose file it is in; one elsewhere marks the jobs its instantiation notes name."""
    res = _Blocks()
    raw: list[tuple[re.Match[str], list[str]]] = []
    summary = 0
    lines = output.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    current: list[str] | None = None
    for line in lines:
        m = NVCC.match(line)
        s = _SUMMARY.match(line)
        if m is not None:
            current = [line]
            raw.append((m, current))
        elif s is not None and s.group(2) == batch_source:
            summary += int(s.group(1))
            current = None
        elif line == _REMARK:
            res.remark = True
            current = None
        elif current is not None:
            current.append(line)
        elif line:
            res.unknown = True
    for m, block in raw:
        owner = by_source.get(m.group("file"))
        if owner is None:
            named = {by_source[f] for f in _NOTE_FILE.findall("\n".join(block)) if f in by_source}
            res.foreign |= named
            res.unknown |= not named
            continue
        sev = m.group("sev")
        res.unknown |= sev == "catastrophic error"
        res.own.setdefault(owner, []).append((sev, _QUALIFIER.sub("", "\n".join(block)) + "\n"))
        if sev == "error":
            res.errors[owner] = res.errors.get(owner, 0) + 1
    res.unknown |= summary != sum(1 for m, _ in raw if m.group("sev") in ("error", "catastrophic error"))
    return res


def _attribute(
    batch: list[Job], front: list[Step], device: list[Step], batch_source: str
) -> tuple[dict[Job, tuple[bool, str]], list[Job]]:
    """Each job's outcome and output as its single check would print them, where the pass shows
    them (module docstring); the jobs to batch again."""
    by_source = {job.source: i for i, job in enumerate(batch)}

    def others(out: set[int]) -> list[Job]:
        return [job for i, job in enumerate(batch) if i not in out]

    printed = front[0][1] + (device[0][1] if device else "")
    if printed.strip():  # a preprocessor's message: its source line is read from the file it names
        named = {i for src, i in by_source.items() if src in printed}
        return ({}, others(named)) if named else ({}, [])
    if len(front) < 2:
        return {}, []
    host = _blocks(front[1][1], by_source, batch_source)
    if host.unknown:
        return {}, []
    if host.foreign:
        return {}, others(host.foreign)
    if front[1][0] != 0:  # the host front end failed: cicc never ran
        failed = set(host.errors)
        return {batch[i]: (False, _text(host, i, batch[i])) for i in failed}, others(failed)
    if len(device) < 2:
        return {}, []
    dev = _blocks(device[1][1], by_source, batch_source)
    if dev.unknown:
        return {}, []
    if dev.foreign:
        return {}, others(dev.foreign)
    if device[1][0] != 0:
        failed = set(dev.errors)
        decided = {batch[i]: (False, _text(host, i, batch[i]) + _text(dev, i, batch[i])) for i in failed}
        return decided, others(failed)
    if len(device) != 4 or any(rc != 0 or out for rc, out, _, _ in device[2:]):
        return {}, []  # ptxas or fatbinary spoke: of the whole unit's code
    return {job: (True, _text(host, i, job) + _text(dev, i, job)) for i, job in enumerate(batch)}, []


def _text(blocks: _Blocks, i: int, job: Job) -> str:
    """What the step would have printed for job `i` alone: its messages, EDG's remark after the
    first warning of the unit (where the batch's step printed it after its own first one), the
    error count."""
    out = ""
    remark = blocks.remark
    for sev, text in blocks.own.get(i, []):
        out += text
        if remark and sev == "warning":
            out += _REMARK + "\n\n"
            remark = False
    n = blocks.errors.get(i, 0)
    if n:
        out += f'{n} error{"s" if n > 1 else ""} detected in the compilation of "{job.source}".\n'
    return out
