"""Run stages go to `num_gpus=1` tasks: one candidate per GPU at a time, each child sees its GPU.

Ray is started with one *declared* GPU on this CPU machine (Ray schedules by the resource and
sets `CUDA_VISIBLE_DEVICES` whether or not the device exists). The run stage is a stand-in
child (`ray_gpu_stand_in`) that notes its GPU and any other run active at the same time.
Skipped without Ray.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from cudice.verifier.backends import VerifyJob, verify_all  # noqa: E402
from cudice.verifier.config import VerifyConfig  # noqa: E402
from cudice.verifier.distributed import RayBackend  # noqa: E402
from cudice.verifier.result import Verdict  # noqa: E402
from ray_stand_in import GpuProbe  # noqa: E402

HERE = Path(__file__).resolve().parent


@pytest.fixture
def one_gpu_cluster() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])))
        mp.setenv("RAY_AUTH_MODE", "disabled")
        ray.init(num_cpus=2, num_gpus=1, include_dashboard=False, log_to_driver=False)
        try:
            yield
        finally:
            ray.shutdown()


def test_one_candidate_per_gpu_at_a_time(one_gpu_cluster: None, tmp_path: Path) -> None:
    probe = tmp_path / "probe"
    probe.mkdir()
    static = [p for p in sorted((HERE / "corpus").glob("*.py")) if "kind=static" in p.read_text()][:4]
    config = VerifyConfig(cache_dir=tmp_path / "cache", compile_only=True)
    with RayBackend(config, verify_fn=GpuProbe(probe)) as backend:
        assert backend.num_gpus == 1
        results = verify_all(backend, [VerifyJob(p) for p in static], timeout_s=300)
    assert all(r.verdict is Verdict.STATIC_VIOLATION for r in results)
    runs = {p.stem: json.loads(p.read_text()) for p in probe.glob("ran-*.json")}
    assert sorted(runs) == sorted(f"ran-{p.stem}" for p in static)  # every run stage went to the GPU task
    assert {r["gpu"] for r in runs.values()} == {"0"}  # the child saw the task's GPU
    assert all(r["overlap"] == [] for r in runs.values()), runs  # never two on the one GPU at once
