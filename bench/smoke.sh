#!/usr/bin/env bash
# One bench script in its smoke mode (BENCH_SMOKE=1: seconds, tiny counts) on an existing build: what the test
# command runs so that no bench rots. Passes when the script exits 0 and printed its RESULT line; the figures are
# not judged (a smoke run measures nothing). Exit 77 (skipped) passes through: a bench that cannot run here.
#   bench/smoke.sh BUILD_DIR NAME SCRIPT [ARGS...]       e.g. bench/smoke.sh build ratelimiter bench/ratelimiter/run.sh
set -uo pipefail
cd "$(dirname "$0")/.."
[[ $# -ge 3 ]] || { sed -n '2,5p' "$0"; exit 2; }
build=$(cd "$1" && pwd)
name=$2
script=$3
shift 3
log=$(mktemp)
trap 'rm -f "$log"' EXIT
BENCH_SMOKE=1 BENCH_BUILD_DIR=$build bash "$script" "$@" > "$log" 2>&1
code=$?
if [[ $code -eq 77 ]]; then
  echo "skipped: $(tail -1 "$log")"
  exit 77
fi
if [[ $code -ne 0 ]] || ! grep -q "^RESULT $name " "$log"; then
  cat "$log"
  echo "bench smoke: $script exited $code$(grep -q "^RESULT $name " "$log" || echo ", without its 'RESULT $name' line")"
  exit 1
fi
grep "^RESULT $name " "$log"
