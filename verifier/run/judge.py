"""The judge: `python -m cudice.verifier.run.judge --result-fd FD [--cache-dir DIR] [--no-timing]`,
job on stdin.

The process that holds the verdict. It never executes the candidate's code: two runner
processes (run/runner_link.py → run/runner.py, inside the OS boundary of run/boundary.py) serve `ModelNew`
and, for timing under identical conditions, the reference's `Model`. The judge keeps the
reference, the inputs and their secret seeds, the comparison, the clock and the verdict, and
writes the result (a dict of `VerifyResult` fields) to `FD`, a pipe the parent created.
The runners start while the job is still on its way (a warm spare for the persistent runner).

Phases: 1. torch, precision pinned (no TF32), the reference built after a secret seed;
2. the runners load their models after the same seed (their `load_inline` builds here, through
the cache); 3. correctness: per trial a fresh secret seed and one input distribution
(run/inputs.py), the reference run here, the candidate's outputs fetched and compared (run/tolerance.py),
in-runner observations, one randomly chosen trial profiled; then a repeated call (determinism),
constancy across trials, guards; 4. timing (`_timing`): the reference's time per call by CUDA events in
the judge (as an in-process harness measures it; the reference is trusted code), the candidate's
as that time plus the difference of the two runners' per-call times by the judge's clock. Each
call is one binary message of a stream, timed from the message to its answer: it runs on a fresh
input set staged sealed before the clock (run/seal.py) and unsealed inside it, and its answer must
carry a keyed digest of its outputs (run/witness.py), checked against the reference's, so calls can
neither overlap nor end after their answer; two outputs of each repetition are compared in full
afterwards. Both runners do
the same work around each call (round trip, unsealing, digest), so it cancels in the difference.
Timed work runs alone on the GPU (run/gpu_lease.py) once a probe finds no other process's work queued
on it; threads are counted from /proc outside the runners.

What the judge still trusts from the candidate's process: nothing for a verdict of `correct` or
for a time. Profiler records, guard reports and in-runner observations can add rejections only;
they come from the candidate's process and can be forged there (docs/anticheat.md).
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import os
import secrets
import select
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cudice.verifier.run import channel
from cudice.verifier.run.boundary import readable_by_runners
from cudice.verifier.run.gpu_lease import GpuLease, gpu_key
from cudice.verifier.run.judging import (
    Stop,
    call_or_stop,
    crash_result,
    diag,
    exec_module,
    record_timing,
    write_result,
)
from cudice.verifier.run.runner_link import RunnerLink, RunnerTimeout, runner_env
from cudice.verifier.source.result import Diagnostic, Location, Severity, Stage, Verdict

RUNNER_VERDICTS = {"runtime_error", "compile_error", "incorrect"}  # anything else a runner claims is ignored
NUM_PROFILED_TRIALS = 1  # plus one random timed round: each profiled call costs a profiler session
MIN_REPETITIONS = 5
TIMING_BUDGET_S = 20.0  # past this, and past MIN_REPETITIONS, a timing stops repeating
TRACE = bool(os.environ.get("CUDICE_TIMING_TRACE"))  # runners report where timed calls spend time
WARMUP_CHUNK = 16  # timed calls per warm-up stream
SPIN_S = 0.05  # how long the judge and a runner poll for the next message while calls are timed
GPU_IDLE_WAIT_S = 5.0  # how long timed calls wait for work of other processes to leave the GPU
_rng = secrets.SystemRandom()


class Session:
    """The runners of one job: started at once (the reference's lazily without timing), closed with
    the judge."""

    def __init__(
        self, cache_dir: Path, work: Path, *, sandboxed: bool = True, with_reference: bool = True
    ) -> None:
        self.cache_dir, self.work, self.sandboxed = cache_dir, work, sandboxed
        cache_dir.mkdir(
            parents=True, exist_ok=True
        )  # the boundary binds only paths that exist (run/boundary.py)
        self._uid = (
            2_000_000_000 + (os.getpid() % 10_000_000) * 2
        )  # two uids per judge, unique among live judges
        self.cand = self._start("candidate", self._uid)
        self._ref = self._start("reference", self._uid + 1) if with_reference else None

    def _start(self, role: str, uid: int) -> RunnerLink:
        return RunnerLink(
            role,
            cache_dir=self.cache_dir,
            log_dir=self.work,
            uid=uid,
            env=runner_env(),
            sandboxed=self.sandboxed,
        )

    @property
    def ref(self) -> RunnerLink:
        """The reference's runner (started on first use when the session began without it)."""
        if self._ref is None:
            self._ref = self._start("reference", self._uid + 1)
        return self._ref

    def links(self) -> list[RunnerLink]:
        return [link for link in (self.cand, self._ref) if link is not None]

    def close(self) -> None:
        for link in self.links():
            link.close()


def judge(job: dict[str, Any], session: Session) -> dict[str, Any]:
    """Run one verification job; returns VerifyResult fields as a dict (never raises for bad code)."""
    walls: dict[str, float] = {}
    out: dict[str, Any] = {"stage_wall_s": walls}
    diags: list[Diagnostic] = []
    try:
        _Judge(job, session, out, diags, walls).run()
    except Stop as stop:
        out.update(verdict=stop.verdict.value, stage=stop.stage.value, error=stop.error)
        diags += stop.diagnostics
    out["diagnostics"] = [d.to_dict() for d in diags]
    return out


class _Judge:
    def __init__(
        self,
        job: dict[str, Any],
        session: Session,
        out: dict[str, Any],
        diags: list[Diagnostic],
        walls: dict[str, float],
    ) -> None:
        from cudice.verifier.config import VerifyConfig
        from cudice.verifier.source.document import parse_document

        self.job, self.session, self.out, self.diags, self.walls = job, session, out, diags, walls
        cfg = dict(job["config"])
        cfg["cache_dir"], cfg["arch_list"] = Path(cfg["cache_dir"]), tuple(cfg["arch_list"])
        self.config = VerifyConfig(**cfg)
        self.device = str(job.get("device", "cuda"))
        self.cand_path, self.ref_path = str(job["candidate_path"]), str(job["reference_path"])
        self.ref_source = str(job["reference_source"])
        if self.ref_path == self.cand_path and self.ref_source == job["candidate_source"]:
            # a self-contained candidate is its own reference: only its reference part runs here (and in
            # the reference's runner); its load_inline and ModelNew run in the candidate's runner alone
            from cudice.verifier.source.reference import reference_only_source

            self.ref_source = reference_only_source(self.ref_source)
        self.doc = parse_document(job["candidate_source"], self.cand_path)
        self.ref_doc = parse_document(job["reference_source"], self.ref_path)
        self.where = (
            self.doc.index.location(self.doc.model_new.span, self.cand_path)
            if self.doc.model_new
            else Location(self.cand_path, 1, 1)
        )
        self.lenient = self.config.static_policy == "lenient"
        self.lease: GpuLease | None = None
        self._lease_depth = 0  # shared holds nest; an exclusive hold makes them no-ops
        self.ref_call_s = 0.0  # the reference's time per call, measured by the judge in correctness
        self.flush_mib = 0
        self._flush: Any = None  # the judge's own L2-flush buffer (cold policy)
        self._probe_solo_s = 0.0  # the idle GPU's probe time (`_wait_gpu_idle`)
        self._profiled_candidate = 0  # profiler sessions the candidate's runner ran for the judge
        self._profiled_reference = 0
        self._pins: dict[int, int] = {}  # thread id -> CPU while calls are timed (`_pinned_cpus`)
        self._tiny: Any = None  # a one-element tensor: the probe's and the launch floor's kernel
        self.event_inputs: list[Any] = []  # the set the reference's event-timed calls use
        self.own_kernels: frozenset[str] = frozenset()  # kernels compiled into the candidate's libraries
        self.own_kernels_error = ""

    # -- the phases ------------------------------------------------------------------------------------
    def run(self) -> None:
        t = time.perf_counter()
        import torch

        torch.backends.cuda.matmul.allow_tf32 = False  # 1. TF32 changes fp32 results beyond tight tolerances
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
        if self.device.startswith("cuda") and not torch.cuda.is_available():
            raise Stop(
                Verdict.COMPILED,
                Stage.LOAD,
                [diag("verify.no_gpu", "No CUDA GPU in the judge.", Stage.LOAD, None, Severity.INFORMATION)],
            )
        if self.device.startswith("cuda"):
            self.out["gpu_name"] = torch.cuda.get_device_name()
            self.lease = GpuLease(gpu_key(self.device), timeout_s=self.config.timeout_s)
        self.out["versions"] = {
            "torch": torch.__version__,
            "cuda": str(torch.version.cuda),
            "python": sys.version.split()[0],
        }
        self._boundary_diagnostics()
        ref_mod = exec_module("cudice_reference", self.ref_source, self.ref_path, Stage.LOAD)
        ref_where = Location(self.ref_path, 1, 1)
        init = (
            call_or_stop(ref_mod.get_init_inputs, Stage.LOAD, ref_where)
            if hasattr(ref_mod, "get_init_inputs")
            else []
        )
        seed = secrets.randbits(63)
        torch.manual_seed(seed)
        model = call_or_stop(lambda: ref_mod.Model(*init).to(self.device).eval(), Stage.LOAD, ref_where)
        self.walls["init"] = time.perf_counter() - t
        # 2. the runners load their models after the same seed (same parameters as the reference)
        t = time.perf_counter()
        timed = not self.job.get("skip_timing")
        self._load(
            self.session.cand,
            "cudice_candidate",
            self.job["candidate_source"],
            self.cand_path,
            "ModelNew",
            init,
            seed,
            self.doc,
        )
        if timed:
            self._load(
                self.session.ref,
                "cudice_reference",
                self.ref_source,
                self.ref_path,
                "Model",
                init,
                seed,
                self.ref_doc,
            )
        self.walls["load"] = time.perf_counter() - t
        # 3. correctness
        t = time.perf_counter()
        self.out["stage"] = Stage.CORRECTNESS.value
        last_ref = self._correctness(ref_mod, model)
        self.walls["correctness"] = time.perf_counter() - t
        if not timed:
            raise Stop(Verdict.CORRECT, Stage.CORRECTNESS, [])
        # 4. timing by the judge's clock
        t = time.perf_counter()
        self.out["stage"] = Stage.TIMING.value
        self._timing(ref_mod, model, last_ref)
        self.walls["timing"] = time.perf_counter() - t
        self.out.update(verdict=Verdict.CORRECT.value, stage=Stage.TIMING.value)

    def _boundary_diagnostics(self) -> None:
        seen: set[tuple[str, str]] = set()
        for link in self.session.links():
            for m in link.missing:
                if (m.code, m.message) not in seen:
                    seen.add((m.code, m.message))
                    self.diags.append(
                        diag(m.code, f"Sandbox: {m.message}.", Stage.LOAD, None, Severity.WARNING)
                    )

    def _add_wall(self, name: str, t0: float) -> None:
        """Add the time since `t0` to the sub-phase `name` (summed over calls; stage_wall_s reports it)."""
        self.walls[name] = self.walls.get(name, 0.0) + time.perf_counter() - t0

    def _load(
        self, link: RunnerLink, module: str, source: str, path: str, cls: str, init: Any, seed: int, doc: Any
    ) -> None:
        t0 = time.perf_counter()
        with self._talking(link, Stage.LOAD):
            if not link.ready:
                link.wait_ready()
        self._add_wall("load.wait_runner", t0)
        tree, blobs = channel.encode(list(init))
        self._ask(
            link,
            {
                "op": "load",
                "module": module,
                "source": source,
                "path": path,
                "cls": cls,
                "init": tree,
                "seed": seed,
                "device": self.device,
                "line": self.where.line if cls == "ModelNew" else 1,
            },
            Stage.LOAD,
            blobs,
            on_build=lambda req: self._build(req, doc, path),
        )

    def _build(self, req: dict[str, Any], doc: Any, path: str) -> dict[str, Any]:
        """A runner's `load_inline`: built here, so only the judge writes the cache."""
        from cudice.verifier.build.compile import build_module
        from cudice.verifier.build.generated import from_values

        funcs = req.get("functions")
        module = from_values(
            str(req["name"]),
            list(req["cpp"]),
            list(req["cuda"]) or None,
            list(funcs) if funcs is not None else None,
            doc,
        )
        # a runner that could not import the binding without pybind11 (build/cabi.py) asks for pybind11's
        config = self.config.with_(cabi_binding=False) if req.get("pybind") else self.config
        result = build_module(module, path, config, link=True)
        self.diags.extend(d for d in result.diagnostics if d.severity is not Severity.ERROR)
        if not result.ok or result.library is None:
            return {
                "ok": False,
                "diagnostics": [d.to_dict() for d in result.diagnostics],
                "error": result.output[-4000:],
            }
        if self.device.startswith("cuda"):  # which kernels are the candidate's: read from the built library
            from cudice.verifier.build.kernel_symbols import KernelSymbolsError, own_kernels

            try:
                self.own_kernels |= own_kernels(Path(result.library))
            except KernelSymbolsError as exc:
                self.own_kernels_error = str(exc)
        if self.session.sandboxed:
            readable_by_runners(self.config.cache_dir, result.library)
        return {"ok": True, "library": str(result.library), "cabi": result.binding is not None}

    def _correctness(self, ref_mod: Any, model: Any) -> Any:
        import torch
        from cudice.verifier.run import dynamic_checks as dyn
        from cudice.verifier.run.inputs import DISTRIBUTIONS, InputsError, make_inputs, secret_seed
        from cudice.verifier.run.tolerance import compare_outputs

        n = self.config.num_trials
        profiled = set(_rng.sample(range(n), k=min(NUM_PROFILED_TRIALS, n)))
        ref_trials: list[Any] = []
        cand_trials: list[Any] = []
        found: list[Diagnostic] = []
        max_abs = max_rel = 0.0
        skipped: list[str] = []
        get_inputs = getattr(ref_mod, "get_inputs", None)
        if get_inputs is None:
            raise Stop(
                Verdict.RUNTIME_ERROR,
                Stage.LOAD,
                [
                    diag(
                        "runtime.exception",
                        "The reference defines no get_inputs().",
                        Stage.LOAD,
                        Location(self.ref_path, 1, 1),
                    )
                ],
            )
        for trial in range(n):
            dist = DISTRIBUTIONS[trial % len(DISTRIBUTIONS)]
            try:
                drawn = make_inputs(get_inputs, secret_seed(), dist, self.device)
            except InputsError as exc:
                if exc.only_under_dist:  # the problem does not define this distribution (e.g. bernoulli(32x))
                    skipped.append(dist)
                    continue
                drawn = None
            # a get_inputs() that fails on any values is the reference's error, located by call_or_stop
            inputs = (
                drawn
                if drawn is not None
                else call_or_stop(
                    lambda d=dist: make_inputs(get_inputs, secret_seed(), d, self.device),
                    Stage.CORRECTNESS,
                    Location(self.ref_path, 1, 1),
                )
            )
            with torch.no_grad(), self._shared():
                args = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
                t_ref = time.perf_counter()
                ref_out = model(*args)
                if self.device.startswith("cuda"):
                    torch.cuda.synchronize()
                took = time.perf_counter() - t_ref
            self.ref_call_s = min(self.ref_call_s, took) if self.ref_call_s else took
            if dist != "as_given" and not _finite(ref_out):
                skipped.append(dist)
                continue
            self._send_inputs(self.session.cand, inputs)
            cand_out = self._call_and_fetch(ref_out, count_threads=bool(ref_trials))
            self._stop_on_errors(dyn.check_outputs_plain(cand_out, ref_out, self.where), Stage.CORRECTNESS)
            cmp = compare_outputs(
                ref_out, cand_out, self.config.atol, self.config.rtol, precision=self.config.precision
            )
            max_abs, max_rel = max(max_abs, cmp.max_abs_err), max(max_rel, cmp.max_rel_err)
            if not cmp.ok:
                self.out.update(
                    max_abs_err=max_abs, max_rel_err=max_rel, num_correct_trials=len(ref_trials), num_trials=n
                )
                # the more specific finding first (all zeros, one value), when there is one
                specific = [
                    d
                    for d in dyn.check_not_constant([cand_out], [ref_out], self.where)
                    if d.severity is Severity.ERROR
                ]
                raise Stop(
                    Verdict.INCORRECT,
                    Stage.CORRECTNESS,
                    [
                        *specific,
                        diag(
                            "correctness.mismatch",
                            f"Trial {trial + 1}/{n} ({dist} inputs): {cmp.why}",
                            Stage.CORRECTNESS,
                            self.where,
                        ),
                    ],
                )
            ref_trials.append(ref_out)
            cand_trials.append(cand_out)
            if trial in profiled:
                found += self._profile()
        again = self._call_and_fetch(ref_trials[-1], count_threads=True)  # the last inputs, once more
        found += dyn.check_deterministic(
            cand_trials[-1], again, self.config.atol, self.config.rtol, self.where
        )
        found += dyn.check_not_constant(cand_trials, ref_trials, self.where)
        found += self._guards()
        if skipped:
            self.diags.append(
                diag(
                    "correctness.distribution_skipped",
                    f"Input distribution(s) {', '.join(skipped)} "
                    "skipped: the reference's own output is not finite on them, or its get_inputs() "
                    "does not accept such values.",
                    Stage.CORRECTNESS,
                    self.where,
                    Severity.INFORMATION,
                )
            )
        self.out.update(
            max_abs_err=max_abs,
            max_rel_err=max_rel,
            num_correct_trials=len(ref_trials),
            num_trials=len(ref_trials),
        )
        self._stop_on_errors(found, Stage.CORRECTNESS)
        return ref_trials[-1]

    def _timing(self, ref_mod: Any, model: Any, last_ref: Any) -> None:
        """The reference's time by CUDA events here; the candidate's as the reference's plus the
        difference of the two runners' per-call times by the judge's clock.

        The reference is trusted code and the judge its process, so its time per call is measured
        as an in-process CUDA-event harness does (`_event_times`). The candidate's time cannot come
        from its own process, so each repetition stages fresh sealed input sets in both runners
        (run/seal.py) and then, holding the GPU's lease exclusively, streams each runner its calls one
        at a time (`_stream`), in halves ordered A B B A, each half on an idle GPU with the other
        runner stopped (`_wait_gpu_idle`, `_paused`). A call's seal key arrives with its message
        and its reply must carry the keyed digest of the outputs (run/witness.py), so no call can start
        before its message or end after its reply: calls cannot overlap or be deferred, whatever
        the runner's Python does, and a call's time is round trip + unsealing + the forward + the
        digest, in sequence. Within a half nothing else touches the GPU (no probe of the judge's,
        no other runner), so no call pays a switch between GPU contexts. Both runners do the same
        work around the forward, pinned to their own cores (`_pinned_cpus`), so the difference of
        their calls' lower quartiles is the difference of the two forwards, and the candidate's
        time is the reference's event time plus that difference. Two outputs per repetition,
        chosen afterwards, are compared in full.
        """
        from cudice.verifier.run.timing import from_samples, tensor_bytes

        cfg = self.config
        cuda = self.device.startswith("cuda")
        self.flush_mib = cfg.l2_flush_mib if cfg.l2_policy == "cold" and cuda else 0
        links = (self.session.ref, self.session.cand)
        # 1. warm-up by time on one set, then a rough per-call time to size the batches
        t0 = time.perf_counter()
        warm = self._draw_set(ref_mod)
        for link in links:
            self._stage(link, [warm], sealed=False)
        self._even_profiles()  # the correctness phase profiled the candidate's runner
        per_call_s = []
        for link in links:  # short warm-ups under-report: https://github.com/triton-lang/triton/issues/2306
            deadline = time.perf_counter() + cfg.timing_warmup_ms / 1000.0
            while True:
                n = WARMUP_CHUNK
                times, _ = self._stream(link, [0] * n, [secrets.randbits(64) for _ in range(n)], None)
                if time.perf_counter() >= deadline:
                    break
            per_call_s.append(_q25(times))
        per_request = max(per_call_s)
        set_bytes = tensor_bytes(warm) + tensor_bytes(last_ref)
        fit = max(1, self._stage_budget_bytes() // max(set_bytes, 1))
        calls = int(min(max(3, math.ceil(cfg.timing_batch_ms / 1000.0 / max(per_request, 1e-7))), fit, 4096))
        self._probe_solo_s = self._probe_s(best_of=10)
        self._pins = self._pinned_cpus()  # once: the runners and the GPU stay the same
        self.event_inputs = [x.clone() if _is_tensor(x) else x for x in warm]
        self._event_times(model, self.event_inputs, 3)  # the harness's own warm-up
        with self._exclusive():  # one launch of a tiny kernel, alone on the GPU like the timed calls
            self._wait_gpu_idle([])
            floor_ms = statistics.median(self._event_times(None, [], 20))
        self._add_wall("timing.warmup", t0)
        # 2. repetitions
        t_rounds = time.perf_counter()
        ref_events: list[float] = []
        requests: dict[str, list[float]] = {"reference": [], "candidate": []}  # every timed request, s
        per_call: dict[str, list[list[float]]] = {"reference": [], "candidate": []}  # per repetition, s
        staging: dict[str, list[float]] = {"reference": [], "candidate": []}
        busy: list[str] = []
        found: list[Diagnostic] = []
        profiled = _rng.randrange(cfg.timing_num_trials)
        events_per_rep = max(5, 100 // cfg.timing_num_trials)
        for rep in range(cfg.timing_num_trials):
            found += self._repetition(
                ref_mod,
                model,
                calls,
                per_call,
                requests,
                staging,
                ref_events,
                events_per_rep,
                busy,
                rep == profiled,
            )
            if (
                rep >= MIN_REPETITIONS - 1
                and time.perf_counter() - t_rounds > TIMING_BUDGET_S
                and rep >= profiled
            ):
                break  # large inputs: drawing and moving the sets dominates; five repetitions give a median
        self._add_wall("timing.rounds", t_rounds)
        if TRACE:  # the runners' own account of their timed calls: reported, never used
            for link in links:
                said, _ = self._ask(link, {"op": "trace"}, Stage.TIMING)
                for name, us in (said.get("trace") or {}).items():
                    if isinstance(us, (int, float)):
                        self.walls[f"timing.trace_{link.role}_{name}_us"] = float(us)
        found += self._guards()
        found += self._thread_growth()
        self._stop_on_errors(found, Stage.TIMING)
        for role, times in staging.items():  # reported only: sealed sets give nothing to precompute
            self.walls[f"timing.staging_{role}_median"] = statistics.median(times)
        for role, xs in requests.items():
            xs = sorted(xs)
            self.walls[f"timing.request_{role}_ms"] = statistics.median(xs) * 1e3
            self.walls[f"timing.request_{role}_min_ms"] = xs[0] * 1e3
            self.walls[f"timing.request_{role}_q10_ms"] = xs[len(xs) // 10] * 1e3
            self.walls[f"timing.request_{role}_q25_ms"] = _q25(xs) * 1e3
        self.walls["timing.launch_floor_ms"] = floor_ms
        ref_ms = statistics.median(ref_events)
        # the difference of the two runners' lower quartiles per half repetition: what a call costs
        # beyond the forward is the same in both runners, and its noise (a wake-up, an interrupt)
        # only ever adds, so the lower quartile shifts by the forward's difference with less spread
        # than the median (the median's difference is reported beside it); a repetition's two
        # halves, on swapped cores, averaged
        pairs = list(zip(per_call["candidate"], per_call["reference"], strict=True))
        by_half = [_q25(c) - _q25(r) for c, r in pairs]
        deltas = [sum(by_half[k : k + 2]) / len(by_half[k : k + 2]) for k in range(0, len(by_half), 2)]
        cand_ms = [ref_ms + d * 1e3 for d in deltas]
        self.walls["timing.candidate_by_medians_ms"] = ref_ms + 1e3 * statistics.median(
            statistics.median(c) - statistics.median(r) for c, r in pairs
        )
        self.walls["timing.candidate_by_q25_ms"] = statistics.median(cand_ms)
        unresolved = list(dict.fromkeys(busy))
        cand_med = statistics.median(cand_ms)
        if cand_med < 0.5 * floor_ms:
            unresolved.append(
                f"the candidate's time per call ({cand_med:.4f} ms: the reference's {ref_ms:.4f} ms plus "
                f"the difference of the two runners' calls) is below half the cost of launching one "
                f"kernel ({floor_ms:.4f} ms): the runner's own loop was bypassed, or the difference is noise"
            )
        spread = interval_too_wide(cand_ms, ref_ms)
        if spread is not None:
            self.walls["timing.candidate_ci95_ms"] = spread[0]
            if spread[1]:
                unresolved.append(spread[1])
        if not unresolved and (bias := bias_too_large(cand_med, ref_ms, cfg.timing_runner_bias_us / 1e3)):
            unresolved.append(bias)
        cand_ms = [max(x, 1e-6) for x in cand_ms]
        self.out["l2_policy"] = cfg.l2_policy
        self.walls["timing.lease_wait"] = self.lease.waited_s if self.lease is not None else 0.0
        cmp_t = from_samples(
            ref_events,
            cand_ms,
            input_bytes=tensor_bytes(warm),
            output_bytes=tensor_bytes(last_ref),
            suspicious_speedup=cfg.suspicious_speedup,
            peak_bandwidth_gb_s=cfg.peak_bandwidth_gb_s,
            extra_reasons=unresolved,
        )
        clock = "CUDA events" if cuda else "the host clock"
        record_timing(
            cmp_t,
            self.where,
            self.out,
            self.diags,
            f"; L2 {cfg.l2_policy}; the reference timed by {clock} in the judge, the candidate as that "
            f"plus the difference of the two runners' times per call, {calls} calls on fresh inputs "
            f"per runner and repetition, {len(deltas)} repetitions",
        )

    def _stage_budget_bytes(self) -> int:
        """Bytes of input and output sets one repetition may stage: the configured bound, at most an
        eighth of the GPU memory free now (two runners and the judge hold copies)."""
        budget = self.config.timing_stage_mib << 20
        if self.device.startswith("cuda"):
            import torch

            free, _ = torch.cuda.mem_get_info()
            budget = min(budget, int(free) // 8)
        return max(int(budget), 1)

    def _event_times(self, model: Any, inputs: list[Any], calls: int) -> list[float]:
        """Per-call ms of `model(*inputs)` as an in-process CUDA-event harness measures it (start and
        end events around each call, then a synchronisation; the L2 flushed first under the cold
        policy); the host clock without CUDA. `model=None` times one tiny kernel (a launch's cost)."""
        import torch

        cuda = self.device.startswith("cuda")
        if self._flush is None and self.flush_mib:
            self._flush = torch.empty(self.flush_mib << 18, dtype=torch.int32, device=self.device)
        tiny = self._tiny_tensor()
        out = []
        with torch.no_grad():
            for _ in range(calls):
                if self._flush is not None:
                    self._flush.fill_(1)
                if cuda:
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
                    start.record()
                    model(*inputs) if model is not None else tiny.add_(1.0)
                    end.record()
                    torch.cuda.synchronize()
                    out.append(float(start.elapsed_time(end)))
                else:
                    t0 = time.perf_counter()
                    model(*inputs) if model is not None else tiny.add_(1.0)
                    out.append((time.perf_counter() - t0) * 1e3)
        return out

    def _probe_s(self, best_of: int = 1) -> float:
        """Host time of one tiny kernel and a device synchronisation in the judge (best of `best_of`)."""
        import torch

        if not self.device.startswith("cuda"):
            return 0.0
        tiny = self._tiny_tensor()
        best = math.inf
        for _ in range(best_of):
            t0 = time.perf_counter()
            tiny.add_(1.0)
            torch.cuda.synchronize()
            best = min(best, time.perf_counter() - t0)
        return best

    def _tiny_tensor(self) -> Any:
        """The one-element tensor the probe and the launch floor add to (allocated once)."""
        import torch

        if self._tiny is None:
            self._tiny = torch.zeros(1, device=self.device)
        return self._tiny

    @contextlib.contextmanager
    def _paused(self, link: RunnerLink, busy: list[str]) -> Iterator[None]:
        """`link`'s runner and everything it started, stopped (SIGSTOP) for the body, then continued
        and scheduled again. The candidate's runner is stopped while the reference is timed, so its
        code cannot launch work beside the reference's calls once the GPU is found idle; the
        reference's is stopped while the candidate is timed, so that both runners come to every
        timed call the same way (just continued, nothing else of theirs running). A runner that
        cannot be stopped marks the timing unresolved."""
        from cudice.verifier.process import paused

        with paused(link.proc.pid) as ok:
            if not ok:
                busy.append(f"the {link.role}'s runner could not be paused while the other one was timed")
            yield

    def _pinned_cpus(self) -> dict[int, int]:
        """Thread id -> CPU for the timed requests: the judge's thread and each runner's main thread
        on its own physical core, near the GPU where /sys tells which NUMA node it hangs on. A
        process that shares a core's hardware threads with a spinning one, or migrates, is slower
        by tens of microseconds per request, and differently for the two runners."""
        from cudice.verifier.process import cpus_of_node, descendant_running, distinct_cpus

        prefer: set[int] | None = None
        if self.device.startswith("cuda"):
            with contextlib.suppress(Exception):
                import torch

                props = torch.cuda.get_device_properties(torch.device(self.device))
                ids = [getattr(props, f"pci_{k}_id") for k in ("domain", "bus", "device")]
                pci = f"{ids[0]:04x}:{ids[1]:02x}:{ids[2]:02x}.0"
                with open(f"/sys/bus/pci/devices/{pci}/numa_node") as f:
                    node = int(f.read().strip())
                prefer = cpus_of_node(node) if node >= 0 else None
        cpus = distinct_cpus(3, prefer)
        if len(cpus) < 3:
            return {}
        runner = "cudice.verifier.run.runner"
        pids = [descendant_running(link.proc.pid, runner) for link in self.session.links()]
        found = [p for p in pids if p is not None]
        if len(found) < len(pids):
            return {}
        return dict(zip([0, *found], cpus, strict=False))

    def _swapped_pins(self) -> dict[int, int]:
        """The timing pins with the two runners' CPUs exchanged (the judge's thread stays)."""
        runners = [tid for tid in self._pins if tid != 0]
        if len(runners) != 2:
            return {}
        a, b = runners
        return {a: self._pins[b], b: self._pins[a]}

    def _wait_gpu_idle(self, busy: list[str]) -> None:
        """Wait (bounded) until no other process's work is queued on the GPU: a kernel of another
        context (a runner's work left running after its reply) delays the judge's probe by a time
        slice. Timed work on a busy GPU would be slowed, and a candidate could slow the reference's
        calls that way; a GPU still busy after `GPU_IDLE_WAIT_S` marks the timing unresolved."""
        if not self.device.startswith("cuda"):
            return
        limit = max(10 * self._probe_solo_s, self._probe_solo_s + 500e-6)
        deadline = time.perf_counter() + GPU_IDLE_WAIT_S
        t0 = time.perf_counter()
        while True:
            took = self._probe_s()
            if took <= limit:
                break
            if time.perf_counter() > deadline:
                busy.append(
                    f"the GPU stayed busy with work of another process for {GPU_IDLE_WAIT_S:g} s before "
                    f"a timed call (a probe kernel took {took * 1e3:.2f} ms, "
                    f"alone {self._probe_solo_s * 1e3:.3f} ms)"
                )
                break
        self._add_wall("timing.idle_wait", t0)

    def _repetition(
        self,
        ref_mod: Any,
        model: Any,
        total: int,
        per_call: dict[str, list[list[float]]],
        requests: dict[str, list[float]],
        staging: dict[str, list[float]],
        ref_events: list[float],
        events: int,
        busy: list[str],
        profile: bool,
    ) -> list[Diagnostic]:
        """One repetition: fresh sealed sets; alone on an idle GPU, `events` event-timed calls of the
        reference here and the timed calls of both runners; then the digests and two full checks."""
        import torch
        from cudice.verifier.run import seal, witness
        from cudice.verifier.run.dynamic_checks import flatten_outputs
        from cudice.verifier.run.timing import tensor_bytes
        from cudice.verifier.run.tolerance import compare_outputs

        cfg = self.config
        sets: list[list[Any]] = []
        seals: list[int] = []
        keys: list[int] = []
        expected: list[list[float]] = []
        bounds: list[list[float]] = []
        num_outputs = 0
        with torch.no_grad(), self._shared():
            for _ in range(total):  # 1. fresh inputs, the reference's digests, then sealed copies
                inputs = self._draw_set(ref_mod)
                key = secrets.randbits(64)
                ref_out = flatten_outputs(
                    model(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs])
                )
                # the outputs' digests, then the inputs' as drawn (the runner digests its inputs after
                # the call: one changed in place, or returned as the output and changed, no longer matches)
                expected.append(witness.digest(ref_out + list(inputs), key, self.device).cpu().tolist())
                bounds.append(
                    [self._digest_bound(r) for r in ref_out]
                    + [witness.bound(x, 0.0, 0.0) if isinstance(x, torch.Tensor) else 0.0 for x in inputs]
                )
                num_outputs = len(ref_out)
                seal_key = secrets.randbits(63)  # below channel.NO_SEAL
                sealed = [x.contiguous().clone() if isinstance(x, torch.Tensor) else x for x in inputs]
                seal.toggle(sealed, seal_key)
                sets.append(sealed)
                seals.append(seal_key)
                keys.append(key)
            links = (self.session.ref, self.session.cand)
        encoded = channel.encode(sets)  # once, for both runners
        for link in links:  # 2. staging (its time is reported, not judged)
            staging[link.role].append(self._stage(link, sets, sealed=True, encoded=encoded))
        digests: dict[str, list[list[float]]] = {"reference": [], "candidate": []}
        from cudice.verifier.process import pinned

        # 3. the reference's event times, then each runner's calls streamed, the other runner stopped
        # and the GPU idle (nothing of the other runner's beside it), every process on its own core
        with self._exclusive(), pinned(self._pins) as took:
            # every repetition's pins took (the wall is the smallest over the repetitions)
            now = float(bool(took) and all(took.values()))
            self.walls["timing.pinned"] = min(self.walls.get("timing.pinned", 1.0), now)
            with self._paused(self.session.cand, busy):
                self._wait_gpu_idle(busy)
                ref_events += self._event_times(model, self.event_inputs, events)
            # ABBA: each runner's calls in two halves, so that a drift of the GPU's clocks during the
            # repetition weighs on both runners alike; the runners swap cores between the halves, so
            # that a slower core (interrupts, its clock) weighs on both alike too
            first, second = links if _rng.random() < 0.5 else links[::-1]
            half = max(1, total // 2)
            halves: dict[str, list[list[float]]] = {"reference": [[], []], "candidate": [[], []]}
            for h, order, part in (
                (0, (first, second), range(half)),
                (1, (second, first), range(half, total)),
            ):
                with pinned(self._swapped_pins() if h else {}):
                    for link in order:
                        if not part:
                            continue
                        with self._paused(links[1] if link is links[0] else links[0], busy):
                            self._wait_gpu_idle(busy)  # nothing left running by the other runner
                            got, call_digests = self._stream(
                                link, list(part), [keys[i] for i in part], [seals[i] for i in part]
                            )
                        halves[link.role][h] += got
                        digests[link.role] += call_digests
        for role, hs in halves.items():
            per_call[role] += [xs for xs in hs if xs]
            requests[role] += hs[0] + hs[1]
        # 4. every digest of the candidate's batches, then two outputs in full, chosen now
        for i, (digest, exp, bd) in enumerate(zip(digests["candidate"], expected, bounds, strict=True)):
            verdict = witness.check(digest, exp, bd)
            if not verdict.ok and verdict.index >= num_outputs:
                return [
                    diag(
                        "dynamic.input_mutated",
                        f"Timed call {i + 1} of {total} in one repetition changed its input "
                        f"{verdict.index - num_outputs} (its digest after the call differs from the input "
                        "the judge sent): forward must leave its inputs as they are. Write results to a "
                        "new tensor.",
                        Stage.TIMING,
                        self.where,
                    )
                ]
            if not verdict.ok:
                return [
                    diag(
                        "correctness.timed_call_digest",
                        f"Timed call {i + 1} of {total} in one repetition: the digest of output "
                        f"{verdict.index} is {verdict.excess:.3g}x beyond what the tolerance allows "
                        "when the reply arrived: the outputs were not complete (work deferred past "
                        "the call, a skipped synchronisation, lazy or cached outputs) or not correct.",
                        Stage.TIMING,
                        self.where,
                    )
                ]
        found: list[Diagnostic] = []
        for i in _rng.sample(range(total), k=min(2, total)):
            with torch.no_grad(), self._shared():
                seal.toggle(sets[i], seals[i])  # the judge's own copy, unsealed to recompute the reference
                want = model(*[x.clone() if isinstance(x, torch.Tensor) else x for x in sets[i]])
                rep, blobs = self._ask(
                    self.session.cand,
                    {"op": "kept", "index": i},
                    Stage.TIMING,
                    max_bytes=2 * tensor_bytes(want) + (1 << 20),
                )
                got = self._decode(rep, blobs)
            cmp = compare_outputs(want, got, cfg.atol, cfg.rtol, precision=cfg.precision)
            if not cmp.ok:
                return [
                    diag(
                        "correctness.timed_call_mismatch",
                        f"Timed call {i + 1} (checked afterwards, chosen at random): {cmp.why}. The kernel "
                        "must be correct on every call, not only while it is checked.",
                        Stage.TIMING,
                        self.where,
                    )
                ]
        if profile:
            found += self._profile_batch(list(range(min(2, total))))
        return found

    def _draw_set(self, ref_mod: Any) -> list[Any]:
        from cudice.verifier.run.inputs import make_inputs, secret_seed

        return list(
            call_or_stop(
                lambda: make_inputs(
                    ref_mod.get_inputs, secret_seed(), "as_given", self.device, draw_on_device=True
                ),
                Stage.TIMING,
                Location(self.ref_path, 1, 1),
            )
        )

    def _digest_bound(self, ref: Any) -> float:
        import torch
        from cudice.verifier.run import witness

        if not isinstance(ref, torch.Tensor):
            return 0.0
        if not (ref.is_floating_point() or ref.is_complex()):
            return witness.bound(ref, 0.0, 0.0)
        from cudice.verifier.run.tolerance import output_scale, rtol_floor

        # the norm check's own terms (run/tolerance.py), so the digest accepts what the comparison accepts
        return witness.bound(
            ref, self.config.atol * output_scale(ref), max(self.config.rtol, rtol_floor(ref.dtype))
        )

    def _stage(self, link: RunnerLink, sets: list[list[Any]], *, sealed: bool, encoded: Any = None) -> float:
        """Send the input sets of the next batches; returns how long the runner took (s)."""
        tree, blobs = encoded if encoded is not None else channel.encode(sets)
        t0 = time.perf_counter()
        self._ask(
            link,
            {"op": "stage", "sets": tree, "flush_mib": self.flush_mib, "sealed": sealed},
            Stage.TIMING,
            blobs,
            deadline_s=30.0 + sum(len(b) for b in blobs) / 100e6,  # moving the bytes, not the kernel
        )
        return time.perf_counter() - t0

    def _batch_request(
        self, indices: list[int], seals: list[int] | None, keys: list[int] | None = None, **flags: Any
    ) -> dict[str, Any]:
        """A `batch` request over staged sets `indices` (fresh digest keys unless given)."""
        return {
            "op": "batch",
            "sets": indices,
            "keys": keys if keys is not None else [secrets.randbits(64) for _ in indices],
            "seals": seals,
            "flush_mib": self.flush_mib,
            **flags,
        }

    def _stream(
        self, link: RunnerLink, indices: list[int], keys: list[int], seals: list[int] | None
    ) -> tuple[list[float], list[list[float]]]:
        """Timed calls on staged sets `indices`, one at a time: (seconds from each call's message to
        its digests, the digests). The next call's message leaves only once the last one's digests
        are here, so no call can start early, overlap another or finish after its reply; both ends
        poll instead of sleeping meanwhile (`SPIN_S`; on a GPU only: on a small CPU box spinning
        processes would starve each other). Outputs stay in the runner (`kept`)."""
        spin = SPIN_S if self.device.startswith("cuda") else 0.0
        limit = self._limit_s(1)
        most = 4 * 4096  # digests of one call: NUM_DIGESTS per output and input tensor, far below
        times: list[float] = []
        digests: list[list[float]] = []
        sock = link.sock
        with _no_collection(), self._talking(link, Stage.TIMING), self._shared():
            channel.send(
                sock,
                {
                    "op": "stream",
                    "count": len(indices),
                    "flush_mib": self.flush_mib,
                    "spin_s": spin,
                    "trace": TRACE and seals is not None,
                },
            )
            for j, (index, key) in enumerate(zip(indices, keys, strict=True)):
                seal = seals[j] if seals is not None else channel.NO_SEAL
                t0 = time.perf_counter()
                channel.send_call(sock, index, key, seal)
                if spin > 0:
                    channel.poll_readable(sock, spin)
                if not select.select([sock], [], [], limit)[0]:
                    raise RunnerTimeout(limit)
                values = channel.recv_digests(sock, most)
                elapsed = time.perf_counter() - t0  # the clock stops when the call's digests are here
                if values is None:  # the runner failed this call; its reasons follow
                    if not select.select([sock], [], [], limit)[0]:
                        raise RunnerTimeout(limit)
                    rep, _ = channel.recv(sock, 0)
                    self._refused(link, rep, Stage.TIMING)
                times.append(elapsed)
                digests.append(values if values is not None else [math.nan])
        return times, digests

    def _profile_batch(self, indices: list[int]) -> list[Diagnostic]:
        """The kernels of an untimed batch (the same request as a timed one, profiled)."""
        # seals None: these sets were unsealed by the timed calls
        header = self._batch_request(indices, None, profile=True)
        t0 = time.perf_counter()
        rep, _ = self._ask(self.session.cand, header, Stage.TIMING, deadline_s=self._limit_s(len(indices)))
        self._profiled_candidate += 1
        self._add_wall("profile", t0)
        self._even_profiles()
        return self._kernel_evidence(rep)

    def _even_profiles(self) -> None:
        """As many profiler sessions in the reference's runner as in the candidate's, on staged set 0.

        A profiler session leaves CUPTI's callbacks on every later kernel launch of its process
        (https://github.com/pytorch/pytorch/issues/144455), so each one the candidate's runner ran
        makes its later calls slower; the reference's runner must carry the same cost for the
        difference of their call times to be the difference of the two forwards."""
        while self._profiled_reference < self._profiled_candidate:
            header = self._batch_request([0], None, profile=True)
            self._ask(self.session.ref, header, Stage.TIMING, deadline_s=self._limit_s(1))
            self._profiled_reference += 1

    def _thread_growth(self) -> list[Diagnostic]:
        """Threads the candidate's runner gained since it was ready, beyond what the reference's gained.

        Counted from /proc, outside the runner, so the candidate cannot hide a thread it started at
        import, in `__init__` or from native code."""
        grown = {
            link.role: link.threads() - link.threads_at_ready
            for link in self.session.links()
            if link.threads_at_ready
        }
        extra = grown.get("candidate", 0) - max(grown.get("reference", 0), 0)
        if extra <= 0:
            return []
        return [
            diag(
                "dynamic.thread_spawned",
                f"The candidate's process runs {extra} more thread(s) than when it started (seen from "
                "outside the process, beyond the reference's runner): work on another thread "
                "escapes the timed call. "
                "Launch all work from forward on the calling thread.",
                Stage.TIMING,
                self.where,
            )
        ]

    def _limit_s(self, calls: int) -> float:
        """How long a request of `calls` forward calls may take before the candidate is a timeout."""
        return max(10.0, 100.0 * self.ref_call_s * calls) + 10.0 * calls * self.ref_call_s

    @contextlib.contextmanager
    def _shared(self) -> Iterator[None]:
        """Hold the GPU's lease shared (GPU work that may overlap other verifications' correctness);
        inside another hold, shared or exclusive, nothing more is taken."""
        outer = self.lease is not None and self._lease_depth == 0
        with self.lease.shared() if outer and self.lease is not None else contextlib.nullcontext():
            self._lease_depth += 1
            try:
                yield
            finally:
                self._lease_depth -= 1

    @contextlib.contextmanager
    def _exclusive(self) -> Iterator[None]:
        """Hold the GPU's lease alone: nothing else of cudice's runs on this GPU meanwhile."""
        assert self._lease_depth == 0, "an exclusive hold cannot nest in a shared one"
        with self.lease.exclusive() if self.lease is not None else contextlib.nullcontext():
            self._lease_depth += 1  # shared holds inside are no-ops
            try:
                yield
            finally:
                self._lease_depth -= 1

    # -- requests ----------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _talking(self, link: RunnerLink, stage: Stage) -> Iterator[None]:
        """A runner that dies or breaks the protocol is a crash of the candidate, never of the judge."""
        try:
            yield
        except RunnerTimeout as exc:
            raise Stop(
                Verdict.TIMEOUT,
                stage,
                [
                    diag(
                        "runtime.timeout",
                        f"The {link.role} did not answer within {exc.limit_s:.1f} s (the limit is max(10 s, "
                        f"100 x the reference's {self.ref_call_s * 1e3:.3f} ms) per call): a kernel or "
                        "forward that hangs or loops. Check loop bounds and grid-stride conditions.",
                        stage,
                        self.where,
                    )
                ],
                link.log_tail(),
            ) from None
        except (channel.ChannelError, OSError) as exc:
            rc = link.proc.poll()
            why = f"exit status {rc}" if rc is not None else "it stopped answering"
            raise Stop(
                Verdict.CRASH,
                stage,
                [
                    diag(
                        "runtime.crash",
                        f"The {link.role} process ended or broke the protocol ({why}: {exc}); see the error "
                        "text for its last output.",
                        stage,
                        self.where,
                    )
                ],
                link.log_tail(),
            ) from None

    def _ask(
        self,
        link: RunnerLink,
        header: dict[str, Any],
        stage: Stage,
        blobs: Any = (),
        *,
        max_bytes: int = 0,
        on_build: Any = None,
        deadline_s: float | None = None,
        spin_s: float = 0.0,
    ) -> tuple[dict[str, Any], list[bytearray]]:
        if deadline_s is None and on_build is None:
            deadline_s = self._limit_s(1)
        # a load holds no lease: the build it asks for may take minutes of CPU, not GPU
        lease = self._shared() if on_build is None else contextlib.nullcontext()
        with self._talking(link, stage), lease:
            rep, got = link.request(
                header, blobs, max_bytes=max_bytes, on_build=on_build, deadline_s=deadline_s, spin_s=spin_s
            )
        if not rep.get("ok"):
            self._refused(link, rep, stage)
        return rep, got

    def _refused(self, link: RunnerLink, rep: dict[str, Any], stage: Stage) -> None:
        """A runner's failure reply as the verdict it may claim (`RUNNER_VERDICTS`), else a runtime error."""
        claimed = str(rep.get("verdict", ""))
        verdict = Verdict(claimed) if claimed in RUNNER_VERDICTS else Verdict.RUNTIME_ERROR
        got_diags = [Diagnostic.from_dict(d) for d in rep.get("diagnostics", []) if isinstance(d, dict)]
        if not got_diags:
            got_diags = [
                diag(
                    "runtime.exception",
                    f"The {link.role} process reported: {rep.get('error')}",
                    stage,
                    self.where,
                )
            ]
        raise Stop(verdict, stage, got_diags, str(rep.get("error") or "")[-4000:] or None)

    def _send_inputs(self, link: RunnerLink, inputs: list[Any]) -> None:
        tree, blobs = channel.encode(inputs)
        self._ask(link, {"op": "inputs", "inputs": tree}, Stage.CORRECTNESS, blobs)

    def _call_and_fetch(self, ref_out: Any, *, count_threads: bool) -> Any:
        from cudice.verifier.run.timing import tensor_bytes

        size = tensor_bytes(ref_out)
        rep, _ = self._ask(
            self.session.cand,
            {"op": "call", "poison_bytes": 4 * size + (1 << 20), "count_threads": count_threads},
            Stage.CORRECTNESS,
        )
        found = [Diagnostic.from_dict(d) for d in rep.get("diagnostics", []) if isinstance(d, dict)]
        self._stop_on_errors(found, Stage.CORRECTNESS)
        rep, blobs = self._ask(
            self.session.cand, {"op": "fetch"}, Stage.CORRECTNESS, max_bytes=2 * size + (1 << 20)
        )
        return self._decode(rep, blobs)

    def _decode(self, rep: dict[str, Any], blobs: list[bytearray]) -> Any:
        try:
            return channel.decode(rep.get("outputs"), blobs, self.device)
        except channel.ChannelError as exc:
            raise Stop(
                Verdict.INCORRECT,
                Stage.CORRECTNESS,
                [
                    diag(
                        "dynamic.output_not_plain_tensor",
                        f"The candidate's outputs could not be read: {exc}",
                        Stage.CORRECTNESS,
                        self.where,
                    )
                ],
            ) from None

    def _profile(self) -> list[Diagnostic]:
        t0 = time.perf_counter()
        rep, _ = self._ask(self.session.cand, {"op": "profile"}, Stage.CORRECTNESS)
        self._profiled_candidate += 1
        self._add_wall("profile", t0)
        return self._kernel_evidence(rep)

    def _kernel_evidence(self, rep: dict[str, Any]) -> list[Diagnostic]:
        """What a profiled call or batch says about whose kernels did the work; it can only reject.

        The records come from the candidate's process, so they never make a verdict `correct`: a
        missing profile fails closed (the evidence is required), a present one may reject."""
        from cudice.verifier.run import dynamic_checks as dyn

        if not rep.get("supported"):
            if not self.device.startswith("cuda"):
                return []
            why = rep.get("error") or "no reason given"
            return [
                diag(
                    "dynamic.profiler_unavailable",
                    f"The profiler gave no kernel records in the candidate's process ({why}): which kernels "
                    "did the work cannot be shown, so the kernel is not counted "
                    "correct. Run where CUPTI is allowed (e.g. NVreg_RestrictProfilingToAdminUsers=0).",
                    Stage.CORRECTNESS,
                    self.where,
                )
            ]
        runs = [
            dyn.KernelRun(str(k[0]), float(k[1]), int(k[2]))
            for k in rep.get("kernels", [])
            if isinstance(k, list) and len(k) == 3
        ]
        if self.own_kernels_error:
            return [
                diag(
                    "dynamic.profiler_unavailable",
                    f"The kernels compiled into the candidate's library could not be listed "
                    f"({self.own_kernels_error}), so whose kernels did the work cannot be shown.",
                    Stage.CORRECTNESS,
                    self.where,
                )
            ]
        found = dyn.check_own_kernels_did_work(
            runs, self.own_kernels, 0.5 if self.lenient else 0.0, self.where
        )
        return found + dyn.check_streams(runs, int(rep.get("marker_stream", -1)), self.where)

    def _guards(self) -> list[Diagnostic]:
        t0 = time.perf_counter()
        rep, _ = self._ask(self.session.cand, {"op": "guards"}, Stage.CORRECTNESS)
        self._add_wall("guards", t0)
        return [Diagnostic.from_dict(d) for d in rep.get("diagnostics", []) if isinstance(d, dict)]

    def _stop_on_errors(self, found: list[Diagnostic], stage: Stage) -> None:
        errors = [d for d in found if d.severity is Severity.ERROR]
        self.diags.extend(d for d in found if d.severity is not Severity.ERROR)
        if errors:
            raise Stop(Verdict.INCORRECT, stage, errors)


def promised_fidelity(ref_ms: float) -> float:
    """The relative error the clock promises for a candidate's time: +-10 % where the reference
    takes 50 us or more per call, +-25 % below."""
    return 0.10 if ref_ms >= 0.05 else 0.25


def interval_too_wide(cand_ms: list[float], ref_ms: float) -> tuple[float, str] | None:
    """(half-width of the 95 % interval of the candidate's mean time per call over repetitions, ms;
    why that is too wide to count, or ""), or None with fewer than 3 repetitions. The bound is the
    fidelity the clock promises: +-10 % where the reference takes 50 us or more, +-25 % below."""
    if len(cand_ms) < 3:
        return None
    mid = statistics.median(cand_ms)
    half = 2.0 * statistics.stdev(cand_ms) / math.sqrt(len(cand_ms))
    allowed = promised_fidelity(ref_ms)
    if half <= allowed * max(mid, 1e-9):
        return half, ""
    return half, (
        f"the candidate's time per call is {mid:.4f} +- {half:.4f} ms (95 %, {len(cand_ms)} "
        f"repetitions), wider than the +-{allowed:.0%} this clock promises at this size: the two "
        "runners' call times differ by less than their noise"
    )


def bias_too_large(cand_ms: float, ref_ms: float, bias_ms: float) -> str:
    """Why a candidate time is too short for the clock to resolve, or "".

    The candidate's time is the reference's plus the difference of two runner processes' calls,
    and two processes differ by a bias that repeats in every call (memory placement, what each
    loaded): the difference of their means converges to it, so the 95 % interval does not see it.
    `bias_ms` bounds it (measured; VerifyConfig.timing_runner_bias_us); when that bound is beyond
    the fidelity promised at this size (+-10 % of the candidate's time where the reference takes
    50 us or more, +-25 % below), the time is unresolved."""
    allowed = promised_fidelity(ref_ms)
    if bias_ms <= allowed * max(cand_ms, 0.0):
        return ""
    return (
        f"the candidate's time per call ({cand_ms:.4f} ms) is too short for this clock: two runner "
        f"processes' calls can differ by up to {bias_ms * 1e3:.0f} us for reasons that are not the "
        f"kernel's, beyond the +-{allowed:.0%} promised at this size"
    )


@contextlib.contextmanager
def _no_collection() -> Iterator[None]:
    """No garbage collection pause of the judge's inside a call's clock; the collector as it was after."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def _q25(xs: list[float]) -> float:
    """The lower quartile of `xs` (linear between order statistics, as run/timing.py's quartiles)."""
    return statistics.quantiles(xs, n=4, method="inclusive")[0] if len(xs) > 1 else xs[0]


def _is_tensor(x: Any) -> bool:
    import torch

    return isinstance(x, torch.Tensor)


def _finite(out: Any) -> bool:
    import torch
    from cudice.verifier.run.dynamic_checks import flatten_outputs

    return all(
        bool(torch.isfinite(t).all())
        for t in flatten_outputs(out)
        if isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex())
    )


def _warm() -> None:
    """Import what every job uses and create this process's CUDA context before the job arrives."""
    import torch  # noqa: F401 - the import is the point
    from cudice.verifier.build import compile, generated  # noqa: F401
    from cudice.verifier.run.runner import warm_gpu

    warm_gpu()


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    result_fd = int(args[args.index("--result-fd") + 1])
    cache = Path(args[args.index("--cache-dir") + 1]) if "--cache-dir" in args else None
    sandboxed = "--no-boundary" not in args
    work = Path.cwd()
    timed = "--no-timing" not in args
    from cudice.verifier.process import gpu_node_cpus

    near = gpu_node_cpus()
    if near:  # before torch is imported: the judge's memory near the GPU, as its runners' is
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, near)
    session = Session(cache, work, sandboxed=sandboxed, with_reference=timed) if cache is not None else None
    try:
        _warm()  # while the runners start and the job is on its way (a warm spare waits here)
        job = json.loads(sys.stdin.read())
        wanted = Path(job["config"]["cache_dir"])
        if session is None or session.cache_dir != wanted:
            if session is not None:
                session.close()
            session = Session(wanted, work, sandboxed=sandboxed, with_reference=not job.get("skip_timing"))
        result = judge(job, session)
    except BaseException as exc:  # last resort: report instead of dying silently
        result = crash_result(exc, "judge: ")
    write_result(result_fd, result)
    if session is not None:
        session.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
