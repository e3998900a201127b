#!/usr/bin/env bash
# Proxy benchmark (not in CI): wrk posting chat completions at fixed concurrency against the fake backend
# directly, corral-proxy in front of it (recording and journaling every call; and, in the gateway formats, the same
# proxy with `record: false`), nginx proxy_pass in front of it
# (records nothing), and the interception proxy users run today — FastAPI + httpx recording in memory
# (bench/proxy/fastapi_proxy.py); then 1,000 concurrent streams with 10,000 open sessions and the proxy's RSS.
#   bench/proxy/run.sh        (BENCH_SECONDS=10 per run)
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/prepare.sh
seconds=${BENCH_SECONDS:-$(smoke_or 10 1)}
sessions=$(smoke_or 1000 100)   # the sessions the wrk runs go round
open_sessions=$(smoke_or 10000 200)
streams=$(smoke_or 1000 20)
prepare "libhiredis-dev wrk nginx-light python3-fastapi python3-uvicorn python3-httpx python3-uvloop python3-httptools" \
  corral-proxy corral-fake-llm corral_python_sdk

source bench/lib.sh
cleanup() {  # bench/lib.sh's, plus nginx (it daemonizes)
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  [[ -f "$work/nginx.pid" ]] && kill "$(cat "$work/nginx.pid")" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}

$bin/corral-fake-llm --listen 127.0.0.1:0 --reply "The repository keeps services, libraries and tests apart." \
  --ready-file "$work/fake.json" --log-level warn > "$work/fake.log" 2>&1 &
pids+=($!)
fake=$(ready "$work/fake.json" http)
# --insecure: the benchmark's session calls carry no cluster token (env tokens are still signed and checked).
$bin/corral-proxy --insecure --grpc-listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 \
  --http-listen 127.0.0.1:0 --upstream "http://$fake" --journal "$work/proxy.db" --log-level warn \
  --ready-file "$work/proxy.json" > "$work/proxy.log" 2>&1 &
proxy_pid=$!
pids+=($proxy_pid)
proxy_http=$(ready "$work/proxy.json" http)
proxy_grpc=$(ready "$work/proxy.json" grpc)
# The same proxy recording nothing (`record: false`): what recording and journaling every call costs.
$bin/corral-proxy --insecure --grpc-listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --record=false \
  --http-listen 127.0.0.1:0 --upstream "http://$fake" --journal "$work/norecord.db" --log-level warn \
  --ready-file "$work/norecord.json" > "$work/norecord.log" 2>&1 &
pids+=($!)
norecord_http=$(ready "$work/norecord.json" http)
nginx_port=$((20000 + RANDOM % 20000))
sed -e "s#__PORT__#$nginx_port#" -e "s#__UPSTREAM__#$fake#" -e "s#__DIR__#$work#g" bench/proxy/nginx.conf > "$work/nginx.conf"
nginx -c "$work/nginx.conf" -p "$work"
for _ in $(seq 100); do [[ -s "$work/nginx.pid" ]] && break; sleep 0.05; done
fastapi_port=$((nginx_port + 1))
/usr/bin/python3 bench/proxy/fastapi_proxy.py --listen "127.0.0.1:$fastapi_port" --upstream "http://$fake" \
  > "$work/fastapi.log" 2>&1 &
pids+=($!)
for _ in $(seq 200); do curl -fs "http://127.0.0.1:$fastapi_port/health" > /dev/null 2>&1 && break; sleep 0.05; done

$build/sdk-venv/bin/python bench/proxy/sessions.py "$proxy_grpc" "$sessions" bench-a > "$work/tokens-direct"
$build/sdk-venv/bin/python bench/proxy/sessions.py "$(ready "$work/norecord.json" grpc)" "$sessions" bench-n \
  > "$work/tokens-norecord"

run() {  # name url connections [stream [delay_ms]] — each request as the next of the sessions in $tokens
  CORRAL_TOKENS_FILE=$tokens CORRAL_STREAM=${4:-0} CORRAL_DELAY_MS=${5:-0} wrk -t "$(( $3 < 2 ? 1 : 2 ))" -c "$3" -d "${seconds}s" --timeout 30s \
    -s bench/proxy/chat.lua "$2/v1/chat/completions" | grep '^WRK' | sed "s/^WRK/$1 c=$3/"
}

tokens=$work/tokens-direct
echo "== throughput and latency (wrk, ${seconds}s per run, $sessions sessions round robin; 2 cores shared by wrk, backend and proxy)"
results=()
for c in 8 64; do
  results+=("$(run direct "http://$fake" "$c")")
  results+=("$(run corral "http://$proxy_http" "$c")")
  results+=("$(run nginx "http://127.0.0.1:$nginx_port" "$c")")
  results+=("$(run fastapi "http://127.0.0.1:$fastapi_port" "$c")")
done
printf '%s\n' "${results[@]}"

field() { echo "$1" | sed -n "s/.*$2=\([0-9.]*\).*/\1/p"; }
pick() { printf '%s\n' "${results[@]}" | grep "^$1 c=$2 "; }
direct8=$(pick direct 8); corral8=$(pick corral 8); corral64=$(pick corral 64); nginx64=$(pick nginx 64)
fastapi8=$(pick fastapi 8); fastapi64=$(pick fastapi 64)
added_p50=$(/usr/bin/python3 -c "print(round($(field "$corral8" p50_ms) - $(field "$direct8" p50_ms), 3))")
added_p99=$(/usr/bin/python3 -c "print(round($(field "$corral8" p99_ms) - $(field "$direct8" p99_ms), 3))")
ratio=$(/usr/bin/python3 -c "print(round($(field "$corral64" rps) / $(field "$nginx64" rps), 2))")
fastapi_ratio=$(/usr/bin/python3 -c "print(round($(field "$corral64" rps) / $(field "$fastapi64" rps), 2))")
fastapi_added_p50=$(/usr/bin/python3 -c "print(round($(field "$fastapi8" p50_ms) - $(field "$direct8" p50_ms), 3))")
# nginx's own added latency: the floor a second loopback hop and a second process sets on these 2 cores.
nginx8=$(pick nginx 8)
nginx_added_p50=$(/usr/bin/python3 -c "print(round($(field "$nginx8" p50_ms) - $(field "$direct8" p50_ms), 3))")
nginx_added_p99=$(/usr/bin/python3 -c "print(round($(field "$nginx8" p99_ms) - $(field "$direct8" p99_ms), 3))")

# The LLM gateways' own formats, for the same endpoints (whole completions): corral recording every call as users
# run it, and `norecord`, the same proxy with `record: false`.
declare -A url=([direct]="http://$fake" [corral]="http://$proxy_http" [norecord]="http://$norecord_http"
                [nginx]="http://127.0.0.1:$nginx_port" [fastapi]="http://127.0.0.1:$fastapi_port")
peers="corral norecord nginx fastapi"
gateway=()
at() {  # name url connections [stream [delay_ms]]: run, with the sessions of that proxy
  local tokens=$work/tokens-direct
  [[ $1 == norecord ]] && tokens=$work/tokens-norecord
  run "$@"
}
echo "== added latency against concurrency (BerriAI's ai-gateway-bench: p50/p99 over the direct backend's at each c)"
for c in $(smoke_or "1 8 64 256" "1 8"); do
  for name in direct $peers; do gateway+=("$(at "$name" "${url[$name]}" "$c")"); done
done
echo "== latency overhead at a fixed request rate (TensorZero's benchmark: mean and percentiles over the direct backend's)"
for q in $(smoke_or "500 1000 2000 4000" "100"); do
  # 64 connections, each waiting 64/q s before its next request: about q requests a second while they are fast.
  for name in direct $peers; do gateway+=("$(at "$name" "${url[$name]}" 64 0 $((64000 / q)) | sed "s/ c=64 / q=$q /")"); done
done
printf '%s\n' "${gateway[@]}" | /usr/bin/python3 bench/proxy/gateway_tables.py $peers
rec8=$(printf '%s\n' "${gateway[@]}" | grep '^corral c=8 ') norec8=$(printf '%s\n' "${gateway[@]}" | grep '^norecord c=8 ')
record_ratio=$(/usr/bin/python3 -c "print(round($(field "$rec8" rps) / $(field "$norec8" rps), 2))")
echo "recording every call (trajectory + journal) against record: false, requests/s at c=8: ${record_ratio}x"

echo "== $open_sessions open sessions, $streams concurrent streams (the backend streams 10 tokens, 20 ms apart)"
# A fresh proxy, so the RSS is that of the sessions and streams, not of the calls recorded above.
kill "$proxy_pid"; wait "$proxy_pid" 2>/dev/null || true
rm -f "$work/proxy.db"* "$work/proxy.json"
$bin/corral-proxy --insecure --grpc-listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --http-listen "$proxy_http" \
  --upstream "http://$fake" --journal "$work/proxy.db" --log-level warn --ready-file "$work/proxy.json" \
  > "$work/proxy2.log" 2>&1 &
proxy_pid=$!
pids+=($proxy_pid)
proxy_grpc=$(ready "$work/proxy.json" grpc)
$build/sdk-venv/bin/python bench/proxy/sessions.py "$proxy_grpc" "$open_sessions" bench-s > "$work/tokens-streams"
tokens=$work/tokens-streams
kill "${pids[0]}"; wait "${pids[0]}" 2>/dev/null || true
$bin/corral-fake-llm --listen "$fake" --inter-token 20ms --reply "one two three four five six seven eight nine ten" \
  --log-level warn > "$work/fake2.log" 2>&1 &
pids+=($!)
sleep 0.5
rss_peak=0
( while kill -0 "$proxy_pid" 2>/dev/null; do
    awk '/VmRSS/ {print $2}' "/proc/$proxy_pid/status"; sleep 0.2; done > "$work/rss.txt" ) &
sampler=$!
stream_out=$(run streams "http://$proxy_http" "$streams" 1)
kill "$sampler" 2>/dev/null || true
echo "$stream_out"
rss_mib=$(sort -n "$work/rss.txt" | tail -1 | awk '{printf "%.1f", $1/1024}')
echo "corral-proxy peak RSS with $open_sessions sessions and $streams live streams: ${rss_mib} MiB (target <= 256 with 10,000 and 1,000)"
echo "added latency at c=8: p50 ${added_p50} ms (target <= 0.3), p99 ${added_p99} ms (target <= 2); nginx adds p50 ${nginx_added_p50} ms, p99 ${nginx_added_p99} ms"
echo "throughput at c=64: corral / nginx = ${ratio} (target >= 0.8); corral / fastapi+httpx = ${fastapi_ratio}"
echo "fastapi+httpx added latency at c=8: p50 ${fastapi_added_p50} ms"
echo "RESULT proxy rps=$(field "$corral64" rps) record_ratio=$record_ratio nginx_rps=$(field "$nginx64" rps) ratio=$ratio fastapi_rps=$(field "$fastapi64" rps) fastapi_ratio=$fastapi_ratio added_p50_ms=$added_p50 added_p99_ms=$added_p99 nginx_added_p50_ms=$nginx_added_p50 nginx_added_p99_ms=$nginx_added_p99 rss_mib=$rss_mib"
