#!/usr/bin/env bash
# The whole GPU run in ONE device command: provision, the CUDA tests, the benchmark (bench/gpu/README.md).
#
#   bash bench/gpu/run.sh "$OUT" [run_bench.py arguments]       # there, from any directory; carry .gpu-carry
#
# Writes into OUT: provision.log, nvidia-smi.txt, pytest.log, bench.log, results.json, gpu.md (6 files: the
# device tool brings back at most 8). Prints the test summary and the result table last (the reply keeps the tail).
# Knobs: SKIP_TESTS=1, TEST_TIMEOUT (s, default 150), BENCH_TIMEOUT (s, default 330); CALIBRATE=1 also runs the
# CPU benches there (calib.txt: how this host's cores compare with the dev machine's); GIL_PROFILE=1 samples a
# 32-stream pipeline with py-spy (gil.md; GIL_SWEEP picks the pipeline, default 32; carry the py-spy wheel in
# .gpu-carry/wheels, see bench/gpu/README.md).
set -uo pipefail
OUT=${1:?usage: bench/gpu/run.sh OUT [run_bench.py arguments]}
shift
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
T0=$SECONDS
[ -f .gpu-carry/models/yolo11s-random.torchscript ] || { echo "run.sh: no model: run bench/gpu/make_model.py here"; exit 1; }
if ! bash bench/gpu/provision.sh > "$OUT/provision.log" 2>&1; then
  tail -30 "$OUT/provision.log"
  [ -f /opt/gst/env.sh ] || { echo "run.sh: provisioning failed"; exit 1; }
  echo "run.sh: provisioning checks reported failures (see above); going on"
fi
echo "run.sh: provisioned in $((SECONDS - T0)) s"
# shellcheck disable=SC1091
. /opt/gst/env.sh
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,power.limit --format=csv \
  > "$OUT/nvidia-smi.txt" 2>&1
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  timeout "${TEST_TIMEOUT:-150}" python -m pytest -q -p no:cacheprovider -rs tests/elements/test_pyinfer_cuda.py \
    tests/frames/test_cuda_pure.py tests/ops/test_letterbox_kernel.py tests/native > "$OUT/pytest.log" 2>&1
  echo "run.sh: pytest rc=$? at $((SECONDS - T0)) s"
fi
timeout "${BENCH_TIMEOUT:-330}" python bench/gpu/run_bench.py --out "$OUT" "$@" > "$OUT/bench.log" 2>&1
rc=$?
if [ "${CALIBRATE:-0}" = 1 ]; then
  { python bench/tracker_update_cost.py; python bench/host_overhead_cpu.py --frames 300 --streams 32; } \
    > "$OUT/calib.txt" 2>&1
  echo "run.sh: calibration done at $((SECONDS - T0)) s"
fi
if [ "${GIL_PROFILE:-0}" = 1 ]; then
  python -m pip install -q --no-index .gpu-carry/wheels/py_spy-*.whl > /dev/null 2>&1
  timeout 120 py-spy record --gil -r 250 -f raw -o /tmp/gil.raw -- python bench/gpu/run_bench.py --out /tmp \
    --phases clips,pipelines --sweep "${GIL_SWEEP:-32}" > /tmp/gil.log 2>&1
  python bench/gil_profile.py /tmp/gil.raw --focus do_transform_ip > "$OUT/gil.md" 2>&1 || tail -5 /tmp/gil.log
  echo "run.sh: GIL profile done at $((SECONDS - T0)) s"
fi
grep -v -i "warn" "$OUT/bench.log" | grep "^\[" | cut -c1-300
[ -f "$OUT/pytest.log" ] && grep -E "passed|failed|error|FAILED|SKIPPED|Error" "$OUT/pytest.log" | tail -25
[ -f "$OUT/gpu.md" ] && cat "$OUT/gpu.md" || tail -40 "$OUT/bench.log"
echo "run.sh: bench rc=$rc, total $((SECONDS - T0)) s"
