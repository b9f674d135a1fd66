"""The GPU probe alone: what each hardware answer and each `CUDICE_GPU` value gives (no real GPU)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cudice.verifier.run import gpu_probe
from cudice.verifier.run.gpu_probe import GpuProbe, probe_hardware


def smi(stdout: str = "", returncode: int = 0, stderr: str = "", calls: list[list[str]] | None = None) -> Any:
    def run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        if calls is not None:
            calls.append(cmd)
        return subprocess.CompletedProcess(cmd, returncode, stdout, stderr)

    return run


ON_PATH = {"nvidia-smi": "/usr/bin/nvidia-smi"}.get
TWO = "GPU 0: NVIDIA H200 (UUID: GPU-a)\nGPU 1: NVIDIA H200 (UUID: GPU-b)\n"


def test_nvidia_smi_counts_the_gpus_it_lists(tmp_path: Path) -> None:
    calls: list[list[str]] = []
    found = probe_hardware(
        ON_PATH, smi(TWO + "  MIG 1g.18gb Device 0: (UUID: MIG-c)\n", calls=calls), str(tmp_path)
    )
    assert found == GpuProbe(2, None, "nvidia-smi") and found.is_usable
    assert calls == [["/usr/bin/nvidia-smi", "-L"]]


def test_a_failing_driver_says_exit_status_and_message(tmp_path: Path) -> None:
    found = probe_hardware(
        ON_PATH,
        smi(
            returncode=9,
            stderr="NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\nmore\n",
        ),
        str(tmp_path),
    )
    assert found.num_gpus == 0 and not found.is_usable and found.reason is not None
    assert "exit 9: NVIDIA-SMI has failed because it couldn't communicate" in found.reason
    assert "compiled but not run" in found.reason and "CUDICE_GPU=1" in found.reason


def test_a_hung_or_missing_nvidia_smi_is_no_gpu_with_a_reason(tmp_path: Path) -> None:
    def hang(cmd: list[str], **kwargs: Any) -> Any:
        raise subprocess.TimeoutExpired(cmd, kwargs["timeout"])

    def vanished(cmd: list[str], **kwargs: Any) -> Any:
        raise FileNotFoundError(2, "No such file or directory")

    hung = probe_hardware(ON_PATH, hang, str(tmp_path))
    assert hung.num_gpus == 0 and hung.reason is not None and "did not answer within 20 s" in hung.reason
    gone = probe_hardware(ON_PATH, vanished, str(tmp_path))
    assert gone.num_gpus == 0 and gone.reason is not None and "could not start" in gone.reason
    empty = probe_hardware(ON_PATH, smi("No devices were found\n"), str(tmp_path))
    assert empty.num_gpus == 0 and empty.reason is not None and "lists no GPU" in empty.reason


def test_without_nvidia_smi_the_device_nodes_decide(tmp_path: Path) -> None:
    def no_run(cmd: list[str], **kwargs: Any) -> Any:
        raise AssertionError("nvidia-smi is not on PATH: nothing may be run")

    none = probe_hardware(lambda name: None, no_run, str(tmp_path))
    assert none.num_gpus == 0 and none.source == "none" and none.reason is not None
    assert "no nvidia-smi on PATH" in none.reason and "CUDICE_GPU=1" in none.reason
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-caps"):
        (tmp_path / name).touch()
    assert probe_hardware(lambda name: None, no_run, str(tmp_path)) == GpuProbe(2, None, "device nodes")


@pytest.fixture
def hardware(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[GpuProbe]]:
    """Replace the hardware probe by `found[0]` (three GPUs unless the test sets another)."""
    found = [GpuProbe(3, None, "nvidia-smi")]
    gpu_probe.forget()
    monkeypatch.setattr(gpu_probe, "probe_hardware", lambda: found[0])
    monkeypatch.delenv("CUDICE_GPU", raising=False)
    yield found
    gpu_probe.forget()


@pytest.mark.parametrize(
    ("env", "hw", "expected"),
    [
        (None, 3, 3),
        (None, 0, 0),
        ("1", 0, 1),
        ("1", 3, 3),
        ("0", 3, 0),
        ("0", 0, 0),
    ],
)
def test_cudice_gpu_overrides_the_hardware(
    hardware: list[GpuProbe], monkeypatch: pytest.MonkeyPatch, env: str | None, hw: int, expected: int
) -> None:
    hardware[0] = GpuProbe(
        hw, None if hw else "no NVIDIA GPU on this machine", "nvidia-smi" if hw else "none"
    )
    if env is not None:
        monkeypatch.setenv("CUDICE_GPU", env)
    found = gpu_probe.probe()
    assert found.num_gpus == expected == gpu_probe.count_gpus()
    assert gpu_probe.gpu_available() is (expected > 0)
    assert (gpu_probe.gpu_absent_reason() is None) is (expected > 0)
    if env == "0":
        assert found.reason is not None and found.reason.startswith("CUDICE_GPU=0 is set")
        assert found.source == "CUDICE_GPU"


def test_an_unknown_value_is_warned_about_once_and_the_hardware_decides(
    hardware: list[GpuProbe], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("CUDICE_GPU", "no-thanks")
    with caplog.at_level(logging.WARNING, logger="cudice.verifier.run.gpu_probe"):
        assert gpu_probe.count_gpus() == 3 and gpu_probe.count_gpus() == 3
    warned = [r.getMessage() for r in caplog.records if "no-thanks" in r.getMessage()]
    assert len(warned) == 1 and "neither 0 nor 1" in warned[0] and "CUDICE_GPU=0" in warned[0]


def test_the_hardware_probe_runs_once_per_process_even_from_many_threads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runs: list[int] = []
    release = threading.Event()

    def slow() -> GpuProbe:
        runs.append(1)
        assert release.wait(60)
        return GpuProbe(1, None, "nvidia-smi")

    gpu_probe.forget()
    monkeypatch.setattr(gpu_probe, "probe_hardware", slow)
    monkeypatch.delenv("CUDICE_GPU", raising=False)
    try:
        gpu_probe.start_hardware_probe()
        gpu_probe.start_hardware_probe()  # a second server in the process starts no second probe
        answers: list[int] = []
        askers = [threading.Thread(target=lambda: answers.append(gpu_probe.count_gpus())) for _ in range(4)]
        for t in askers:
            t.start()
        release.set()
        for t in askers:
            t.join(60)
        assert answers == [1, 1, 1, 1] and runs == [1]
    finally:
        release.set()
        gpu_probe.forget()


@pytest.mark.gpu
def test_on_a_gpu_machine_the_probe_counts_what_torch_counts() -> None:
    if os.environ.get("CUDA_VISIBLE_DEVICES") is not None:
        pytest.skip("CUDA_VISIBLE_DEVICES hides GPUs from torch that nvidia-smi still lists")
    found = probe_hardware()
    out = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.cuda.device_count())"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    assert found.source == "nvidia-smi" and found.reason is None
    assert found.num_gpus == int(out.stdout.strip()) >= 1
