"""The judge: `python -m cudice.verifier.judge --result-fd FD [--cache-dir DIR] [--no-timing]`, job on stdin.

The process that holds the verdict. It never executes the candidate's code: two runner
processes (link.py → candidate.py, inside the OS boundary of boundary.py) serve `ModelNew`
and, for timing under identical conditions, the reference's `Model`. The judge keeps the
reference, the inputs and their secret seeds, the comparison, the clock and the verdict, and
writes the result (a dict of `VerifyResult` fields) to `FD`, a pipe the parent created.
The runners start while the job is still on its way (a warm spare for the persistent runner).

Phases: 1. torch, precision pinned (no TF32), the reference built after a secret seed;
2. the runners load their models after the same seed (their `load_inline` builds here, through
the cache); 3. correctness: per trial a fresh secret seed and one input distribution
(inputs.py), the reference run here, the candidate's outputs fetched and compared (tolerance.py),
in-runner observations, one randomly chosen trial profiled (kernels that ran, ATen's share,
streams); then a repeated call (determinism), constancy across trials, guards; 4. timing by
the judge's own clock around a synchronising round trip: fresh clones and an L2 flush in an
untimed `prep`, then a timed `go` (one call and a device-wide sync in the runner); reference
and candidate alternate; the reference runner's empty round trip is subtracted from both;
outputs of randomly chosen timed calls are fetched and checked, one random timed round is
followed by a profiled call, and the guards are checked again afterwards.

Residual (docs/anticheat.md): the device-wide sync that ends a timed call runs in the
candidate's process; native code that skips it moves its work into the next untimed `prep`,
which the judge also times and compares with the reference's (flagged `timing.deferred_work`,
not proof). Profiler records and guard reports come from the candidate's process as well.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cudice.verifier import channel
from cudice.verifier.boundary import readable_by_runners
from cudice.verifier.link import RunnerLink, runner_env
from cudice.verifier.result import Diagnostic, Location, Severity, Stage, Verdict
from cudice.verifier.worker import (
    _call,
    _diag,
    _exec_module,
    _kernel_names,
    _Stop,
    crash_result,
    record_timing,
    write_result,
)

RUNNER_VERDICTS = {"runtime_error", "compile_error", "incorrect"}  # anything else a runner claims is ignored
NUM_PROFILED_TRIALS = 1  # plus one random timed round: each profiled call costs a profiler session
NUM_CHECKED_TIMED_CALLS = 3
_rng = secrets.SystemRandom()


class Session:
    """The runners of one job: started at once (the reference's lazily without timing), closed with
    the judge."""

    def __init__(
        self, cache_dir: Path, work: Path, *, sandboxed: bool = True, with_reference: bool = True
    ) -> None:
        self.cache_dir, self.work, self.sandboxed = cache_dir, work, sandboxed
        cache_dir.mkdir(parents=True, exist_ok=True)  # the boundary binds only paths that exist (boundary.py)
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
    except _Stop as stop:
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
        from cudice.verifier.document import parse_document

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
            from cudice.verifier.reference import reference_only_source

            self.ref_source = reference_only_source(self.ref_source)
        self.doc = parse_document(job["candidate_source"], self.cand_path)
        self.ref_doc = parse_document(job["reference_source"], self.ref_path)
        self.where = (
            self.doc.index.location(self.doc.model_new.span, self.cand_path)
            if self.doc.model_new
            else Location(self.cand_path, 1, 1)
        )
        self.lenient = self.config.static_policy == "lenient"

    # -- the phases ------------------------------------------------------------------------------------
    def run(self) -> None:
        t = time.perf_counter()
        import torch

        torch.backends.cuda.matmul.allow_tf32 = False  # 1. TF32 changes fp32 results beyond tight tolerances
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
        if self.device.startswith("cuda") and not torch.cuda.is_available():
            raise _Stop(
                Verdict.COMPILED,
                Stage.LOAD,
                [_diag("verify.no_gpu", "No CUDA GPU in the judge.", Stage.LOAD, None, Severity.INFORMATION)],
            )
        if self.device.startswith("cuda"):
            self.out["gpu_name"] = torch.cuda.get_device_name()
        self.out["versions"] = {
            "torch": torch.__version__,
            "cuda": str(torch.version.cuda),
            "python": sys.version.split()[0],
        }
        self._boundary_diagnostics()
        ref_mod = _exec_module("cudice_reference", self.ref_source, self.ref_path, Stage.LOAD)
        ref_where = Location(self.ref_path, 1, 1)
        init = (
            _call(ref_mod.get_init_inputs, Stage.LOAD, ref_where)
            if hasattr(ref_mod, "get_init_inputs")
            else []
        )
        seed = secrets.randbits(63)
        torch.manual_seed(seed)
        model = _call(lambda: ref_mod.Model(*init).to(self.device).eval(), Stage.LOAD, ref_where)
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
            raise _Stop(Verdict.CORRECT, Stage.CORRECTNESS, [])
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
                        _diag(m.code, f"Sandbox: {m.message}.", Stage.LOAD, None, Severity.WARNING)
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
        from cudice.verifier.compile import build_module
        from cudice.verifier.generated import from_values

        funcs = req.get("functions")
        module = from_values(
            str(req["name"]),
            list(req["cpp"]),
            list(req["cuda"]) or None,
            list(funcs) if funcs is not None else None,
            doc,
        )
        # a runner that could not import the binding without pybind11 (cabi.py) asks again for pybind11's
        config = self.config.with_(cabi_binding=False) if req.get("pybind") else self.config
        result = build_module(module, path, config, link=True)
        self.diags.extend(d for d in result.diagnostics if d.severity is not Severity.ERROR)
        if not result.ok or result.library is None:
            return {
                "ok": False,
                "diagnostics": [d.to_dict() for d in result.diagnostics],
                "error": result.output[-4000:],
            }
        if self.session.sandboxed:
            readable_by_runners(self.config.cache_dir, result.library)
        return {"ok": True, "library": str(result.library), "cabi": result.binding is not None}

    def _correctness(self, ref_mod: Any, model: Any) -> Any:
        import torch
        from cudice.verifier import dynamic_checks as dyn
        from cudice.verifier.inputs import DISTRIBUTIONS, make_inputs, secret_seed
        from cudice.verifier.tolerance import compare_outputs

        n = self.config.num_trials
        profiled = set(_rng.sample(range(n), k=min(NUM_PROFILED_TRIALS, n)))
        ref_trials: list[Any] = []
        cand_trials: list[Any] = []
        found: list[Diagnostic] = []
        max_abs = max_rel = 0.0
        skipped: list[str] = []
        get_inputs = getattr(ref_mod, "get_inputs", None)
        if get_inputs is None:
            raise _Stop(
                Verdict.RUNTIME_ERROR,
                Stage.LOAD,
                [
                    _diag(
                        "runtime.exception",
                        "The reference defines no get_inputs().",
                        Stage.LOAD,
                        Location(self.ref_path, 1, 1),
                    )
                ],
            )
        for trial in range(n):
            dist = DISTRIBUTIONS[trial % len(DISTRIBUTIONS)]
            inputs = _call(
                lambda d=dist: make_inputs(get_inputs, secret_seed(), d, self.device),
                Stage.CORRECTNESS,
                Location(self.ref_path, 1, 1),
            )
            with torch.no_grad():
                ref_out = model(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs])
            if dist != "as_given" and not _finite(ref_out):
                skipped.append(dist)
                continue
            self._send_inputs(self.session.cand, inputs)
            cand_out = self._call_and_fetch(ref_out, count_threads=bool(ref_trials))
            self._stop_on_errors(dyn.check_outputs_plain(cand_out, ref_out, self.where), Stage.CORRECTNESS)
            cmp = compare_outputs(ref_out, cand_out, self.config.atol, self.config.rtol)
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
                raise _Stop(
                    Verdict.INCORRECT,
                    Stage.CORRECTNESS,
                    [
                        *specific,
                        _diag(
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
                _diag(
                    "correctness.distribution_skipped",
                    f"Input distribution(s) {', '.join(skipped)} "
                    "skipped: the reference's own output is not finite on them.",
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
        import torch
        from cudice.verifier.inputs import make_inputs, secret_seed
        from cudice.verifier.timing import from_samples, tensor_bytes
        from cudice.verifier.tolerance import compare_outputs

        cfg = self.config
        inputs = make_inputs(ref_mod.get_inputs, secret_seed(), "as_given", self.device)
        with torch.no_grad():
            expected = model(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs])
        links = (self.session.ref, self.session.cand)
        for link in links:
            self._send_inputs(link, inputs)
        t0 = time.perf_counter()
        for link in links:  # warm-up by time, each on its own (short ones under-report: https://github.com/triton-lang/triton/issues/2306)
            deadline = time.perf_counter() + cfg.timing_warmup_ms / 1000.0
            while True:
                self._round(link, 0)
                if time.perf_counter() >= deadline:
                    break
        latency = min(self._timed(self.session.ref, {"op": "go", "n": 0}) for _ in range(5))
        self._add_wall("timing.warmup", t0)
        t_rounds = time.perf_counter()
        checked = set(
            _rng.sample(range(cfg.timing_num_trials), k=min(NUM_CHECKED_TIMED_CALLS, cfg.timing_num_trials))
        )
        profiled = _rng.randrange(cfg.timing_num_trials)
        samples: dict[str, list[float]] = {"reference": [], "candidate": []}
        preps: dict[str, list[float]] = {"reference": [], "candidate": []}
        found: list[Diagnostic] = []
        for i in range(cfg.timing_num_trials):
            for link in links if i % 2 == 0 else links[::-1]:
                prep_s, go_s = self._round(link, cfg.l2_flush_mib)
                preps[link.role].append(prep_s * 1e3)
                samples[link.role].append(max(go_s - latency, 1e-9) * 1e3)
            if i in checked:  # the runner cannot tell which timed calls are checked: it is asked afterwards
                rep, blobs = self._ask(
                    self.session.cand,
                    {"op": "fetch"},
                    Stage.TIMING,
                    max_bytes=2 * tensor_bytes(expected) + (1 << 20),
                )
                got = self._decode(rep, blobs)
                cmp = compare_outputs(expected, got, cfg.atol, cfg.rtol)
                if not cmp.ok:
                    raise _Stop(
                        Verdict.INCORRECT,
                        Stage.TIMING,
                        [
                            _diag(
                                "correctness.timed_call_mismatch",
                                f"Timed call {i + 1}/{cfg.timing_num_trials} (checked "
                                f"afterwards, chosen at random): {cmp.why}. The kernel must be correct "
                                "on every call, not only while it is checked.",
                                Stage.TIMING,
                                self.where,
                            )
                        ],
                    )
            if i == profiled:
                found += self._profile()
        self._add_wall("timing.rounds", t_rounds)
        found += self._guards()
        self._stop_on_errors(found, Stage.TIMING)
        reasons = []
        ref_prep, cand_prep = sorted(preps["reference"]), sorted(preps["candidate"])
        mid = len(ref_prep) // 2
        if cand_prep[mid] > 2.0 * ref_prep[mid] + 0.5:
            reasons.append(
                f"its untimed preparation took {cand_prep[mid]:.3f} ms against the reference's "
                f"{ref_prep[mid]:.3f} ms: work deferred past the timed call"
            )
            self.diags.append(
                _diag(
                    "timing.deferred_work",
                    f"Work seems to run after the timed call returned "
                    f"({reasons[-1]}); the speedup is not counted.",
                    Stage.TIMING,
                    self.where,
                    Severity.WARNING,
                )
            )
        cmp_t = from_samples(
            samples["reference"],
            samples["candidate"],
            input_bytes=tensor_bytes(inputs),
            output_bytes=tensor_bytes(last_ref),
            suspicious_speedup=cfg.suspicious_speedup,
            peak_bandwidth_gb_s=cfg.peak_bandwidth_gb_s,
            extra_reasons=reasons,
        )
        record_timing(
            cmp_t, self.where, self.out, self.diags, "; timed by the judge around a synchronising round trip"
        )

    # -- requests ----------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _talking(self, link: RunnerLink, stage: Stage) -> Iterator[None]:
        """A runner that dies or breaks the protocol is a crash of the candidate, never of the judge."""
        try:
            yield
        except (channel.ChannelError, OSError) as exc:
            rc = link.proc.poll()
            why = f"exit status {rc}" if rc is not None else "it stopped answering"
            raise _Stop(
                Verdict.CRASH,
                stage,
                [
                    _diag(
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
    ) -> tuple[dict[str, Any], list[bytearray]]:
        with self._talking(link, stage):
            rep, got = link.request(header, blobs, max_bytes=max_bytes, on_build=on_build)
        if not rep.get("ok"):
            claimed = str(rep.get("verdict", ""))
            verdict = Verdict(claimed) if claimed in RUNNER_VERDICTS else Verdict.RUNTIME_ERROR
            got_diags = [Diagnostic.from_dict(d) for d in rep.get("diagnostics", []) if isinstance(d, dict)]
            if not got_diags:
                got_diags = [
                    _diag(
                        "runtime.exception",
                        f"The {link.role} process reported: {rep.get('error')}",
                        stage,
                        self.where,
                    )
                ]
            raise _Stop(verdict, stage, got_diags, str(rep.get("error") or "")[-4000:] or None)
        return rep, got

    def _send_inputs(self, link: RunnerLink, inputs: list[Any]) -> None:
        tree, blobs = channel.encode(inputs)
        self._ask(link, {"op": "inputs", "inputs": tree}, Stage.CORRECTNESS, blobs)

    def _call_and_fetch(self, ref_out: Any, *, count_threads: bool) -> Any:
        from cudice.verifier.timing import tensor_bytes

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
            raise _Stop(
                Verdict.INCORRECT,
                Stage.CORRECTNESS,
                [
                    _diag(
                        "dynamic.output_not_plain_tensor",
                        f"The candidate's outputs could not be read: {exc}",
                        Stage.CORRECTNESS,
                        self.where,
                    )
                ],
            ) from None

    def _round(self, link: RunnerLink, flush_mib: int) -> tuple[float, float]:
        prep = self._timed(link, {"op": "prep", "flush_mib": flush_mib})
        return prep, self._timed(link, {"op": "go", "n": 1})

    def _timed(self, link: RunnerLink, header: dict[str, Any]) -> float:
        t0 = time.perf_counter()
        self._ask(link, header, Stage.TIMING)
        return time.perf_counter() - t0

    def _profile(self) -> list[Diagnostic]:
        from cudice.verifier import dynamic_checks as dyn

        t0 = time.perf_counter()
        rep, _ = self._ask(self.session.cand, {"op": "profile"}, Stage.CORRECTNESS)
        self._add_wall("profile", t0)
        if not rep.get("supported"):
            if rep.get("error") and not any(d.code == "dynamic.profiler_unavailable" for d in self.diags):
                self.diags.append(
                    _diag(
                        "dynamic.profiler_unavailable",
                        f"The profiler could not run in the runner "
                        f"({rep['error']}): which kernels ran, ATen's share and streams were not "
                        "checked.",
                        Stage.CORRECTNESS,
                        self.where,
                        Severity.WARNING,
                    )
                )
            return []
        runs = [
            dyn.KernelRun(str(k[0]), float(k[1]), int(k[2]))
            for k in rep.get("kernels", [])
            if isinstance(k, list) and len(k) == 3
        ]
        defined = _kernel_names(self.doc)
        found = (
            dyn.check_kernels_ran(runs, defined, 0.5 if self.lenient else 0.0, self.where) if defined else []
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
            raise _Stop(Verdict.INCORRECT, stage, errors)


def _finite(out: Any) -> bool:
    import torch
    from cudice.verifier.dynamic_checks import flatten_outputs

    return all(
        bool(torch.isfinite(t).all())
        for t in flatten_outputs(out)
        if isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex())
    )


def _warm() -> None:
    """Import what every job uses and create this process's CUDA context before the job arrives."""
    import torch  # noqa: F401 - the import is the point
    from cudice.verifier import compile, dynamic_checks, generated, inputs, timing, tolerance  # noqa: F401
    from cudice.verifier.candidate import warm_gpu

    warm_gpu()


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    result_fd = int(args[args.index("--result-fd") + 1])
    cache = Path(args[args.index("--cache-dir") + 1]) if "--cache-dir" in args else None
    sandboxed = "--no-boundary" not in args
    work = Path.cwd()
    timed = "--no-timing" not in args
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
