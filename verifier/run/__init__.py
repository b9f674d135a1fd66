"""Running a built candidate: correctness, anti-cheat and timing, behind an OS boundary.

The judge (`judge.py`, started by `sandbox.py`) never runs candidate code itself. It drives two
runner processes (`runner.py`, reached through `runner_link.py` and `channel.py`), one with the
candidate's `ModelNew` and one with the reference `Model`, each inside the boundary
(`boundary.py`, `boundary_init.py`). It draws inputs (`inputs.py`), compares outputs
(`tolerance.py`), seals timed input sets (`seal.py`), checks a digest of every timed output
(`witness.py`, kernels launched by `nvrtc_launch.py`) and turns samples into a speedup
(`timing.py`), one timing per GPU at a time (`gpu_lease.py`). `warm.py` keeps judges started
ahead of jobs for the pool; `gpu_probe.py` says whether kernels can run here at all, and
`reference_probe.py` makes the reference's inputs on the CPU when they cannot.
`dynamic_checks.py` and `judging.py` hold what the runner calls around user code.
"""
