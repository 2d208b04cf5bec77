# One app run on the H200 under Nsight Systems (CUDA trace only), summed per process by kernel_profile.py: how much
# device time the model server's forwards, its copies and the workers' own kernels (letterbox, decoding, tracking's
# tensors) take per frame, and how much of it ran at once under MPS. From the repository root with .gpu-carry
# carried as for call-model-server.sh (no wheels/, no clips/ needed). RUN=... the app_workers run (default: the
# app's own layout with pytracker); CEILING=... an app_workers.json whose ceiling the table's ratios use (the run
# itself is slowed by the trace, its frames/s is not a result). Writes kernels.json, p.log and p.md to $OUT.
set -o pipefail; T0=$SECONDS
bash bench/gpu/provision.sh > $OUT/provision.log 2>&1 || tail -5 $OUT/provision.log; . /opt/gst/env.sh; export PYTHONUNBUFFERED=1
python -m pip install -q --no-index --no-deps .gpu-carry/appwheels/*.whl >/dev/null 2>&1
NSYS=$(command -v nsys || ls /usr/local/cuda*/bin/nsys /opt/nvidia/nsight-systems*/bin/nsys /usr/local/cuda*/nsight-systems*/bin/nsys 2>/dev/null | head -1)
[ -n "$NSYS" ] || { echo "no nsys on this machine"; exit 4; }
echo "prov $((SECONDS-T0)) s, $NSYS"
# the MPS daemon runs outside the trace; the app uses a daemon that is already running
export CUDA_MPS_PIPE_DIRECTORY=/tmp/kp-mps/pipe CUDA_MPS_LOG_DIRECTORY=/tmp/kp-mps/log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY && nvidia-cuda-mps-control -d
mkdir -p /tmp/prof
BENCH_APP_PREFIX="$NSYS profile --trace=cuda --sample=none --cpuctxsw=none --force-overwrite=true --export=sqlite -o /tmp/prof/app" \
  timeout 330 python bench/gpu/app_workers.py --out /tmp/p --frames 300 --run-timeout 300 --runs ${RUN:-auto:on:yes} \
  --ceiling-from ${CEILING:-bench/gpu/h200-app-workers-2026-12-03-u.json} > $OUT/p.log 2>&1
echo quit | nvidia-cuda-mps-control
grep "^|" /tmp/p/app_workers.md; cp /tmp/p/app_workers.md $OUT/p.md 2>/dev/null; ls -la /tmp/prof; echo "run $((SECONDS-T0)) s"
timeout $((560-SECONDS+T0)) python bench/gpu/kernel_profile.py /tmp/prof/app.sqlite --frames 19200 --json $OUT/kernels.json | head -80
echo "done $((SECONDS-T0)) s"
