"""Compiling a candidate: what `load_inline` would do, faster, cancellable and with exact errors.

`compile.py` is the full build with torch's own flags (`toolchain.py`) over the files torch would
write (`generated.py`), with an object cache (`objects.py`), a slim header set and CUDA-library
stand-ins (`headers.py`), a binding without pybind11 (`cabi.py`) and nvcc's own steps side by side
(`nvcc_split.py`). Compiler output becomes located diagnostics (`messages.py`). The quick check
(`quick.py` over a warm `clangd.py`, and `nvrtc_check.py` for raw `.cu` files) gives first
diagnostics before the build ends; `kernel_symbols.py` names the kernels a built library holds.
"""
