#!/usr/bin/env bash
# The one prepared device run (docs/gpu.md): on the lent GPU machine, from the repository root,
# after `make gpu-bundle` here and with build/gpu-bundle carried:
#   run(command="bash tools/gpu_check.sh", carry=["build/gpu-bundle"], timeout_s=540)
# Installs the bundle into a folder on PYTHONPATH (the image's own torch, jax, transformers
# stay), runs the CUDA tests (`pytest --device cuda`), then benchmarks/gpu.py. Everything
# fits in 8 minutes: the tests get TEST_S seconds, the benchmark BENCH_S. Logs go to $OUT.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/build/gpu-out}
TEST_S=${TEST_S:-270}
BENCH_S=${BENCH_S:-190}
PY=${PY:-python3}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/gpu_check.log") 2>&1
echo "== $(date -u +%FT%TZ) gpu_check on $(hostname)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | tee "$OUT/nvidia-smi.txt"

B=build/gpu-bundle
SITE=$(mktemp -d)/site
mkdir -p "$SITE"
t0=$(date +%s)
$PY -m pip install -q --no-deps --no-index --target "$SITE" "$B"/wheels/*.whl || exit 3
tar -xJf "$B/torch_mlir.tar.xz" -C "$SITE" || exit 3
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}" PATH="$SITE/bin:$PATH" HF_HUB_OFFLINE=1
echo "== installed in $(( $(date +%s) - t0 )) s"
$PY - <<'PY' 2>&1 | tee "$OUT/versions.txt"
import sys, torch, jax, jaxlib, transformers, torch_mlir, thunder_mlir
print("python", sys.version.split()[0], "torch", torch.__version__, "jax", jax.__version__,
      "jaxlib", jaxlib.__version__, "transformers", transformers.__version__)
print("cuda", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
print("jax devices", jax.devices())
print("thunder_mlir from", thunder_mlir.__file__)
PY

echo "== pytest --device cuda (limit ${TEST_S} s)"
# pytest-timeout (in the image) ends a hung test (--timeout) and ends the session gracefully
# at TEST_S - 30 s (--session-timeout), so the summary (-rfE: one line a failure with its
# error) and the junit file are written even when the suite does not finish in time.
# THUNDER_TEST_OUTCOMES (conftest): each test's outcome, and a failure's traceback, as it ends.
TO=$($PY -c "import pytest_timeout" 2>/dev/null && \
     echo "--timeout=${PER_TEST_S:-120} --session-timeout=$((TEST_S - 60))")
THUNDER_TEST_OUTCOMES="$OUT/outcomes.txt" timeout -k 10 "$TEST_S" $PY -m pytest --device cuda -o addopts= -q -rfE --tb=short \
    -n ${JOBS:-8} --dist loadfile $TO -p no:cacheprovider \
    --junitxml="$OUT/pytest.xml" ${TESTS:-tests/test_cuda.py tests/test_ops.py tests/test_models.py \
    tests/test_generate.py tests/test_autocast.py tests/test_idioms_autocast.py \
    tests/test_idioms_aliasing.py tests/test_idioms_autograd.py tests/test_idioms_modules.py \
    tests/test_dynamic_shapes.py tests/test_compile_cache.py tests/test_distributed.py \
    tests/test_grad.py tests/test_random.py tests/test_runtime.py tests/test_opinfo_dtypes.py \
    tests/test_opinfo.py} \
    > "$OUT/pytest.log" 2>&1
rc_tests=$?
grep -E "^(FAILED|ERROR) " "$OUT/pytest.log" | cut -c1-300 | head -80
tail -3 "$OUT/pytest.log"
echo "== outcomes (as they ended): $(grep -oE '^[A-Z-]+ ' "$OUT/outcomes.txt" | sort | uniq -c | tr '\n' ' ')"
grep -E '^(FAILED|ERROR)' "$OUT/outcomes.txt" | cut -d' ' -f2 | cut -d: -f1 | sort | uniq -c
echo "== pytest exit $rc_tests (124: cut at ${TEST_S} s)"

echo "== benchmarks/gpu.py (limit ${BENCH_S} s)"
timeout -k 10 "$BENCH_S" $PY benchmarks/gpu.py ${BENCH_ARGS:-} --out "$OUT/bench.jsonl" > "$OUT/bench.log" 2>&1
rc_bench=$?
cat "$OUT/bench.log" | tail -40
echo "== bench exit $rc_bench; total $(( $(date +%s) - t0 )) s"
exit $(( rc_tests != 0 || rc_bench != 0 ))
