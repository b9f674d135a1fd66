#!/usr/bin/env bash
# Timing staging on the GPU, both ways, in one call: install cudice from this tree (as
# bench/gpu_judge.sh does), the shared-staging GPU test, then bench/timing_fidelity.py on the same
# kernels with `--staging socket` and with `--staging shared` (VerifyConfig.timing_staging), every
# per-call timing sample kept (CUDICE_TIMING_SAMPLES) and returned as one archive per way.
# Usage on the GPU box: bash bench/gpu_staging.sh   (knobs: STAGING_ONLY, the --only list, or
# "quick" for timing_fidelity's --quick set; STAGING_WAYS, default "shared socket"; STAGING_PASSES,
# default "alone" (add x12 for twelve verifications at once); STAGING_TIMEOUT, seconds per fidelity
# run; logs and archives under $OUT)
set -uo pipefail
cd "$(dirname "$0")/.."
. bench/gpu_install.sh  # sets $out, installs cudice from this tree
only="${STAGING_ONLY:-06_clamp_4096x4096,11_softmax_4096x4096}"
timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider -rA tests/verifier/run/test_shared_staging.py 2>&1 | tail -15
if [ "$only" = quick ]; then select=(--quick); else select=(--only "$only"); fi
for way in ${STAGING_WAYS:-shared socket}; do
  echo "=== staging $way"
  timeout "${STAGING_TIMEOUT:-200}" python3 bench/timing_fidelity.py "${select[@]}" --passes "${STAGING_PASSES:-alone}" \
    --bias-us 0 --staging "$way" --out "/tmp/staging_$way" >"$out/staging_$way.log" 2>&1
  grep -E "^(alone|x12|harness |builds|\|)" "$out/staging_$way.log" | cut -c1-2500
  [ -d "/tmp/staging_$way/samples" ] && tar czf "$out/samples_$way.tar.gz" -C "/tmp/staging_$way" samples
done
