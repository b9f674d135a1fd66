# Sourced by the GPU scripts (bench/gpu_judge.sh, bench/gpu_staging.sh) from the repository root:
# sets $out ($OUT or bench/out) and installs cudice from this tree without touching the image's
# torch; where the image's setuptools cannot, maps the packages onto the namespace on PYTHONPATH.
# Tests it runs print each failure the moment it happens (CUDICE_TEST_FAILURES_NOW, tests/conftest.py).
out="${OUT:-bench/out}"; mkdir -p "$out"
export PYTHONUNBUFFERED=1 CUDICE_TEST_FAILURES_NOW=1 TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
if ! python3 -m pip install -q --no-deps --no-build-isolation -e . >"$out/install.log" 2>&1; then
  tree=/tmp/cudice_tree; rm -rf "$tree"; mkdir -p "$tree/cudice"
  for pkg in server model verifier; do ln -s "$PWD/$pkg" "$tree/cudice/$pkg"; done
  export PYTHONPATH="$tree${PYTHONPATH:+:$PYTHONPATH}"
fi
