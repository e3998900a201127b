#!/usr/bin/env bash
# Side-by-side runs of two or more corral-proxy binaries (not in CI): for each binary in turn, `rounds` times,
# a fresh fake backend and proxy with 1,000 sessions, wrk at c=64 then c=8. Prints the WRK line of each run and
# the proxy's CPU per request (its utime+stime from /proc over the run, divided by the requests). Interleaving
# the binaries keeps the VM's drift out of the comparison; compare medians.
#   bench/proxy/ab.sh OLD_BINARY NEW_BINARY [...]      (AB_SECONDS=6 per run, AB_ROUNDS=3)
#   e.g. cp $bin/corral-proxy /tmp/proxy-before; (change, rebuild); bench/proxy/ab.sh /tmp/proxy-before $bin/corral-proxy
set -euo pipefail
cd "$(dirname "$0")/../.."
[[ $# -ge 2 ]] || { sed -n '2,7p' "$0"; exit 2; }
source bench/prepare.sh
seconds=${AB_SECONDS:-$(smoke_or 6 1)}
rounds=${AB_ROUNDS:-$(smoke_or 3 1)}
sessions=$(smoke_or 1000 100)
prepare "libhiredis-dev wrk" corral-fake-llm corral_python_sdk > /dev/null

source bench/lib.sh

one_run() {  # binary
  rm -rf "$work"/*
  pids=()
  $bin/corral-fake-llm --listen 127.0.0.1:0 --reply "The repository keeps services, libraries and tests apart." \
    --ready-file "$work/fake.json" --log-level warn > "$work/fake.log" 2>&1 &
  pids+=($!)
  local fake proxy_pid http grpc
  fake=$(ready "$work/fake.json" http)
  "$1" --insecure --grpc-listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --http-listen 127.0.0.1:0 \
    --upstream "http://$fake" --journal "$work/proxy.db" --log-level warn --ready-file "$work/proxy.json" \
    > "$work/proxy.log" 2>&1 &
  proxy_pid=$!
  pids+=($proxy_pid)
  http=$(ready "$work/proxy.json" http)
  grpc=$(ready "$work/proxy.json" grpc)
  $build/sdk-venv/bin/python bench/proxy/sessions.py "$grpc" "$sessions" ab > "$work/tokens"
  for c in 64 8; do
    local t0 t1 out n
    t0=$(cpu_ticks "$proxy_pid")
    out=$(CORRAL_TOKENS_FILE=$work/tokens wrk -t 2 -c "$c" -d "${seconds}s" --timeout 30s -s bench/proxy/chat.lua \
      "http://$http/v1/chat/completions")
    t1=$(cpu_ticks "$proxy_pid")
    n=$(echo "$out" | sed -n 's/^ *\([0-9]*\) requests in.*/\1/p')
    # Clock ticks are 10 ms: µs per request = ticks * 10,000 / requests.
    echo "$(echo "$out" | grep '^WRK' | sed "s#^WRK#$1 c=$c#") cpu_us_per_req=$(( (t1 - t0) * 10000 / n ))"
  done
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}

# (Kept in a variable: each run empties $work.)
runs=$(for _ in $(seq "$rounds"); do
  for binary in "$@"; do one_run "$binary"; done
done | sort -s -k1,2)
echo "$runs"
# The median requests/s at c=64 of each binary, in the order given.
medians=()
for binary in "$@"; do
  medians+=("$(grep -F "$binary c=64 " <<< "$runs" | sed -n 's/.* rps=\([0-9.]*\).*/\1/p' | sort -n |
    awk '{v[NR] = $1} END {print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}')")
done
echo "RESULT proxy_ab rounds=$rounds rps_c64=$(IFS=,; echo "${medians[*]}")"
