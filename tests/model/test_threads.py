"""CPU thread defaults (`cudice.model.threads`): one thread per physical core, never over the user."""

from __future__ import annotations

import os

import pytest
from cudice.model import threads


def test_physical_cpus_divides_the_affinity_by_the_smt_width(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    real_open = open

    def fake_open(path: str, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        if str(path).endswith("thread_siblings_list"):
            import io

            return io.StringIO("0,4\n")
        return real_open(path, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr("builtins.open", fake_open)
    assert threads.physical_cpus() == 4
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert threads.physical_cpus() == 1  # never 0, also when one logical CPU of an SMT pair is ours


def test_cpu_thread_env_sets_only_what_the_user_left_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setattr(threads, "physical_cpus", lambda: 3)
    assert threads.cpu_thread_env() == {
        "OMP_NUM_THREADS": "3",
        "MKL_NUM_THREADS": "3",
        "OMP_WAIT_POLICY": "PASSIVE",
    }
    assert threads.cpu_thread_env(num_threads=1)["OMP_NUM_THREADS"] == "1"
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    assert "OMP_NUM_THREADS" not in threads.cpu_thread_env()


def test_apply_torch_threads_follows_omp_num_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    try:
        assert threads.apply_torch_threads() == 1
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
