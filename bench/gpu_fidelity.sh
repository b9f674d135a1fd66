#!/usr/bin/env bash
# bench/timing_fidelity.py's full bench set on the GPU, split so that each half fits one call of
# the device tool: FIDELITY_SET=even or odd (the entries with an even or odd index; both halves
# mix microsecond and millisecond kernels), or all; FIDELITY_PASSES (default alone,x12);
# FIDELITY_TIMEOUT, seconds for the bench (default 540). The log, fidelity.json and the per-call
# timing samples (one archive) land in $OUT; the log is printed as it goes.
set -uo pipefail
cd "$(dirname "$0")/.."
. bench/gpu_install.sh  # sets $out, installs cudice from this tree
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
set_="${FIDELITY_SET:-even}"
names=$(python3 - "$set_" <<'PY'
import sys
sys.path.insert(0, "bench")
from timing_fidelity import BENCH_SET
which = sys.argv[1]
keep = [j for j in range(len(BENCH_SET)) if which == "all" or j % 2 == (0 if which == "even" else 1)]
print(",".join(f"{j:02d}_{b}_{s.replace(', ', 'x')}" for j, (b, s) in enumerate(BENCH_SET) if j in keep))
PY
)
echo "set $set_: $names"
work=/tmp/fidelity_$set_; rm -rf "$work"
timeout "${FIDELITY_TIMEOUT:-540}" python3 bench/timing_fidelity.py --only "$names" \
  --passes "${FIDELITY_PASSES:-alone,x12}" --out "$work" 2>&1 | tee "$out/fidelity_$set_.log" \
  | grep -E "^(build|builds|harness|alone|alone2|x12|\||ratio)" | cut -c1-1500
cp "$work/fidelity.json" "$out/fidelity_$set_.json" 2>/dev/null
[ -d "$work/samples" ] && tar czf "$out/samples_$set_.tar.gz" -C "$work" samples
ls -la "$out"
