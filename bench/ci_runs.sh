#!/usr/bin/env bash
# Clean-clone CI runs in a row on this checkout's HEAD, as the landing issue asks: runs 2 and 4 beside
# one busy core (`stress-ng --cpu 1 --cpu-load 70` at nice 10, the README's test under load); stops at
# the first red run and keeps its pytest files (--basetemp) for reading; prints each run's wall time.
# Usage (root, a quiet machine, nothing else running): bash bench/ci_runs.sh [FIRST [LAST [LOGDIR]]]
set -u
first=${1:-1}; last=${2:-5}; logs=${3:-/var/tmp/ci-runs}
repo=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
head=$(git -C "$repo" rev-parse --short HEAD)
mkdir -p "$logs"
for n in $(seq "$first" "$last"); do
  rm -rf /tmp/ci; git clone -q "$repo" /tmp/ci; git -C /tmp/ci checkout -q "$head"
  stress=none
  if [ "$n" = 2 ] || [ "$n" = 4 ]; then
    nice -n 10 stress-ng --cpu 1 --cpu-load 70 --quiet & spid=$!; stress="stress-ng pid $spid"
  fi
  start=$(date +%s)
  echo "run $n on $head, load: $stress, start $(date -u +%T)" | tee -a "$logs/runs.log"
  (cd /tmp/ci && CI=true PYTEST_ADDOPTS="--basetemp=$logs/ci$n-tmp" bash .ci/run) > "$logs/ci$n.log" 2>&1
  rc=$?
  [ "$stress" != none ] && kill "$spid" 2>/dev/null; wait 2>/dev/null
  end=$(date +%s)
  echo "run $n rc=$rc wall $(( (end-start)/60 ))m$(( (end-start)%60 ))s; $(tail -1 "$logs/ci$n.log")" | tee -a "$logs/runs.log"
  [ "$rc" = 0 ] || exit "$rc"
  rm -rf "$logs/ci$n-tmp"
done
