#!/usr/bin/env bash
# A short look at what the GPU box allows the verifier's boundary and build, run beside a longer
# job (bench/run_gpu.sh, bench/train_demo.sh): namespaces, the unprivileged uid, nvcc, and two
# bundled examples verified end to end. Output: $OUT/probe.log (and stdout).
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-bench/out}"; mkdir -p "$out"
log="$out/probe.log"
{
  echo "== $(date -u +%FT%TZ) $(uname -r) $(nproc) cores"
  nvidia-smi --query-gpu=name,memory.used,memory.total,clocks.sm --format=csv,noheader || true
  nvcc --version | tail -1
  python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.is_available())'
  echo "== namespaces"
  unshare --user --map-root-user --pid --fork --mount-proc true && echo "userns+pidns: ok" || echo "userns+pidns: FAILED"
  unshare --mount --pid --fork --mount-proc true && echo "mountns+pidns (root): ok" || echo "mountns+pidns (root): FAILED"
  command -v setpriv >/dev/null && setpriv --reuid=65534 --regid=65534 --clear-groups id || echo "setpriv missing"
  ls -l /dev/nvidia* 2>&1 | head -5
  echo "== cudice verify (bundled examples)"
  for f in examples/relu_cuda.py examples/softmax_cuda.py; do
    t0=$(date +%s.%N)
    timeout 300 python3 -m cudice.server.cli verify "$f" --json > "$out/verify_$(basename "$f" .py).json" 2>&1
    rc=$?
    python3 - "$out/verify_$(basename "$f" .py).json" "$rc" "$t0" <<'PY'
import json, sys, time
path, rc, t0 = sys.argv[1], sys.argv[2], float(sys.argv[3])
text = open(path).read()
try:
    r = json.loads(text[text.index("{"):])
    codes = [d.get("code") for d in r.get("diagnostics", [])]
    print(f"{path}: rc={rc} verdict={r.get('verdict')} speedup={r.get('speedup')} wall={time.time()-t0:.1f}s codes={codes}")
except Exception as e:  # noqa: BLE001
    print(f"{path}: rc={rc} unreadable ({e}): {text[-400:]}")
PY
  done
} 2>&1 | tee "$log"
