# The device calls for the model server (infer.model-server): on the H200 machine, from the repository root with
# .gpu-carry carried (bench/gpu/README.md): the CUDA tests of the served backend and of the CUDA graphs, then the
# app with and without the server. Writes pytest.log, pytest-graphs.log, h.json / h.md (the app_workers tables) and runlogs.txt to $OUT.
# RUNS=... replaces the app_workers --runs list (the default: the fourteenth session's plan, BENCHMARKS.md);
# AB_OLD=.gpu-carry/old/src runs each also on that older src/ (git archive OLD src | tar -x -C .gpu-carry/old),
# alternating, or only the runs marked :o. RUN_TIMEOUT=S bounds each run (default 120: the server's graph captures
# come first); PROFILE=0 samples no worker with py-spy. APP_CHECK=1 first compares the app on the GPU with a model
# server against the app on the CPU (app_correctness.py; carry .gpu-carry/clips and .gpu-carry/models). TESTS=0 runs
# no CUDA test, TESTS=served only the served backend's (TEST_K=EXPR: only those of them), TESTS=tracking only the
# compiled tracker's against numpy's (tests/tracking/test_bytetrack_native.py, its CUDA case included), TESTS=decode
# the server's decoding against the worker's (tests/backends/test_served_decode.py) and the tracker's CUDA case.
# KERNELS=S has every process of each run sample S seconds of its device time per kernel (app_workers.py --kernels;
# the summary per role is in h.json, the run's frames/s is slowed by the profiler).
set -o pipefail; T0=$SECONDS
RUNS=${RUNS:-auto:on:yes,auto:on:no,8:on:yes:b8:m:f4:x64}
bash bench/gpu/provision.sh > $OUT/provision.log 2>&1 || tail -5 $OUT/provision.log; . /opt/gst/env.sh; export PYTHONUNBUFFERED=1
python -m pip install -q --no-index --no-deps .gpu-carry/appwheels/*.whl >/dev/null 2>&1; python -m pip install -q --no-index --no-deps .gpu-carry/wheels/py_spy-*.whl >/dev/null 2>&1
python -c "import yaml, pydantic, inferstream.app.cli" || exit 3; python -c "import scipy" || echo "NO SCIPY: pytracker runs fail"; echo "prov $((SECONDS-T0)) s"
cuda_tests() {  # LOG SECONDS PYTEST-ARGS...: one pytest run, its outcome lines echoed
  local log=$OUT/$1 limit=$2; shift 2
  timeout "$limit" python -m pytest -q -p no:cacheprovider -rs "$@" > "$log" 2>&1; grep -E "passed|failed|FAILED|Error" "$log" | tail -12
}
if [ "${TESTS:-1}" = tracking ]; then
  cuda_tests pytest-tracking.log 200 tests/tracking/test_bytetrack_native.py
elif [ "${TESTS:-1}" = decode ]; then
  cuda_tests pytest-decode.log 200 tests/backends/test_served_decode.py -k "cuda or gpu"
  cuda_tests pytest-tracking.log 90 tests/tracking/test_bytetrack_native.py -k cuda
elif [ "${TESTS:-1}" != 0 ]; then
  cuda_tests pytest.log 300 tests/backends/test_served.py tests/backends/test_served_decode.py -k "${TEST_K:-cuda or gpu}" --durations=8
  [ "${TESTS:-1}" = served ] || cuda_tests pytest-graphs.log 90 tests/elements/test_pyinfer_cuda.py -k graph
  [ "${TESTS:-1}" = served ] || cuda_tests pytest-tracking.log 90 tests/tracking/test_bytetrack_native.py -k cuda
fi
echo "tests $((SECONDS-T0)) s"
[ "${APP_CHECK:-0}" = 1 ] && { timeout 200 python bench/gpu/app_correctness.py --out $OUT/check ${APP_CHECK_ARGS:-} > $OUT/app_check.log 2>&1; tail -2 $OUT/app_check.log | cut -c1-1500; echo "app check $((SECONDS-T0)) s"; }
timeout $((585-SECONDS+T0)) python bench/gpu/app_workers.py --out /tmp/h --frames 300 --run-timeout ${RUN_TIMEOUT:-120} --profile ${PROFILE:-4} ${KERNELS:+--kernels $KERNELS} --runs $RUNS ${AB_OLD:+--ab-old $AB_OLD} > $OUT/h.log 2>&1
grep "^|" /tmp/h/app_workers.md; cp /tmp/h/app_workers.json $OUT/h.json; cp /tmp/h/app_workers.md $OUT/h.md; tail -3 $OUT/h.log; for f in /tmp/h/*server*.log; do [ -f $f ] && { echo "== $f"; grep -v "^\s*$" $f | tail -6; }; done | cut -c1-300 > $OUT/runlogs.txt; echo "done $((SECONDS-T0)) s"
