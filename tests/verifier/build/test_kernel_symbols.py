"""`own_kernels` on libraries nvcc builds here (no GPU needed): a plain kernel, template
instantiations, a kernel in a namespace, an `extern "C"` kernel, CUB's `DeviceReduce` compiled in,
and a kernel named like ATen's; names agree with the profiler's form and feed the runtime check.
Where the toolkit has `cuobjdump`, the built-in fatbin reader is checked against it."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest
from cudice.verifier.build import kernel_symbols as ks
from cudice.verifier.build.toolchain import cuda_home
from verifier_marks import needs_nvcc

SOURCE = r"""
#include <cub/cub.cuh>
__global__ void relu_kernel(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] > 0 ? x[i] : 0;
}
template <typename T, int B>
__global__ void scale_kernel(const T* x, T* y, T s, int n) {
  int i = blockIdx.x * B + threadIdx.x;
  if (i < n) y[i] = x[i] * s;
}
namespace mine { namespace detail {
__global__ void sum_rows(const float* x, float* y, long n) { if (threadIdx.x == 0) y[0] = x[n - 1]; }
} }
namespace at { namespace native {
__global__ void vectorized_elementwise_kernel(float* y) { y[0] = 4; }
} }
extern "C" __global__ void c_kernel(float* y) { y[0] = 1; }
void launch(const float* x, float* y, int n, cudaStream_t s) {
  relu_kernel<<<(n + 255) / 256, 256, 0, s>>>(x, y, n);
  scale_kernel<float, 256><<<(n + 255) / 256, 256, 0, s>>>(x, y, 2.0f, n);
  scale_kernel<double, 128><<<1, 128, 0, s>>>(nullptr, nullptr, 2.0, 0);
  mine::detail::sum_rows<<<1, 1, 0, s>>>(x, y, n);
  at::native::vectorized_elementwise_kernel<<<1, 1, 0, s>>>(y);
  c_kernel<<<1, 1, 0, s>>>(y);
  void* tmp = nullptr; size_t bytes = 0;
  cub::DeviceReduce::Sum(tmp, bytes, x, y, n, s);
}
"""
SMALL = "__global__ void relu_kernel(const float* x, float* y, int n) { if (n) y[0] = x[0]; }\n"

# The profiler's names for these kernels (libstdc++'s demangler, as in torch's profiler).
EXPECTED = {
    "relu_kernel(float const*, float*, int)",
    "void scale_kernel<float, 256>(float const*, float*, float, int)",
    "void scale_kernel<double, 128>(double const*, double*, double, int)",
    "mine::detail::sum_rows(float const*, float*, long)",
    "at::native::vectorized_elementwise_kernel(float*)",
    "c_kernel",
    "_Z11relu_kernelPKfPfi",
}


def _nvcc(tmp: Path, source: str, name: str, *flags: str) -> Path:
    cu, lib = tmp / f"{name}.cu", tmp / f"{name}.so"
    cu.write_text(source)
    nvcc = str(Path(cuda_home()) / "bin" / "nvcc")
    cmd = [nvcc, "-shared", "-Xcompiler", "-fPIC", "-gencode", "arch=compute_90,code=sm_90", *flags]
    subprocess.run([*cmd, "-o", str(lib), str(cu)], check=True, capture_output=True, timeout=300)
    return lib


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _nvcc(tmp_path_factory.mktemp("kernel-symbols"), SOURCE, "k")


@needs_nvcc
def test_own_kernels_lists_every_kernel_in_the_profilers_form(library: Path) -> None:
    t0 = time.perf_counter()
    names = ks.own_kernels(library)
    first_s = time.perf_counter() - t0
    assert names >= EXPECTED, EXPECTED - names
    cub = {n for n in names if n.startswith("void cub::")}
    assert any("DeviceReduceKernel<" in n for n in cub) and any(
        "DeviceReduceSingleTileKernel<" in n for n in cub
    )
    assert not any("launch" in n for n in names)  # host functions are not kernels
    t0 = time.perf_counter()
    assert ks.own_kernels(library) is names  # cached by content
    assert time.perf_counter() - t0 < first_s
    assert ks.list_entry_names(library) == names  # the child computes what this process would


@needs_nvcc
def test_the_library_set_feeds_the_runtime_check(library: Path) -> None:
    torch = pytest.importorskip("torch")  # noqa: F841 - dynamic_checks imports torch
    from cudice.verifier.run import dynamic_checks as dc

    own = ks.own_kernels(library)
    cub = sorted(n for n in own if "DeviceReduceKernel<" in n and not n.startswith("_Z"))
    aten = (
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
        "std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)"
    )
    runs = [dc.KernelRun("relu_kernel(float const*, float*, int)", 20.0), dc.KernelRun(cub[0], 30.0)]
    assert dc.check_own_kernels_did_work([*runs, dc.KernelRun(aten, 1.0)], own) == []
    # compiled in, but in ATen's namespace: never the candidate's
    named_like_aten = dc.KernelRun("at::native::vectorized_elementwise_kernel(float*)", 50.0)
    diags = dc.check_own_kernels_did_work([*runs, named_like_aten], own)
    assert [d.code for d in diags] == ["dynamic.torch_kernels_did_work"]
    assert "compiled into your library" in diags[0].message


@needs_nvcc
def test_compressed_images_need_cuobjdump_or_fail_closed(tmp_path: Path) -> None:
    plain = _nvcc(tmp_path, SMALL, "plain")
    packed = _nvcc(tmp_path, SMALL, "packed", "--compress-mode=size")
    if ks.find_cuobjdump() is None:
        with pytest.raises(ks.KernelSymbolsError, match="cuobjdump"):
            ks.own_kernels(packed)
    else:
        assert ks.own_kernels(packed) == ks.own_kernels(plain)
    # compressed PTX next to readable cubins (what `+PTX` arch lists build) is skipped
    with_ptx = _nvcc(tmp_path, SMALL, "with_ptx", "-gencode", "arch=compute_90,code=compute_90")
    assert ks.list_entry_names(with_ptx) == ks.own_kernels(plain)


@needs_nvcc
def test_a_bare_cubin_is_read_too(tmp_path: Path) -> None:
    cu, cubin = tmp_path / "k.cu", tmp_path / "k.cubin"
    cu.write_text('extern "C" __global__ void raw_kernel(float* y) { y[0] = 1; }\n' + SMALL)
    nvcc = str(Path(cuda_home()) / "bin" / "nvcc")
    cmd = [nvcc, "-cubin", "-arch=sm_90", "-o", str(cubin), str(cu)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=300)
    assert ks.own_kernels(cubin) == {
        "raw_kernel",
        "relu_kernel(float const*, float*, int)",
        "_Z11relu_kernelPKfPfi",
    }


@needs_nvcc
@pytest.mark.skipif(ks.find_cuobjdump() is None, reason="needs the toolkit's cuobjdump")
def test_built_in_reader_agrees_with_cuobjdump(library: Path) -> None:
    assert ks.entry_symbols(library) == ks._cuobjdump_entries(library, 30.0)


@pytest.mark.parametrize(
    "listing",
    [
        "FUNC          GLOBAL  DEFAULT    ENTRY                                _Z11relu_kernelPKfPfi",  # 13.4
        "STT_FUNC         STB_GLOBAL STO_ENTRY      _Z11relu_kernelPKfPfi",  # 13.0
    ],
)
def test_cuobjdump_listings_of_either_toolkit_version_parse(listing: str) -> None:
    other = "STT_OBJECT       STB_LOCAL  STO_DEFAULT    _ZN34_INTERNAL_cuda3std3__48in_placeE\n"
    assert ks._CUOBJDUMP_ENTRY.findall(other + listing + "\n") == ["_Z11relu_kernelPKfPfi"]


def test_libraries_without_device_code_fail_closed(tmp_path: Path) -> None:
    junk = tmp_path / "junk.so"
    junk.write_bytes(b"not an ELF file at all")
    with pytest.raises(ks.KernelSymbolsError, match="not a readable ELF"):
        ks.own_kernels(junk)
    with pytest.raises(ks.KernelSymbolsError, match="cannot read"):
        ks.own_kernels(tmp_path / "missing.so")
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("needs a C compiler for a host-only library")
    src, host = tmp_path / "host.c", tmp_path / "host.so"
    src.write_text("int f(int x) { return x + 1; }\n")
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(host), str(src)], check=True, timeout=120)
    with pytest.raises(ks.KernelSymbolsError, match="no CUDA device code"):
        ks.own_kernels(host)


@needs_nvcc
def test_a_listing_past_its_timeout_fails_closed(library: Path, tmp_path: Path) -> None:
    fresh = tmp_path / "fresh.so"
    fresh.write_bytes(library.read_bytes() + b"\0")  # another content hash: not cached
    with pytest.raises(ks.KernelSymbolsError, match="took over"):
        ks.own_kernels(fresh, timeout_s=0.001)
