#!/usr/bin/env bash
# Everything that needs the GPU, in one call (the GPU machine is lent by the minute):
#   1. install cudice from this tree without touching the image's torch,
#   2. run the `gpu`-marked tests,
#   3. run each benchmark listed in bench/gpu_benches.txt,
#   4. print a short table (also written to $OUT/gpu_summary.md when $OUT is set).
# Usage on the GPU box:  bash bench/run_gpu.sh [--quick]
# Knobs (environment): GPU_TEST_PATHS (default: tests/verifier tests/model — the server tests
# need pygls, which the GPU image lacks), GPU_PYTEST_ARGS (extra pytest arguments, e.g. -n 4),
# GPU_BENCHES (list file, default bench/gpu_benches.txt), STEP_TIMEOUT (seconds per step),
# GPU_SKIP_TESTS=1 (benchmarks only), GPU_TESTS_TIMEOUT (seconds for the tests step; default STEP_TIMEOUT).
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-bench/out}"; mkdir -p "$out"
export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
quick="${1:-}"

if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
if ! python3 -m pip install -q --no-deps --no-build-isolation -e . >"$out/install.log" 2>&1; then
  # An old setuptools in the image cannot build us: map the folders onto the namespace instead.
  echo "pip install failed (see install.log); using a symlinked cudice namespace on PYTHONPATH"
  tree=/tmp/cudice_tree; rm -rf "$tree"; mkdir -p "$tree/cudice"
  for pkg in server model verifier; do ln -s "$PWD/$pkg" "$tree/cudice/$pkg"; done
  export PYTHONPATH="$tree${PYTHONPATH:+:$PYTHONPATH}"
fi

summary="$out/gpu_summary.md"
echo "| step | status | seconds | note |" >"$summary"
echo "|---|---|---|---|" >>"$summary"

run_step() {  # name, command...  (STEP_LIMIT, when set, replaces STEP_TIMEOUT for this step)
  local name=$1; shift
  local t0=$(date +%s.%N)
  timeout "${STEP_LIMIT:-${STEP_TIMEOUT:-1800}}" "$@" >"$out/$name.log" 2>&1; local rc=$?
  local dt=$(python3 -c "print(f'{$(date +%s.%N)-$t0:.1f}')")
  local note=$(grep -E "passed|failed|error|RESULT" "$out/$name.log" | tail -1 | cut -c1-100)
  echo "| $name | $([ $rc -eq 0 ] && echo ok || echo "FAIL($rc)") | $dt | ${note//|//} |" >>"$summary"
}

# shellcheck disable=SC2086  # word splitting of the knobs is intended
[ -n "${GPU_SKIP_TESTS:-}" ] || STEP_LIMIT="${GPU_TESTS_TIMEOUT:-}" run_step gpu_tests python3 -m pytest -m gpu -q -p no:cacheprovider --timeout=900 ${GPU_PYTEST_ARGS:-} \
  ${GPU_TEST_PATHS:-tests/verifier tests/model}
benches="${GPU_BENCHES:-bench/gpu_benches.txt}"
if [ -f "$benches" ]; then
  n=0
  while read -r script args; do
    [ -z "$script" ] || [[ "$script" == \#* ]] && continue
    n=$((n + 1))  # numbered: one script may appear twice with other arguments
    run_step "$n-$(basename "$script" .py)" python3 "$script" $args $quick
  done <"$benches"
fi
cat "$summary"
for f in "$out"/*.log; do echo "=== $f"; tail -40 "$f"; done
