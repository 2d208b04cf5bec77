#!/usr/bin/env bash
# Code A/B on ONE GPU host (hosts differ by up to 25 %, so only runs on the same host compare code): the src/ carried
# in .gpu-carry/old against the working tree, alternating, ROUNDS times each. Run after run.sh has provisioned.
#
#   here:   rm -rf .gpu-carry/old && mkdir -p .gpu-carry/old && git archive OLD_COMMIT src | tar -x -C .gpu-carry/old
#   there:  bash bench/gpu/ab.sh "$OUT" ROUNDS --phases clips,pipelines --sweep 32,32:notrack
#
# Appends each run's table to OUT/ab.md (with the inferstream it imported) and packs the raw results in OUT/ab.tar.
set -uo pipefail
OUT=${1:?usage: bench/gpu/ab.sh OUT ROUNDS [run_bench.py arguments]}
ROUNDS=${2:?usage: bench/gpu/ab.sh OUT ROUNDS [run_bench.py arguments]}
shift 2
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
[ -d .gpu-carry/old/src/inferstream ] || { echo "ab.sh: no .gpu-carry/old/src (see the header)"; exit 1; }
# shellcheck disable=SC1091
. /opt/gst/env.sh
export PYTHONUNBUFFERED=1
base=${PYTHONPATH:-}
for round in $(seq "$ROUNDS"); do
  for side in old new; do
    path=$base
    [ "$side" = old ] && path=$PWD/.gpu-carry/old/src${base:+:$base}
    run=/tmp/ab-$side-$round
    mkdir -p "$run"
    PYTHONPATH=$path timeout "${AB_TIMEOUT:-300}" python bench/gpu/run_bench.py --out "$run" "$@" > "$run/log" 2>&1
    {
      echo "## $side, round $round (rc $?): $(PYTHONPATH=$path python -c 'import inferstream; print(inferstream.__file__)')"
      cat "$run/gpu.md" 2>/dev/null || tail -20 "$run/log"
    } >> "$OUT/ab.md"
    echo "ab.sh: $side round $round done at ${SECONDS} s"
  done
done
tar -C /tmp -cf "$OUT/ab.tar" $(cd /tmp && ls -d ab-*)
