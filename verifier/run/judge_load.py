"""The judge's first two phases (run/judge.py): the reference built here, the runners' models loaded.

`reference` pins torch's precision (no TF32), takes the GPU's lease, and builds the reference's
`Model` in the judge after a secret seed; `load_runners` has each runner load its model after the
same seed, so both hold the reference's parameters. A runner's `load_inline` is answered by
`build`: the judge compiles through the shared cache (only the judge writes it) and reads which
kernels the candidate's library holds (kept on the state for the kernel evidence).

Contract: a reference that fails to load, or a candidate that does not build or load, ends the job
with a `Stop`; a missing GPU ends it as `compiled`. A build the judge refused because its host
objects call what the static checks forbid (build/host_symbols.py) ends the job as
`static_violation` whatever the runner then reports: a candidate that catches the refusal and
falls back to PyTorch, or a runner that reports another failure, cannot change that verdict.
Not covered: the sandbox of the runners (run/boundary.py, whose missing pieces are only reported
here), the build itself (build/compile.py).
"""

from __future__ import annotations

import secrets
import sys
import time
import types
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from cudice.verifier.run import channel
from cudice.verifier.run.boundary import readable_by_runners
from cudice.verifier.run.gpu_lease import GpuLease, gpu_key
from cudice.verifier.run.judge_state import JudgeState, add_wall, ask, shared, talking
from cudice.verifier.run.judging import Stop, call_or_stop, diag, exec_module
from cudice.verifier.run.runner_link import RunnerLink
from cudice.verifier.run.weights import (
    draw_reference_constants,
    drawn_to_json,
    registration_order,
    settle_draws,
)
from cudice.verifier.source.result import Diagnostic, Location, Severity, Stage, Verdict

if TYPE_CHECKING:
    from cudice.verifier.source.document import Document


class Reference(NamedTuple):
    """The reference as the judge built it: its module, its model, the init inputs and the seed."""

    module: types.ModuleType
    model: Any
    init: Any
    seed: int


def reference(st: JudgeState) -> Reference:
    """Phase 1: torch, precision pinned (no TF32), the reference built after a secret seed."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False  # 1. TF32 changes fp32 results beyond tight tolerances
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    if st.device.startswith("cuda") and not torch.cuda.is_available():
        raise Stop(
            Verdict.COMPILED,
            Stage.LOAD,
            [diag("verify.no_gpu", "No CUDA GPU in the judge.", Stage.LOAD, None, Severity.INFORMATION)],
        )
    if st.device.startswith("cuda"):
        st.out["gpu_name"] = torch.cuda.get_device_name()
        st.lease = GpuLease(gpu_key(st.device), timeout_s=st.config.timeout_s)
    st.out["versions"] = {
        "torch": torch.__version__,
        "cuda": str(torch.version.cuda),
        "python": sys.version.split()[0],
    }
    _boundary_diagnostics(st)
    ref_mod = exec_module("cudice_reference", st.ref_source, st.ref_path, Stage.LOAD)
    ref_where = Location(st.ref_path, 1, 1)
    init = (
        call_or_stop(ref_mod.get_init_inputs, Stage.LOAD, ref_where)
        if hasattr(ref_mod, "get_init_inputs")
        else []
    )
    seed = secrets.randbits(63)
    torch.manual_seed(seed)

    def build() -> Any:
        # weights the constructor set to a constant (a norm layer's 1 and 0) are drawn: at those
        # values a layer can be skipped within the tolerance (run/weights.py)
        with registration_order() as order:
            built = ref_mod.Model(*init)
        drawn = draw_reference_constants(built, seed, order)
        # in the mode its constructor left it in (training, unless it calls `self.eval()`), as
        # KernelBench runs it: a BatchNorm there normalises by the batch's statistics, and kernels
        # written for KernelBench compute those
        built = built.to(st.device)
        get_inputs = getattr(ref_mod, "get_inputs", None)
        # a parameter whose free sign or size makes the outputs NaN keeps its constant's (run/weights.py)
        if get_inputs is not None:
            from cudice.verifier.run.inputs import make_inputs, secret_seed

            def probe_inputs() -> list[Any]:
                return make_inputs(get_inputs, secret_seed(), "as_given", st.device, draw_on_device=True)

            with shared(st):
                drawn = settle_draws(built, seed, drawn, probe_inputs)
        st.constant_keys = drawn_to_json(drawn)
        return built

    model = call_or_stop(build, Stage.LOAD, ref_where)
    return Reference(ref_mod, model, init, seed)


def load_runners(st: JudgeState, init: Any, seed: int, *, timed: bool) -> None:
    """Phase 2: the candidate's runner loads `ModelNew`, and with timing the reference's `Model`."""
    _load(
        st,
        st.session.cand,
        "cudice_candidate",
        st.cand_source,
        st.cand_path,
        "ModelNew",
        init,
        seed,
        st.doc,
    )
    if timed:
        _load(
            st,
            st.session.ref,
            "cudice_reference",
            st.ref_source,
            st.ref_path,
            "Model",
            init,
            seed,
            st.ref_doc,
        )


def _boundary_diagnostics(st: JudgeState) -> None:
    seen: set[tuple[str, str]] = set()
    for link in st.session.links():
        for m in link.missing:
            if (m.code, m.message) not in seen:
                seen.add((m.code, m.message))
                st.diags.append(diag(m.code, f"Sandbox: {m.message}.", Stage.LOAD, None, Severity.WARNING))


def _load(
    st: JudgeState,
    link: RunnerLink,
    module: str,
    source: str,
    path: str,
    cls: str,
    init: Any,
    seed: int,
    doc: Document,
) -> None:
    t0 = time.perf_counter()
    with talking(st, link, Stage.LOAD):
        if not link.ready:
            ready = link.wait_ready()
            # where the runner's start went, said before any candidate code ran in it; reported
            warm = ready.get("warm_s")
            for step, took in warm.items() if isinstance(warm, dict) else ():
                if isinstance(took, (int, float)):
                    st.walls[f"load.{link.role}_runner_{step}"] = float(took)
    add_wall(st, "load.wait_runner", t0)
    tree, blobs = channel.encode(list(init))
    refused: list[dict[str, Any]] = []  # builds the judge refused for what their host code calls

    def on_build(req: dict[str, Any]) -> dict[str, Any]:
        answer = _build(st, req, doc, path)
        if answer.get("verdict") == "static_violation":
            refused.append(answer)
        return answer

    try:  # the runner's `load_inline` calls come back as `build` requests meanwhile
        ask(
            st,
            link,
            {
                "op": "load",
                "module": module,
                "source": source,
                "path": path,
                "cls": cls,
                "init": tree,
                "seed": seed,
                "constants": st.constant_keys,
                "device": st.device,
                "line": st.where.line if cls == "ModelNew" else 1,
            },
            Stage.LOAD,
            blobs,
            on_build=on_build,
        )
    finally:
        if refused:  # the judge's own finding decides, whatever the runner made of the refusal
            raise Stop(
                Verdict.STATIC_VIOLATION,
                Stage.LOAD,
                [Diagnostic.from_dict(d) for d in refused[0]["diagnostics"]],
                str(refused[0]["error"]),
            )


def _build(st: JudgeState, req: dict[str, Any], doc: Document, path: str) -> dict[str, Any]:
    """A runner's `load_inline`: built here, so only the judge writes the cache."""
    from cudice.verifier.build.compile import build_module
    from cudice.verifier.build.generated import from_values
    from cudice.verifier.build.unsafe import UnsafeModule

    funcs = req.get("functions")
    try:
        module = from_values(
            str(req["name"]),
            [str(t) for t in req["cpp"]],
            [str(t) for t in req["cuda"]] or None,
            [str(f) for f in funcs] if funcs is not None else None,
            doc,
        )
    except UnsafeModule as exc:  # the name, a function or a source would reach the compiler as more than C++
        message = f"`load_inline` call refused: {exc}."
        diag = Diagnostic(Severity.ERROR, message, "static.build_injection", Stage.STATIC, None)
        return {"ok": False, "verdict": "static_violation", "diagnostics": [diag.to_dict()], "error": message}
    # a runner that could not import the binding without pybind11 (build/cabi.py) asks for pybind11's
    config = st.config.with_(cabi_binding=False) if req.get("pybind") else st.config
    result = build_module(module, path, config, link=True)
    st.diags.extend(d for d in result.diagnostics if d.severity is not Severity.ERROR)
    if result.violation:  # built, but its host objects call what the static checks forbid
        return {
            "ok": False,
            "verdict": "static_violation",
            "diagnostics": [d.to_dict() for d in result.diagnostics],
            "error": "the built module's host code calls PyTorch ops or starts threads (host_symbols)",
        }
    if not result.ok or result.library is None:
        return {
            "ok": False,
            "diagnostics": [d.to_dict() for d in result.diagnostics],
            "error": result.output[-4000:],
        }
    if st.device.startswith("cuda"):  # which kernels are the candidate's: read from the built library
        from cudice.verifier.build.kernel_symbols import KernelSymbolsError, own_kernels

        try:
            st.own_kernels |= own_kernels(Path(result.library))
        except KernelSymbolsError as exc:
            st.own_kernels_error = str(exc)
    if st.session.sandboxed:
        readable_by_runners(st.config.cache_dir, result.library)
    return {"ok": True, "library": str(result.library), "cabi": result.binding is not None}
