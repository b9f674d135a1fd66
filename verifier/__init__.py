"""cudice verifier: parse → static checks → compile → load → correctness → timing.

One `verify()` (api.py) is the truth for editor diagnostics, the RL reward and benchmark scores.
The stages live in subpackages, in the order a candidate meets them: `source/` (what the file
says), `static/` (what it may not do), `build/` (compiling it), `run/` (running and timing it
behind the OS boundary), then `eval/` (scores over many problems) and `dist/` (the same on a Ray
cluster). At the top: `api.py`, `config.py`, `pool.py` and `backends.py` (many verifications at
once), `process.py` (child-process lifetime) and `cli.py` (`cudice verify`).
Importing this package does not import torch; kernels run in child processes.
"""
