#!/usr/bin/env bash
# The demo model's training recipe on the GPU box, one phase per call (each about 8 minutes):
#   phase a: corpus + tokenizer + init, SFT; template verification per family alongside; export
#   phase b: more SFT, then BiC-RL (infilling, then end-to-end, verifier rewards); export both
#   phase c: held-out evaluation of both checkpoints with `cudice eval`, side by side
#   phase fit: the one-call recipe (model/train/corpus/recipe_fit.py): time-budgeted SFT of the
#     20M model on a corpus and tokenizer built on the CPU box and carried in .ckpt/, then the
#     held-out parse/exact scores of the new and the shipped checkpoint side by side
# Usage:  OUT=... bash bench/train_demo.sh a [--smoke]
#         OUT=... bash bench/train_demo.sh b [--smoke]      # needs .ckpt/demo_sft.tar (phase a's)
#         OUT=... bash bench/train_demo.sh c [--smoke]      # needs .ckpt/demo_sft.tar + demo_rl.tar (b's)
#         OUT=... bash bench/train_demo.sh fit               # needs .ckpt/corpus.tar.gz + .ckpt/tokenizer:
#   python -m cudice.model.train.corpus build /tmp/c --train-per-family 3000 &&
#   (cd /tmp/c && tar czf $REPO/.ckpt/corpus.tar.gz sft.jsonl manifest.json problems solutions) &&
#   python -c 'from cudice.model.train.corpus.init_model import train_tokenizer as t;
#              t("/tmp/c/sft.jsonl", 8192).save_pretrained(".ckpt/tokenizer")'
#   fit returns demo_fit.tar.part00.. (join with cat), results.json, answers.jsonl, fit.log,
#   templates.json, verified.json (--eval-per-family K), infill_answers.jsonl (--infill-per-family J:
#   held-out wrappers and bench/infill_scaffolds infilled, verified with the e2e answers); DEMO_START=.ckpt/demo_fit.tar.part00 continues from a returned checkpoint.
#   fit takes recipe_fit's options after the phase, e.g. --focus-weight 16 (the op lines' loss weight).
#   DEMO_START may also be a checkpoint folder. A 20M checkpoint (41 MB) does not fit the carry
#   beside the tree, so to continue one in a later session put its files over model/assets/demo/
#   in the working tree (uncommitted; same size), pass DEMO_START=model/assets/demo --skip-old,
#   and `git checkout model/assets/demo` afterwards.
# What comes back in $OUT (each file <= 16 MiB): demo_sft.tar / demo_rl.tar — a whole checkpoint
# with bf16 weights, one file —, templates.json (a), results.json (c), phase_*.log.
# Between calls carry the returned tars in .ckpt/ (DEMO_START, DEMO_SFT, DEMO_RL override paths).
# `bc` runs b then c in ONE call (DEMO_MINUTES_B, default 4, DEMO_MINUTES_C, default 4.5; extra
# SFT DEMO_SFT_MINUTES, default 1): two calls in all (a, bc) when machine start-ups are costly.
# Knobs: DEMO_MINUTES (phase budget, default 8), DEMO_WORK (scratch, default /tmp/cudice-demo),
# PYTHON (default python3), DEMO_SFT_MINUTES (phase b's extra SFT, default 2).
# Driver: model/train/corpus/recipe.py (docs/model.md, "The demo model").
set -euo pipefail
cd "$(dirname "$0")/.."
phase="${1:?usage: bash bench/train_demo.sh a|b [--smoke]}"; shift
out="${OUT:-bench/out}"; mkdir -p "$out"
work="${DEMO_WORK:-/tmp/cudice-demo}"
py="${PYTHON:-python3}"
export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"

if ! "$py" -c "import cudice.model.train.corpus.recipe" 2>/dev/null; then
  if [ -d .whl ]; then
    "$py" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
  fi
  if ! "$py" -m pip install -q --no-deps --no-build-isolation -e . >"$out/install.log" 2>&1; then
    tree=/tmp/cudice_tree; rm -rf "$tree"; mkdir -p "$tree/cudice"
    for pkg in server model verifier; do ln -s "$PWD/$pkg" "$tree/cudice/$pkg"; done
    export PYTHONPATH="$tree${PYTHONPATH:+:$PYTHONPATH}"
  fi
fi

case "$phase" in
  a) exec "$py" -m cudice.model.train.corpus.recipe a --work "$work" --out "$out" \
       --minutes "${DEMO_MINUTES:-8}" "$@" ;;
  b) exec "$py" -m cudice.model.train.corpus.recipe b --work "$work" --out "$out" \
       --minutes "${DEMO_MINUTES:-8}" --start "${DEMO_START:-.ckpt/demo_sft.tar}" \
       --sft-minutes "${DEMO_SFT_MINUTES:-2}" "$@" ;;
  c) exec "$py" -m cudice.model.train.corpus.recipe c --work "$work" --out "$out" \
       --minutes "${DEMO_MINUTES:-8}" --sft "${DEMO_SFT:-.ckpt/demo_sft.tar}" --rl "${DEMO_RL:-.ckpt/demo_rl.tar}" "$@" ;;
  bc) # b then c in one call on one machine: c reads b's tars straight from $OUT
     "$py" -m cudice.model.train.corpus.recipe b --work "$work" --out "$out" --minutes "${DEMO_MINUTES_B:-4}" \
       --start "${DEMO_START:-.ckpt/demo_sft.tar}" --sft-minutes "${DEMO_SFT_MINUTES:-1}" "$@"
     exec "$py" -m cudice.model.train.corpus.recipe c --work "$work" --out "$out" --minutes "${DEMO_MINUTES_C:-4.5}" \
       --sft "$out/demo_sft.tar" --rl "$out/demo_rl.tar" "$@" ;;
  fit) exec "$py" -m cudice.model.train.corpus.recipe_fit --work "$work" --out "$out" \
       --minutes "${DEMO_MINUTES:-8.2}" --corpus-tar "${DEMO_CORPUS:-.ckpt/corpus.tar.gz}" \
       --tokenizer "${DEMO_TOKENIZER:-.ckpt/tokenizer}" ${DEMO_START:+--start "$DEMO_START"} "$@" ;;
  *) echo "unknown phase '$phase' (a, b, c, bc or fit)" >&2; exit 2 ;;
esac
