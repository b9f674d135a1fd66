#!/usr/bin/env bash
# The judge's GPU checks in one call: install cudice from this tree (as bench/run_gpu.sh does), the
# timing-fidelity table (bench/timing_fidelity.py), then the runtime and adversarial corpora on the GPU.
# Usage on the GPU box: bash bench/gpu_judge.sh [--quick]   (logs and JSON under $OUT)
# The device tool copies the working tree, uncommitted edits included. To measure exactly a commit,
# make `git archive -o .gpu_snapshot.tar HEAD` here first and carry it (it is git-ignored): the
# script then runs from that snapshot.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ -f .gpu_snapshot.tar ] && [ -z "${CUDICE_IN_SNAPSHOT:-}" ]; then
  snap=/tmp/cudice_snapshot; rm -rf "$snap"; mkdir -p "$snap" && tar -xf .gpu_snapshot.tar -C "$snap"
  echo "running from .gpu_snapshot.tar"
  CUDICE_IN_SNAPSHOT=1 exec bash "$snap/bench/gpu_judge.sh" "$@"
fi
. bench/gpu_install.sh  # sets $out, installs cudice from this tree
nvidia-smi -L
timeout "${FIDELITY_TIMEOUT:-300}" python3 bench/timing_fidelity.py ${1:-} --out /tmp/fid ${FIDELITY_ARGS:-} >"$out/fidelity.log" 2>&1
grep -vE "^build " "$out/fidelity.log" | cut -c1-900 | tail -60
cp /tmp/fid/fidelity.json "$out/" 2>/dev/null
[ -d /tmp/fid/samples ] && tar czf "$out/timing_samples.tar.gz" -C /tmp/fid samples  # per-call times, for offline study
timeout "${CORPUS_TIMEOUT:-300}" python3 -m pytest -m gpu -q -s -p no:cacheprovider ${CORPUS_TESTS:-tests/verifier/run/test_adversarial_gpu.py} \
  >"$out/corpus.log" 2>&1
grep -E "^(adv|honest|hostile|dyn)|passed|failed|FAILED|Error" "$out/corpus.log" | cut -c1-400 | tail -70
