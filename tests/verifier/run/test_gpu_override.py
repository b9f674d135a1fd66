"""`CUDICE_GPU` and the hardware probe reach every caller alike: the verifier API (whether the run
stage starts), the pool's size, a local Ray instance's GPUs and the server's compile-only notice
(verifier/run/gpu_probe.py). Ray itself is stood in for: no instance is started."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from cudice.verifier import api
from cudice.verifier.build.compile import BuildResult
from cudice.verifier.config import VerifyConfig
from cudice.verifier.pool import VerifyPool
from cudice.verifier.run import gpu_probe
from cudice.verifier.run.gpu_probe import GpuProbe, probe_hardware
from cudice.verifier.run.sandbox import ChildOutcome
from cudice.verifier.source.result import Verdict

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
NO_GPU = probe_hardware(lambda name: None, dev_dir="/nonexistent")  # the real answer of a bare machine
TWO_GPUS = GpuProbe(2, None, "nvidia-smi")


@pytest.fixture
def machine(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[GpuProbe]]:
    """The hardware probe answers `machine[0]`; nvcc and the toolchain probe are stood in for."""
    found = [NO_GPU]
    gpu_probe.forget()
    monkeypatch.setattr(gpu_probe, "probe_hardware", lambda: found[0])
    monkeypatch.delenv("CUDICE_GPU", raising=False)

    def built(module: Any, path: Any, config: VerifyConfig, *, link: bool, cancel: Any = None) -> BuildResult:
        return BuildResult(True, config.cache_dir, None, (), "", 0.0, True)

    monkeypatch.setattr(api, "build_module", built)
    monkeypatch.setattr(api, "_toolchain_versions", lambda config: {})
    yield found
    gpu_probe.forget()


def verifier_runs_kernels(tmp_path: Path) -> tuple[bool, str]:
    """(whether `verify()` started the run stage, the text of its `verify.no_gpu` note or '')."""
    runs: list[dict[str, Any]] = []

    def run_child(job: dict[str, Any], **kwargs: Any) -> ChildOutcome:
        runs.append(job)
        return ChildOutcome({"verdict": "correct", "stage": "timing"}, 0, "", "", 0.0)

    result = api.verify(
        EXAMPLES / "relu_cuda.py", config=VerifyConfig(cache_dir=tmp_path), run_child=run_child
    )
    notes = [d.message for d in result.diagnostics if d.code == "verify.no_gpu"]
    assert (result.verdict is Verdict.CORRECT) == bool(runs) and (result.verdict is Verdict.COMPILED) == bool(
        notes
    )
    return bool(runs), notes[0] if notes else ""


def pool_size(tmp_path: Path) -> int:
    with VerifyPool(VerifyConfig(cache_dir=tmp_path), num_compile_workers=1, persistent=False) as pool:
        return len(pool.gpus)


class StubRay:
    """Just enough of `ray` for `RayBackend.__init__` to start a local instance (none is started)."""

    def __init__(self) -> None:
        self.init_kwargs: dict[str, Any] = {}

    def is_initialized(self) -> bool:
        return False

    def init(self, **kwargs: Any) -> None:
        self.init_kwargs = kwargs

    def cluster_resources(self) -> dict[str, float]:
        detected = 0  # Ray's own detection: this test machine has no GPU it would find
        gpus = self.init_kwargs.get("num_gpus")
        return {"CPU": 1.0, "GPU": float(detected if gpus is None else gpus)}

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        return SimpleNamespace(options=lambda **options: None) if args else (lambda fn: fn)


def ray_local_gpus(monkeypatch: pytest.MonkeyPatch) -> tuple[int | None, int]:
    """(the num_gpus a local Ray instance is started with, the GPUs RayBackend then schedules on)."""
    from cudice.verifier.dist import ray_backend as distributed

    ray = StubRay()
    monkeypatch.setattr(distributed, "require_ray", lambda: ray)
    backend = distributed.RayBackend(VerifyConfig(), num_cpus=1)
    return ray.init_kwargs["num_gpus"], backend.num_gpus


def server_reason() -> tuple[str | None, bool]:
    """(the server's compile-only reason, the compile_only flag it sends with each verification)."""
    from cudice.server.app import create_server
    from cudice.server.publishing import compile_only_reason
    from cudice.server.verification import verify_config

    ls = create_server()
    return compile_only_reason(ls), verify_config(ls).compile_only


@pytest.mark.parametrize(
    ("env", "hardware", "gpus"),
    [
        (None, NO_GPU, 0),
        (None, TWO_GPUS, 2),
        ("0", TWO_GPUS, 0),
        ("0", NO_GPU, 0),
        ("1", NO_GPU, 1),
        ("1", TWO_GPUS, 2),
    ],
)
def test_every_caller_gets_the_same_answer(
    machine: list[GpuProbe],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    env: str | None,
    hardware: GpuProbe,
    gpus: int,
) -> None:
    machine[0] = hardware
    if env is not None:
        monkeypatch.setenv("CUDICE_GPU", env)
    ran, note = verifier_runs_kernels(tmp_path)
    reason, compile_only = server_reason()
    assert ran is (gpus > 0) and compile_only is (gpus == 0)
    assert pool_size(tmp_path) == gpus
    asked, scheduled = ray_local_gpus(monkeypatch)
    assert asked == (None if env is None else gpus)  # unset: Ray detects the GPUs itself
    assert scheduled == (0 if env is None else gpus)
    if gpus:
        assert reason is None and note == ""
        return
    assert reason is not None and "compiled but not run" in reason
    assert reason in note  # the editor's notice and the verifier's own note give the same cause
    expected = "CUDICE_GPU=0 is set" if env == "0" else "no NVIDIA GPU on this machine"
    assert reason.startswith(expected), reason
