"""cudice's own training corpus: generated KernelBench problems with template CUDA solutions.

`python -m cudice.model.train.corpus build OUT_DIR [--seed N]` writes the problems, their
solutions, the CuKe SFT pairs and both BiC-RL task files (`build.py`); `families.py` lists the
problem families, `ops.py` their operators and `kernels.py` their CUDA templates; `files.py`
renders the reference and `ModelNew` files; `split.py` holds out compositions; `init_model.py`
makes the demo model's tokenizer and initial checkpoint; `verify_templates.py` checks the
templates with the verifier; `recipe.py` (+ `evaluate.py`) is the GPU training recipe's driver
(`bench/train_demo.sh`); `install.py` makes a trained checkpoint the bundled default model.
docs/model.md, "The demo model", says what the corpus covers and what it does not.
"""
