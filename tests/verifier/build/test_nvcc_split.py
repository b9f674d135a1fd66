"""nvcc's steps with the two front ends side by side (verifier/build/nvcc_split.py) give nvcc's
object and messages.

Small `.cu` files without torch (a second or two each): the object equals plain nvcc's byte for
byte (nvcc run with `--keep`, whose intermediate names are as stable as the plan's: without it
nvcc's own temporary names make two plain runs differ); a host-side syntax error, a
device-side error and a warning come out as nvcc prints them, with nvcc's failure; shapes the
plan does not know (two architectures, relocatable device code) are left to nvcc; a cancel
stops the steps.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from cudice.verifier.build import nvcc_split
from cudice.verifier.build.objects import run_process
from verifier_marks import needs_nvcc

pytestmark = needs_nvcc

GOOD = """
#include <cstdio>
__global__ void twice(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}
void launch(const float* x, float* y, int n) { twice<<<(n + 255) / 256, 256>>>(x, y, n); }
"""
HOST_ERROR = GOOD.replace("void launch(", "void launch(int unused\n")  # broken declaration
DEVICE_ERROR = GOOD.replace("y[i] = 2.0f * x[i];", 'y[i] = 2.0f * x[i]; printf("%d", host_only());').replace(
    "#include <cstdio>", "#include <cstdio>\nint host_only() { return 1; }"
)
WARNING = GOOD.replace("int i =", "int unused_but_set = 3; int i =")


def _nvcc() -> str:
    found = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    return found


def _cmd(src: Path, obj: Path, *extra: str) -> list[str]:
    return [
        _nvcc(),
        "-gencode=arch=compute_90,code=sm_90",
        "--compiler-options",
        "-fPIC",
        *extra,
        "-c",
        str(src),
        "-o",
        str(obj),
    ]


def _both(tmp_path: Path, text: str, *extra: str) -> tuple[tuple[int, str], tuple[int, str], nvcc_split.Plan]:
    src = tmp_path / "k.cu"
    src.write_text(text)
    (tmp_path / "kept").mkdir()
    plain = run_process(
        _cmd(src, tmp_path / "plain.o", "--keep", "--keep-dir", str(tmp_path / "kept"), *extra),
        600,
        None,
        tmp_path,
    )
    p = nvcc_split.plan(
        _cmd(src, tmp_path / "split.o", *extra),
        tmp_path / "steps",
        "0123456789abcdef",
        nvcc_split.environment(),
    )
    assert p is not None
    split = nvcc_split.run(p, 600, None, tmp_path)
    return (plain[0], plain[1]), (split[0], split[1]), p


def test_the_object_is_nvccs(tmp_path: Path) -> None:
    (rc_plain, out_plain), (rc_split, out_split), p = _both(tmp_path, GOOD)
    assert rc_plain == 0 and rc_split == 0 and out_plain == out_split == ""
    assert (tmp_path / "plain.o").read_bytes() == (tmp_path / "split.o").read_bytes()
    assert (
        tmp_path / "kept" / "k.module_id"
    ).read_text() != p.module_id  # nvcc drew its own id; it is not kept
    assert not p.keep_dir.exists()  # the intermediates are gone


@pytest.mark.parametrize(
    "text", [HOST_ERROR, DEVICE_ERROR, WARNING], ids=["host_error", "device_error", "warning"]
)
def test_messages_and_failure_are_nvccs(tmp_path: Path, text: str) -> None:
    (rc_plain, out_plain), (rc_split, out_split), _ = _both(tmp_path, text)
    assert (rc_plain == 0) == (rc_split == 0)
    assert out_split == out_plain
    expected = {HOST_ERROR: "error", DEVICE_ERROR: "__host__ function", WARNING: "warning"}[text]
    assert expected in out_split  # each case really says something
    assert (rc_split == 0) == (text is WARNING)


@pytest.mark.parametrize("extra", [("-gencode=arch=compute_80,code=sm_80",), ("-rdc=true",)])
def test_shapes_it_does_not_know_are_left_to_nvcc(tmp_path: Path, extra: tuple[str, ...]) -> None:
    src = tmp_path / "k.cu"
    src.write_text(GOOD)
    assert (
        nvcc_split.plan(
            _cmd(src, tmp_path / "k.o", *extra), tmp_path / "steps", "0" * 16, nvcc_split.environment()
        )
        is None
    )


def test_a_cancel_stops_the_steps(tmp_path: Path) -> None:
    class Cancelled:
        def is_set(self) -> bool:
            return True

    src = tmp_path / "k.cu"
    src.write_text(GOOD)
    p = nvcc_split.plan(_cmd(src, tmp_path / "k.o"), tmp_path / "steps", "0" * 16, nvcc_split.environment())
    assert p is not None
    _, _, cancelled, _ = nvcc_split.run(p, 600, Cancelled(), tmp_path)  # type: ignore[arg-type]
    assert cancelled and not (tmp_path / "k.o").exists()
    left = subprocess.run(["pgrep", "-f", str(p.keep_dir)], capture_output=True, text=True).stdout.split()
    assert [pid for pid in left if int(pid) != os.getpid()] == []
