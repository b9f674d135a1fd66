"""A node of a (simulated) two-node Ray cluster fails mid-run: its tasks finish on the other node.

`ray.cluster_utils.Cluster` starts real raylets on this machine; `remove_node` kills one with
its workers, as a lost machine would. Node start-up costs ~15 s each on a loaded 2-core box,
hence `slow`. Skipped without Ray.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray")

from cudice.verifier.backends import VerifyJob, verify_all  # noqa: E402
from cudice.verifier.config import VerifyConfig  # noqa: E402
from cudice.verifier.dist.ray_backend import RayBackend  # noqa: E402
from cudice.verifier.pool import VerifyPool  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402
from ray_stand_in import Gate, started  # noqa: E402

HERE = Path(__file__).resolve().parents[1]  # tests/verifier: the stand-ins and the corpus
WAIT_S = 180.0


@pytest.fixture
def two_nodes() -> Iterator[tuple[Cluster, Any]]:
    """A head node and a second node, one CPU each; yields (cluster, the second node)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])))
        mp.setenv("RAY_AUTH_MODE", "disabled")
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
        try:
            second = cluster.add_node(num_cpus=1)
            ray.init(address=cluster.address, log_to_driver=False)
            cluster.wait_for_nodes()
            yield cluster, second
        finally:
            ray.shutdown()
            cluster.shutdown()


@pytest.mark.slow
def test_a_lost_nodes_tasks_are_requeued_on_the_other_node(
    two_nodes: tuple[Cluster, Any], tmp_path: Path
) -> None:
    cluster, second = two_nodes
    # static verdicts only (the violations are not compiled, as in test_ray_backend.py's cheap
    # jobs): what is checked is where the tasks run, and a build would cost ~20 s per candidate
    config = VerifyConfig(cache_dir=tmp_path / "cache", compile_only=True, compile_violations=False)
    static = [p for p in sorted((HERE / "corpus").glob("*.py")) if "kind=static" in p.read_text()][:4]
    jobs = [VerifyJob(p) for p in static]
    with VerifyPool(config, gpus=[]) as pool:
        expected = [r.to_dict()["diagnostics"] for r in verify_all(pool, jobs)]
    gate = tmp_path / "gate"
    gate.mkdir()
    with RayBackend(config, verify_fn=Gate(gate, quorum=0, hold=True)) as backend:
        futures = [backend.submit(j.path, key=f"k{i}") for i, j in enumerate(jobs)]
        deadline = time.monotonic() + WAIT_S
        while len(started(gate)) < 2:  # one task held on each node
            assert time.monotonic() < deadline, "two tasks never reached the gate"
            time.sleep(0.05)
        cluster.remove_node(second)  # the machine is lost, with the task it was running
        (gate / "go").touch()
        results = [f.result(timeout=WAIT_S) for f in futures]
        nodes = {node for node, _ in backend.placements.values()}
    assert [r.to_dict()["diagnostics"] for r in results] == expected
    assert second.node_id not in nodes and len(nodes) == 1  # everything finished on the surviving head
    assert len(started(gate)) > len(jobs)  # the lost node's task started again
