"""`CandidateObserver` driven the way the worker drives it, with CPU stand-ins for cheating
candidates: each exploit is reported with its code, an honest candidate with nothing."""

from __future__ import annotations

from collections.abc import Callable

import pytest

torch = pytest.importorskip("torch")

from cudice.verifier.observer import CandidateObserver, defined_kernel_names  # noqa: E402
from cudice.verifier.result import Severity  # noqa: E402


def _run(candidate: Callable[..., object], reference: Callable[..., object] = torch.relu,
         num_trials: int = 3) -> set[str]:
    obs = CandidateObserver(kernels=["relu_kernel"], atol=1e-2, rtol=1e-2)
    obs.before_import()
    inputs: list[object] = []
    for seed in range(num_trials):
        torch.manual_seed(seed)
        inputs = [torch.randn(64, 64)]
        ref_out = reference(*inputs)
        before = obs.snapshot(inputs)
        out = candidate(*inputs)
        obs.after_call(before, inputs, out, ref_out)
    obs.after_trials(candidate, inputs)
    return {d.code for d in obs.diagnostics() if d.severity is Severity.ERROR}


def test_honest_candidate_is_clean() -> None:
    assert _run(lambda x: torch.clamp(x, min=0)) == set()


def test_each_cheat_is_reported() -> None:
    def mutate(x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(x)
        x.zero_()
        return out

    cache: list[torch.Tensor] = []

    def cached(x: torch.Tensor) -> torch.Tensor:
        if not cache:
            cache.append(torch.relu(x))
        return cache[0].clone()

    assert _run(mutate) == {"dynamic.input_mutated"}
    assert "dynamic.output_aliases_input" in _run(lambda x: x.relu_())
    assert _run(lambda x: torch.zeros_like(x)) >= {"dynamic.zero_output"}
    assert _run(cached) == {"dynamic.constant_output"}
    assert _run(lambda x: torch.relu(x).half()) == {"dynamic.output_dtype_mismatch"}
    assert _run(lambda x: torch.relu(x).to_sparse()) == {"dynamic.output_not_plain_tensor"}
    assert _run(lambda x: torch.relu(x) + torch.rand_like(x)) >= {"dynamic.nondeterministic"}


def test_patching_a_timer_after_import_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    def patcher(x: torch.Tensor) -> torch.Tensor:
        monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
        return torch.relu(x)

    assert _run(patcher) == {"dynamic.timer_patched"}


def test_defined_kernel_names_skips_comments() -> None:
    src = "// __global__ void fake(int) {}\n__global__ void relu_kernel(float* x) {}\ntemplate <int N>\n" \
          "__global__ void __launch_bounds__(256) tiled(float* y) {}\n"
    assert defined_kernel_names([src, src]) == ["relu_kernel", "tiled"]
