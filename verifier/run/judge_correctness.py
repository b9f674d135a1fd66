"""The judge's correctness phase (run/judge.py, phase 3): the candidate's outputs against the reference's.

Per trial a fresh secret seed and one input distribution (run/inputs.py); the reference runs here,
in the judge, and the candidate's outputs are fetched from its runner and compared
(run/tolerance.py), with the runner's in-process observations added; one randomly chosen trial is
profiled (run/judge_evidence.py). Where the reference has one-element parameters drawn free (one
sign per draw: run/weights.py `second_turn`), one more trial follows with each of them negated, in
the reference here and in the candidate's model, which its runner loads again after the same seed;
a kernel valid for one sign of such a parameter meets the other in every run. Then a repeated call
(determinism), constancy across trials and the runner's guards. The fastest reference call seen
here sets the state's `ref_call_s`, which bounds every later request (`judge_state.limit_s`).

Contract: returns the reference's outputs of the last trial (the timing phase sizes its sets by
them) or ends the job with a `Stop`; both models are left in the last trial's draw. Not covered: the
comparison rules (run/tolerance.py), the input distributions (run/inputs.py), the checks
(run/dynamic_checks.py). The second turn's load runs the candidate's module again in the same runner,
whose guards (run/runner.py `op_load`) then start from what its first load left, and which holds
both of its models while the second is built (a model near the GPU's memory may run out there); the
reference's runner keeps the first turn's draw for timing (its outputs are timed, not judged); a
reference whose `get_init_inputs()` gives other values per call gets no second turn (said, as
information).
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cudice.verifier.run import channel
from cudice.verifier.run.judge_evidence import guards, profile
from cudice.verifier.run.judge_state import (
    JudgeState,
    add_wall,
    ask,
    fetch,
    reported_diagnostics,
    send_shared,
    shared,
    shared_fallback,
    shares_transfer,
    stop_on_errors,
)
from cudice.verifier.run.judging import Stop, call_or_stop, diag
from cudice.verifier.run.runner_link import RunnerLink
from cudice.verifier.source.result import Diagnostic, Location, Severity, Stage, Verdict

if TYPE_CHECKING:
    from cudice.verifier.run.judge_load import Reference

NUM_PROFILED_TRIALS = 1  # plus one random timed round: each profiled call costs a profiler session
_rng = secrets.SystemRandom()


@dataclass
class _Tally:
    """What the correctness phase's trials have found so far."""

    num_trials: int  # the trials planned (the second turn's is one more)
    profiled: set[int]  # which of them are profiled
    ref: list[Any] = field(default_factory=list)  # the reference's outputs of each judged trial
    cand: list[Any] = field(default_factory=list)  # the candidate's
    max_abs: float = 0.0
    max_rel: float = 0.0
    skipped: list[str] = field(default_factory=list)  # distributions not judged
    refused: dict[str, str] = field(default_factory=dict)  # distribution -> the reference's error on it
    found: list[Diagnostic] = field(default_factory=list)  # the profiles' findings
    last: tuple[list[Any], str] = ([], "as_given")  # the last judged trial's inputs and distribution


def correctness(st: JudgeState, ref: Reference) -> Any:
    from cudice.verifier.run import dynamic_checks as dyn
    from cudice.verifier.run.inputs import DISTRIBUTIONS
    from cudice.verifier.run.tolerance import finite_scale

    ref_mod, model = ref.module, ref.model
    n = st.config.num_trials
    tally = _Tally(n, set(_rng.sample(range(n), k=min(NUM_PROFILED_TRIALS, n))))
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
                    Location(st.ref_path, 1, 1),
                )
            ],
        )
    # `as_given` first (a kernel that fails on the problem's own inputs is told so first), the others
    # in an order drawn per run: a kernel cannot count its calls to know which one it gets
    others = list(DISTRIBUTIONS[1:])
    _rng.shuffle(others)
    order = ["as_given", *others]
    for trial in range(n):
        _trial(st, model, get_inputs, tally, order[trial % len(order)], f"Trial {trial + 1}/{n}", trial)
    _second_turn(st, ref, get_inputs, tally)
    found = tally.found
    again = _call_and_fetch(st, tally.ref[-1], count_threads=True)  # the last inputs, once more
    scales = [finite_scale(r) for r in dyn.flatten_outputs(tally.ref[-1])]
    found += dyn.check_deterministic(tally.cand[-1], again, st.config.atol, st.config.rtol, st.where, scales)
    found += _second_call_discrete(st, model, tally.last, tally.ref[-1], again)
    found += dyn.check_not_constant(tally.cand, tally.ref, st.where)
    found += guards(st)
    if tally.skipped:
        st.diags.append(
            diag(
                "correctness.distribution_skipped",
                f"Input distribution(s) {', '.join(tally.skipped)} "
                "skipped: the reference's own output has no finite element on them, or its get_inputs() "
                "or its forward does not accept such values"
                + "".join(
                    f"; on {d} the reference's forward raised {why}" for d, why in tally.refused.items()
                )
                + ".",
                Stage.CORRECTNESS,
                st.where,
                Severity.INFORMATION,
            )
        )
    st.out.update(
        max_abs_err=tally.max_abs,
        max_rel_err=tally.max_rel,
        num_correct_trials=len(tally.ref),
        num_trials=len(tally.ref),
    )
    stop_on_errors(st, found, Stage.CORRECTNESS)
    return tally.ref[-1]


def _is_cuda_error(exc: BaseException) -> bool:
    """Whether `exc` is a CUDA error (after which the process's CUDA context is unusable)."""
    text = str(exc)
    return "CUDA error" in text or "device-side assert" in text or type(exc).__name__ == "AcceleratorError"


def _trial(
    st: JudgeState, model: Any, get_inputs: Any, tally: _Tally, dist: str, name: str, trial: int = -1
) -> None:
    """One trial, `name` in what it says: fresh inputs of `dist`, the reference run here, the
    candidate's outputs fetched and judged; a mismatch ends the job, a distribution the reference
    cannot be judged on (its get_inputs() or its forward refuses the drawn values, or its output has
    no finite element) is added to `tally.skipped`. Trial `trial` of the planned ones is profiled
    where `tally.profiled` has it."""
    import torch
    from cudice.verifier.run import dynamic_checks as dyn
    from cudice.verifier.run.inputs import InputsError, make_inputs, secret_seed

    on_device = dist == "as_given"  # the others draw on the CPU (run/inputs.py `make_inputs`)
    try:  # on the GPU under the lease (not while another verification's batch is timed), else outside it
        with shared(st) if on_device else contextlib.nullcontext():
            where = st.device if on_device else "cpu"
            drawn = make_inputs(get_inputs, secret_seed(), dist, where, draw_on_device=on_device)
        if not on_device:
            with shared(st):  # the copy to the GPU
                drawn = [x.to(st.device) if isinstance(x, torch.Tensor) else x for x in drawn]
    except InputsError as exc:
        if exc.only_under_dist:  # the problem does not define this distribution (e.g. bernoulli(32x))
            tally.skipped.append(dist)
            return
        drawn = None
    # a get_inputs() that fails on any values is the reference's error, located by call_or_stop
    inputs = (
        drawn
        if drawn is not None
        else call_or_stop(
            lambda d=dist: make_inputs(get_inputs, secret_seed(), d, st.device),
            Stage.CORRECTNESS,
            Location(st.ref_path, 1, 1),
        )
    )
    with torch.no_grad(), shared(st):
        args = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
        t_ref = time.perf_counter()
        try:
            ref_out = model(*args)
            if st.device.startswith("cuda"):
                torch.cuda.synchronize()
        except Exception as exc:
            # the reference refuses values the judge drew (BCE on `rand` targets moved out of
            # [0, 1]): there is nothing to judge on them, as when get_inputs() refuses them. On
            # the problem's own inputs, or after a CUDA error (the context is lost), it stays the
            # reference's error
            if dist == "as_given" or _is_cuda_error(exc):
                raise
            tally.skipped.append(dist)
            tally.refused[dist] = (
                f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
            )
            return
        took = time.perf_counter() - t_ref
        del args  # the copies the reference ran on: their memory is free again before the send
    st.ref_call_s = min(st.ref_call_s, took) if st.ref_call_s else took
    # on inputs the judge drew (not the problem's own), NaN/Inf in the reference are not judged
    # (an honest kernel's other order may not overflow where it does); its finite elements are.
    # Only a reference output with no finite element leaves nothing to judge
    if dist != "as_given" and not _finite_somewhere(ref_out):
        tally.skipped.append(dist)
        return
    _send_inputs(st, st.session.cand, inputs)
    cand_out = _call_and_fetch(st, ref_out, count_threads=bool(tally.ref))
    stop_on_errors(st, dyn.check_outputs_plain(cand_out, ref_out, st.where), Stage.CORRECTNESS)
    cmp = judged(st, model, inputs, ref_out, cand_out, match_non_finite=dist == "as_given")
    tally.max_abs, tally.max_rel = max(tally.max_abs, cmp.max_abs_err), max(tally.max_rel, cmp.max_rel_err)
    for index, share in cmp.exact_own_shares:
        st.exact_own_shares[index] = max(st.exact_own_shares.get(index, 0.0), share)
    for index, bound in cmp.lower_bounds:
        st.lower_bounds[index] = max(st.lower_bounds.get(index, 0.0), bound)
    if cmp.ok and cmp.tie_note:
        note_ties(st, f"{name} ({dist} inputs): {cmp.tie_note}.")
    said = any(d.code == "correctness.exact_reference" for d in st.diags)
    if cmp.ok and cmp.exact_note and not said:
        st.diags.append(
            diag(
                "correctness.exact_reference",
                f"{name} ({dist} inputs): {cmp.exact_note}.",
                Stage.CORRECTNESS,
                st.where,
                Severity.INFORMATION,
            )
        )
    if not cmp.ok:
        st.out.update(
            max_abs_err=tally.max_abs,
            max_rel_err=tally.max_rel,
            num_correct_trials=len(tally.ref),
            num_trials=tally.num_trials,
        )
        # the more specific finding first (all zeros, one value), when there is one
        specific = [
            d for d in dyn.check_not_constant([cand_out], [ref_out], st.where) if d.severity is Severity.ERROR
        ] + _reference_varies(st, model, inputs, ref_out)
        raise Stop(
            Verdict.INCORRECT,
            Stage.CORRECTNESS,
            [
                *specific,
                diag(
                    "correctness.mismatch", f"{name} ({dist} inputs): {cmp.why}", Stage.CORRECTNESS, st.where
                ),
            ],
        )
    tally.ref.append(ref_out)
    tally.cand.append(cand_out)
    tally.last = (inputs, dist)
    if trial in tally.profiled:
        tally.found += profile(st)


def _second_turn(st: JudgeState, ref: Reference, get_inputs: Any, tally: _Tally) -> None:
    """One more trial (`as_given`) where the reference has one-element parameters drawn free: each
    of them negated (run/weights.py `second_turn`), in the reference here and in the candidate's
    runner, which loads its model again from the reference's own init inputs after the same seed,
    with the second turn's keys. A parameter of one element has one sign per draw, so a kernel valid
    for one sign of it (a scale assumed positive, a slope whose sign it drops) passed one run in
    two; now it meets both signs in every run. The timing phase then runs both models as they are
    left (the second turn)."""
    import torch
    from cudice.verifier.run.judge_load import load_runners
    from cudice.verifier.run.weights import drawn_from_json, drawn_to_json, give_drawn, second_turn

    turn = second_turn(drawn_from_json(st.constant_keys))
    negated = [d.name for d in turn if d.key.flipped]
    if not negated or not tally.ref:
        return
    t0 = time.perf_counter()
    # both models as freshly drawn in the second turn: the drawn statistics back at their draws too
    with torch.no_grad(), shared(st):
        give_drawn(ref.model, ref.seed, turn)
    st.constant_keys = drawn_to_json(turn)
    load_runners(st, ref.init, ref.seed, timed=False)
    add_wall(st, "correctness.second_turn_load", t0)
    name = f"The second turn's trial (the one-element parameter(s) {', '.join(negated)} of the other sign)"
    _trial(st, ref.model, get_inputs, tally, "as_given", name)


def exact_reference(st: JudgeState, model: Any, inputs: list[Any], ref_out: Any) -> Callable[[], Any]:
    """What `compare_outputs` calls for a second opinion on an fp32 output (run/tolerance.py): the
    reference's outputs for `inputs` computed in float64 under the shared lease, or `NoExact`
    (run/exact_reference.py)."""

    def run() -> Any:
        from cudice.verifier.run.exact_reference import exact_outputs

        return exact_outputs(model, inputs, ref_out, lambda: shared(st))

    return run


def _second_call_discrete(
    st: JudgeState, model: Any, last: tuple[list[Any], str], ref_out: Any, again: Any
) -> list[Diagnostic]:
    """The candidate's second call on the last trial's inputs, where the reference has a discrete
    output (indices, a mask): judged against the reference as the first call was, up to its ties
    (`dyn.check_deterministic` compares floating outputs only: between two calls an honest sort may
    order equal keys otherwise, and an index within 1 % of another is no tolerance)."""
    from cudice.verifier.run import dynamic_checks as dyn

    if not any(dyn.discrete(r) for r in dyn.flatten_outputs(ref_out)):
        return []
    inputs, dist = last
    cmp = judged(st, model, inputs, ref_out, again, match_non_finite=dist == "as_given")
    if cmp.ok:
        return []
    return [
        diag(
            "dynamic.nondeterministic",
            f"A second call on the same inputs ({dist}) is not correct where the first was: {cmp.why}. "
            "The kernel reads memory it did not write or races; initialise and synchronise.",
            Stage.CORRECTNESS,
            st.where,
        )
    ]


def judged(
    st: JudgeState, model: Any, inputs: list[Any], ref_out: Any, out: Any, *, match_non_finite: bool = True
) -> Any:
    """`out` compared with `ref_out`, the reference's output on `inputs`, under the configured
    tolerance and precision, with the float64 and ties second opinions (run/tolerance.py
    `compare_outputs`): every comparison of a candidate's output with the reference's, in the
    trials, the second call and timing, is this one."""
    from cudice.verifier.run.tolerance import compare_outputs

    return compare_outputs(
        ref_out,
        out,
        st.config.atol,
        st.config.rtol,
        precision=st.config.precision,
        exact=exact_reference(st, model, inputs, ref_out),
        match_non_finite=match_non_finite,
        ties=reference_ties(st, model, inputs, ref_out),
    )


def reference_ties(st: JudgeState, model: Any, inputs: list[Any], ref_out: Any) -> Callable[[], Any]:
    """What `compare_outputs` calls for a second opinion on a discrete output (run/tolerance.py):
    where the reference's own ties are for `inputs`, found under the shared lease
    (run/reference_ties.py)."""

    def run() -> Any:
        from cudice.verifier.run.reference_ties import second_opinion

        return second_opinion(model, inputs, ref_out, lambda: shared(st))

    return run


def note_ties(st: JudgeState, message: str) -> None:
    """Say once per verdict that a discrete output was accepted at the reference's ties."""
    if not any(d.code == "correctness.reference_ties" for d in st.diags):
        found = diag("correctness.reference_ties", message, Stage.CORRECTNESS, st.where, Severity.INFORMATION)
        st.diags.append(found)


def _send_inputs(st: JudgeState, link: RunnerLink, inputs: list[Any]) -> None:
    """A trial's inputs to the candidate's runner: through a GPU buffer made for it where they take
    SHARED_FETCH_MIN_BYTES or more on a GPU with shared staging (`send_shared`; about 2 s per GB
    each way saved), else, or where either side cannot, over the socket."""
    from cudice.verifier.run.timing import tensor_bytes

    if shares_transfer(st, tensor_bytes(inputs)):
        sent = send_shared(st, link, {"op": "inputs"}, "inputs", inputs, Stage.CORRECTNESS)
        if sent.taken:
            st.walls["inputs_shared_count"] = st.walls.get("inputs_shared_count", 0.0) + 1
            return
        shared_fallback(st, Stage.CORRECTNESS, sent.why)
    tree, blobs = channel.encode(inputs)
    ask(st, link, {"op": "inputs", "inputs": tree}, Stage.CORRECTNESS, blobs)


def _call_and_fetch(st: JudgeState, ref_out: Any, *, count_threads: bool) -> Any:
    from cudice.verifier.run.timing import tensor_bytes

    size = tensor_bytes(ref_out)
    rep, _ = ask(
        st,
        st.session.cand,
        {"op": "call", "poison_bytes": 4 * size + (1 << 20), "count_threads": count_threads},
        Stage.CORRECTNESS,
    )
    found = reported_diagnostics(st.session.cand, rep)
    stop_on_errors(st, found, Stage.CORRECTNESS)
    return fetch(st, st.session.cand, {"op": "fetch"}, Stage.CORRECTNESS, max_bytes=2 * size + (1 << 20))


def _reference_varies(st: JudgeState, model: Any, inputs: list[Any], ref_out: Any) -> list[Diagnostic]:
    """After a mismatch: the reference run again on the same inputs. Where it disagrees with
    itself (dropout with p > 0 in training mode, an RNG call in its forward), no kernel can match
    it, and the verdict says so instead of blaming the kernel alone."""
    import torch
    from cudice.verifier.run.tolerance import compare_outputs

    try:
        with torch.no_grad(), shared(st):
            again = model(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs])
        same = compare_outputs(ref_out, again, st.config.atol, st.config.rtol, precision=st.config.precision)
    except Exception:  # the mismatch stands on its own
        return []
    if same.ok:
        return []
    return [
        diag(
            "correctness.reference_not_deterministic",
            "The reference gives other outputs when run again on the same inputs (it draws random "
            "numbers: dropout with p > 0 in training mode, an RNG call in its forward; or it changes "
            "its own state), so no kernel can match it. Call self.eval() in its constructor, or make "
            "its forward deterministic.",
            Stage.CORRECTNESS,
            Location(st.ref_path, 1, 1),
        )
    ]


def _finite_somewhere(out: Any) -> bool:
    """Every floating output has a finite element (or no element at all)."""
    import torch
    from cudice.verifier.run.dynamic_checks import flatten_outputs

    return all(
        t.numel() == 0 or bool(torch.isfinite(t).any())
        for t in flatten_outputs(out)
        if isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex())
    )
