"""The older in-process judge: `python -m cudice.verifier.worker --result-fd FD`, job on stdin.

It loads and judges the candidate in the candidate's own process, so in-process code can forge
its result (among other ways, by raising the shared `judging.Stop` with verdict `correct`); the
default run stage is judge.py (runner processes inside an OS boundary). It is kept for the
run-stage cost comparison (bench/verify_run_cost.py). The helpers it shares with judge.py and
candidate.py (the stop exception, running user code, `load_inline`, the result writer) live in
judging.py; the comparison, the correctness trials and the timing here are this judge's own.

Phases (each records its wall time): 1. import torch, pin precision (no TF32), snapshot the
functions the verifier relies on; 2. load the reference and the candidate modules — the
candidate's `load_inline` is replaced by cudice's cached build (same layout, same flags, same
module name), so an already compiled source loads in milliseconds and a dynamic one builds
here with its diagnostics mapped; 3. build `Model` and `ModelNew` after the same seed;
4. correctness trials with fresh seeded inputs; 5. interleaved timing. The outcome is written
as JSON to FD (a dict of `VerifyResult` fields); the parent (sandbox.py) owns the process.

Dynamic anti-cheat hooks (functions of `dynamic_checks.py`, owned by the anti-cheat engineer)
are called at the marked points `# hook:`. Not covered here: isolation (sandbox.py does it);
multi-GPU candidates.
"""

from __future__ import annotations

import json
import sys
import time
import types
from pathlib import Path
from typing import Any

from cudice.verifier.judging import (
    Stop,
    call_or_stop,
    crash_result,
    diag,
    exec_module,
    install_load_inline,
    load_extension,
    record_timing,
    write_result,
)
from cudice.verifier.result import Diagnostic, Location, Severity, Stage, Verdict


def run_job(job: dict[str, Any], guarded: dict[str, object] | None = None) -> dict[str, Any]:
    """Run one verification job in this process; returns VerifyResult fields as a dict.

    `guarded` is the `dynamic_checks.snapshot_guarded()` taken when this process started (a
    persistent runner); without it the snapshot is taken now, before candidate code runs.
    """
    walls: dict[str, float] = {}
    out: dict[str, Any] = {"stage_wall_s": walls}
    diags: list[Diagnostic] = []
    try:
        _run(job, out, diags, walls, guarded)
    except Stop as stop:
        out.update(verdict=stop.verdict.value, stage=stop.stage.value, error=stop.error)
        diags += stop.diagnostics
    out["diagnostics"] = [d.to_dict() for d in diags]
    return out


def _run(
    job: dict[str, Any],
    out: dict[str, Any],
    diags: list[Diagnostic],
    walls: dict[str, float],
    guarded: dict[str, object] | None,
) -> None:
    from cudice.verifier.config import VerifyConfig
    from cudice.verifier.document import parse_document

    t = time.perf_counter()
    import torch
    from cudice.verifier import dynamic_checks as dyn  # imports torch; only the worker loads it

    cfg_dict = dict(job["config"])
    cfg_dict["cache_dir"] = Path(cfg_dict["cache_dir"])
    cfg_dict["arch_list"] = tuple(cfg_dict["arch_list"])
    config = VerifyConfig(**cfg_dict)
    cand_path, ref_path = job["candidate_path"], job["reference_path"]
    doc = parse_document(job["candidate_source"], cand_path)
    forward_loc = (
        doc.index.location(doc.model_new.span, cand_path) if doc.model_new else Location(cand_path, 1, 1)
    )
    # 1. precision pinned for the reference: TF32 changes fp32 results beyond tight tolerances
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    if not torch.cuda.is_available():
        raise Stop(
            Verdict.COMPILED,
            Stage.LOAD,
            [diag("verify.no_gpu", "No CUDA GPU in the worker.", Stage.LOAD, None, Severity.INFORMATION)],
        )
    out["gpu_name"] = torch.cuda.get_device_name()
    out["versions"] = {
        "torch": torch.__version__,
        "cuda": str(torch.version.cuda),
        "python": sys.version.split()[0],
    }
    if guarded is None:
        guarded = dyn.snapshot_guarded()  # hook: before any candidate code runs
    walls["init"] = time.perf_counter() - t

    # 2. load reference and candidate (the candidate's load_inline builds through cudice's cache)
    t = time.perf_counter()
    _install_load_inline(doc, config, cand_path, diags)
    ref_mod = exec_module("cudice_reference", job["reference_source"], ref_path, Stage.LOAD)
    cand_mod = exec_module("cudice_candidate", job["candidate_source"], cand_path, Stage.LOAD)
    if not hasattr(cand_mod, "ModelNew"):
        raise Stop(
            Verdict.RUNTIME_ERROR,
            Stage.LOAD,
            [
                diag(
                    "runtime.no_model_new",
                    "Executing the file did not define ModelNew.",
                    Stage.LOAD,
                    forward_loc,
                )
            ],
        )
    init_inputs = (
        call_or_stop(ref_mod.get_init_inputs, Stage.LOAD, Location(ref_path, 1, 1))
        if hasattr(ref_mod, "get_init_inputs")
        else []
    )
    # 3. same seed before each constructor: a ModelNew that creates the same parameters gets the same values
    torch.manual_seed(config.seed)
    torch.cuda.manual_seed(config.seed)
    model = call_or_stop(
        lambda: ref_mod.Model(*init_inputs).cuda().eval(), Stage.LOAD, Location(ref_path, 1, 1)
    )
    torch.manual_seed(config.seed)
    torch.cuda.manual_seed(config.seed)
    model_new = call_or_stop(lambda: cand_mod.ModelNew(*init_inputs).cuda().eval(), Stage.LOAD, forward_loc)
    walls["load"] = time.perf_counter() - t

    # 4. correctness: fresh seeded inputs per trial; reference first, on its own clones
    t = time.perf_counter()
    out["stage"] = Stage.CORRECTNESS.value
    ref_trials: list[Any] = []
    cand_trials: list[Any] = []
    max_abs = max_rel = 0.0
    num_ok = 0
    inputs: list[Any] = []
    with torch.no_grad():
        for trial in range(config.num_trials):
            torch.manual_seed(config.seed + 1 + trial)
            inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in ref_mod.get_inputs()]
            ref_out = model(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs])
            torch.cuda.synchronize()
            before = dyn.snapshot_inputs(inputs)
            # hook: free allocator memory holds NaN, so an output the kernel never writes cannot
            # pass with stale values (e.g. the reference's freed output: Sakana incident)
            device = next((x.device for x in inputs if isinstance(x, torch.Tensor)), torch.device("cuda"))
            dyn.poison_allocator(4 * _nbytes(ref_out) + (1 << 20), device)
            cand_out = call_or_stop(lambda args=inputs: model_new(*args), Stage.CORRECTNESS, forward_loc)
            _sync_or_stop(forward_loc)  # catches the last CUDA error of the launch
            # hook: dynamic checks on this call
            found = dyn.check_inputs_unchanged(before, inputs, forward_loc)
            found += dyn.check_outputs_plain(cand_out, ref_out, forward_loc)
            found += dyn.check_no_aliasing(cand_out, inputs, ref_out, forward_loc)
            if found:
                raise Stop(Verdict.INCORRECT, Stage.CORRECTNESS, found)
            ok, why, a, r = _compare(ref_out, cand_out, config.atol, config.rtol)
            max_abs, max_rel = max(max_abs, a), max(max_rel, r)
            if not ok:
                out.update(
                    max_abs_err=max_abs,
                    max_rel_err=max_rel,
                    num_correct_trials=num_ok,
                    num_trials=config.num_trials,
                )
                raise Stop(
                    Verdict.INCORRECT,
                    Stage.CORRECTNESS,
                    [
                        diag(
                            "correctness.mismatch",
                            f"Trial {trial + 1}/{config.num_trials}: {why}",
                            Stage.CORRECTNESS,
                            forward_loc,
                        )
                    ],
                )
            num_ok += 1
            ref_trials.append(ref_out)
            cand_trials.append(cand_out)
        # hook: checks across trials and on a repeated call
        # threads counted around this one call only: input generation on the CPU may start OpenMP
        # workers, which are not the candidate's; a thread the call leaves running is
        threads_before = dyn.count_threads()
        again = model_new(*inputs)
        threads_after = (
            dyn.count_threads()
        )  # before the sync and the profiler, which starts threads of its own
        _sync_or_stop(forward_loc)
        found = dyn.check_not_constant(cand_trials, ref_trials, forward_loc)
        found += dyn.check_deterministic(cand_trials[-1], again, config.atol, config.rtol, forward_loc)
        defined = _kernel_names(doc)
        if defined:
            found += dyn.check_kernels_ran(dyn.profile_kernels(model_new, inputs), defined, where=forward_loc)
        found += dyn.check_thread_count(threads_before, threads_after, forward_loc)
        found += dyn.check_guarded_intact(guarded, forward_loc)
    out.update(
        max_abs_err=max_abs, max_rel_err=max_rel, num_correct_trials=num_ok, num_trials=config.num_trials
    )
    walls["correctness"] = time.perf_counter() - t
    diags += [d for d in found if d.severity is not Severity.ERROR]
    if any(d.severity is Severity.ERROR for d in found):
        raise Stop(Verdict.INCORRECT, Stage.CORRECTNESS, [d for d in found if d.severity is Severity.ERROR])
    if job.get("skip_timing"):
        raise Stop(Verdict.CORRECT, Stage.CORRECTNESS, [])

    # 5. timing, interleaved in this process
    from cudice.verifier.timing import compare, tensor_bytes

    t = time.perf_counter()
    out["stage"] = Stage.TIMING.value
    with torch.no_grad():
        # hook: side-stream work; the reference's own gap calibrates host noise (same process, same inputs)
        ref_event_ms, ref_wall_ms = dyn.measure_stream_escape(model, inputs, repeats=5)
        event_ms, wall_ms = dyn.measure_stream_escape(model_new, inputs, repeats=5)
        found = dyn.check_side_stream(
            event_ms, wall_ms, where=forward_loc, baseline_gap_ms=ref_wall_ms - ref_event_ms
        )
        if any(d.severity is Severity.ERROR for d in found):
            raise Stop(Verdict.INCORRECT, Stage.TIMING, found)
        diags += found
        cmp = compare(
            model,
            model_new,
            inputs,
            num_trials=config.timing_num_trials,
            warmup_ms=config.timing_warmup_ms,
            l2_flush_mib=config.l2_flush_mib,
            suspicious_speedup=config.suspicious_speedup,
            peak_bandwidth_gb_s=config.peak_bandwidth_gb_s,
            output_bytes=tensor_bytes(ref_trials[-1]),
        )
    walls["timing"] = time.perf_counter() - t
    record_timing(cmp, forward_loc, out, diags)
    out.update(verdict=Verdict.CORRECT.value, stage=Stage.TIMING.value)


def _nbytes(values: Any) -> int:
    from cudice.verifier.timing import tensor_bytes

    return tensor_bytes(values)


def _kernel_names(doc: Any) -> list[str]:
    # comment-aware, handles `__global__ void __launch_bounds__(N) name` and templates
    from cudice.verifier.static_cuda import defined_kernel_names

    return defined_kernel_names(
        src.text for call in doc.load_inline_calls for src in call.cuda_sources if src.text
    )


def _compare(ref: Any, cand: Any, atol: float, rtol: float) -> tuple[bool, str, float, float]:
    import torch
    from cudice.verifier.dynamic_checks import flatten_outputs

    refs, cands = flatten_outputs(ref), flatten_outputs(cand)
    if len(refs) != len(cands):
        return False, f"{len(cands)} outputs, the reference returns {len(refs)}", 0.0, 0.0
    max_abs = max_rel = 0.0
    for i, (r, c) in enumerate(zip(refs, cands, strict=True)):
        if not isinstance(r, torch.Tensor) or not isinstance(c, torch.Tensor):
            if r != c:
                return False, f"output {i} is {c!r}, expected {r!r}", max_abs, max_rel
            continue
        if tuple(c.shape) != tuple(r.shape):
            return (
                False,
                f"output {i} has shape {tuple(c.shape)}, expected {tuple(r.shape)}",
                max_abs,
                max_rel,
            )
        if c.dtype != r.dtype:
            return False, f"output {i} has dtype {c.dtype}, expected {r.dtype}", max_abs, max_rel
        cf, rf = c.double(), r.double()
        if not torch.isfinite(cf).all() and not torch.equal(torch.isfinite(cf), torch.isfinite(rf)):
            return False, f"output {i} has NaN/Inf where the reference is finite", max_abs, max_rel
        if not torch.isfinite(cf).all():
            return False, f"output {i} contains NaN/Inf (never accepted)", max_abs, max_rel
        diff = (cf - rf).abs()
        a = float(diff.max()) if diff.numel() else 0.0
        rel = float((diff / rf.abs().clamp_min(1e-12)).max()) if diff.numel() else 0.0
        max_abs, max_rel = max(max_abs, a), max(max_rel, rel)
        if not torch.allclose(cf, rf, atol=atol, rtol=rtol):
            bad = int((diff > atol + rtol * rf.abs()).sum())
            return (
                False,
                (
                    f"output {i} differs from the reference: max |err| {a:.3g}, {bad} of {diff.numel()} "
                    f"elements beyond atol={atol:g}, rtol={rtol:g}"
                ),
                max_abs,
                max_rel,
            )
    return True, "", max_abs, max_rel


def _sync_or_stop(where: Location) -> None:
    import torch

    try:
        torch.cuda.synchronize()
    except Exception as exc:  # a sticky CUDA error (illegal address...) poisons this process
        raise Stop(
            Verdict.RUNTIME_ERROR,
            Stage.CORRECTNESS,
            [
                diag(
                    "runtime.cuda_error",
                    f"CUDA error after the kernel: {exc}".strip(),
                    Stage.CORRECTNESS,
                    where,
                )
            ],
            str(exc),
        ) from None


def _install_load_inline(doc: Any, config: Any, path: str, diags: list[Diagnostic]) -> None:
    """Replace torch's load_inline by a build through cudice's cache (same layout and flags)."""
    from cudice.verifier.compile import build_module
    from cudice.verifier.generated import from_values

    def build(name: str, cpp_sources: Any, cuda_sources: Any, functions: Any) -> types.ModuleType:
        module = from_values(name, cpp_sources, cuda_sources, functions, doc)
        result = build_module(module, path, config, link=True)
        diags.extend(d for d in result.diagnostics if d.severity is not Severity.ERROR)
        if not result.ok or result.library is None:
            raise Stop(Verdict.COMPILE_ERROR, Stage.COMPILE, list(result.diagnostics), result.output[-4000:])
        return load_extension(name, str(result.library))

    install_load_inline(build)


def main(argv: list[str] | None = None) -> int:
    """`python -m cudice.verifier.worker --result-fd FD`: the job on stdin, the result on FD (sandbox.py)."""
    args = argv if argv is not None else sys.argv[1:]
    fd = int(args[args.index("--result-fd") + 1])
    try:
        result = run_job(json.loads(sys.stdin.read()))
    except BaseException as exc:  # last resort: report instead of dying silently
        result = crash_result(exc)
    write_result(fd, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
