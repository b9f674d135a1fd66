"""Static checks: a candidate that cheats, or cannot be judged, is rejected before it is built.

`checks.py` is the entry point (`check_document(doc)`); the Python side resolves names
(`names.py`, `bindings.py`), finds what `ModelNew(...)(x)` can reach (`reach.py`,
`protocol.py`) and judges its forward against the glue policy (`forward.py`, `policy.py`,
`module_rules.py`); the C++/CUDA side scans the text `load_inline` receives (`sources.py`,
`load_inline.py`, `cuda.py`, `cpp_*.py`). AST and text only: nothing is compiled or run.
"""
