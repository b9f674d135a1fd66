"""cudice verifier: parse → static checks → compile → load → correctness → timing.

One `verify()` is the truth for editor diagnostics, the RL reward and benchmark scores.
Importing this package does not import torch; kernels run in child processes.
"""
