"""What a candidate file says, found without running it.

The document model (`document.py`: the file's `ModelNew`, `load_inline` calls and kernels), the
C++/CUDA strings those calls receive mapped back to the file (`strings.py`, `sourcemap.py`),
positions (`positions.py`), the reference a candidate is judged against (`reference.py`), the
thread-safe Python parser (`pyparse.py`) and the one typed outcome every stage fills in
(`result.py`). Nothing here compiles, imports torch or runs candidate code.
"""
