"""cudice's own training corpus: generated KernelBench problems with template CUDA solutions.

`python -m cudice.model.train.corpus build OUT_DIR [--seed N]` writes the problems, their
solutions, the CuKe SFT pairs and both BiC-RL task files (`build.py`); `families.py` lists the
problem families and `kernels.py` their CUDA templates; `split.py` holds out compositions;
`tokenizer.py` and `init_model.py` make the demo model's tokenizer and initial checkpoint;
`recipe.py` is the GPU training recipe's driver (`bench/train_demo.sh`). docs/model.md,
"The demo model", says what the corpus covers and what it does not.
"""
