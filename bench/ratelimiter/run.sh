#!/usr/bin/env bash
# Ratelimiter benchmark (not in CI): corral-ratelimiter vs a Redis 7 Lua-script expiring semaphore
# (Redisson-style sorted set of lease expiries, pub/sub wake-ups), same load generator, same load shape:
# 64 clients doing acquire→release pairs on a 16-permit semaphore (contended) and a 64-permit one (uncontended),
# the contended run again on a limiter keeping a lease snapshot (state_path: what a restart without learning mode
# costs), then corral-ratelimiter's RSS with 10,000 live leases.
#   bench/ratelimiter/run.sh            (BENCH_SECONDS=10 per run by default; then BENCH_ROUNDS=5 alternating rounds
#                                        of BENCH_ROUND_SECONDS=3 per run, judged against the targets)
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/prepare.sh
seconds=${BENCH_SECONDS:-$(smoke_or 10 1)}
rounds=${BENCH_ROUNDS:-$(smoke_or 5 1)}               # alternating rounds judged against the targets
round_seconds=${BENCH_ROUND_SECONDS:-$(smoke_or 3 1)}
clients=${BENCH_CLIENTS:-64}
leases=$(smoke_or 10000 200)
prepare "redis-server libhiredis-dev" corral-ratelimiter corral-bench-ratelimiter

source bench/lib.sh

redis_port=$(free_port)
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --daemonize no > "$work/redis.log" 2>&1 &
pids+=($!)

cat > "$work/limiter.yaml" <<YAML
limits:
  - {name: bench, kind: concurrency, permits: 16}
  - {name: bench_open, kind: concurrency, permits: $clients}
  - {name: bench_big, kind: concurrency, permits: 20000}
learning_mode: false
state_path: none   # in memory only: the peer of the run with a lease snapshot
log_level: warn
YAML
$bin/corral-ratelimiter --config "$work/limiter.yaml" --insecure --grpc-listen 127.0.0.1:0 \
  --metrics-listen 127.0.0.1:0 --ready-file "$work/ready.json" > "$work/limiter.log" 2>&1 &
limiter_pid=$!
pids+=($limiter_pid)
# The same limiter keeping its leases on disk (every grant and release logged before it is answered).
sed '/^learning_mode/d; /^state_path/d' "$work/limiter.yaml" > "$work/durable.yaml"
echo "state_path: $work/leases.db" >> "$work/durable.yaml"
$bin/corral-ratelimiter --config "$work/durable.yaml" --insecure --grpc-listen 127.0.0.1:0 \
  --metrics-listen 127.0.0.1:0 --ready-file "$work/durable-ready.json" > "$work/durable.log" 2>&1 &
pids+=($!)
addr=$(ready "$work/ready.json" grpc)
durable_addr=$(ready "$work/durable-ready.json" grpc)
for _ in $(seq 200); do redis-cli -p "$redis_port" ping > /dev/null 2>&1 && break; sleep 0.05; done

gen=$bin/corral-bench-ratelimiter
run() {  # name, args...
  local name=$1; shift
  printf '  %-34s ' "$name" >&2
  local out; out=$("$gen" --clients="$clients" --seconds="$seconds" "$@")  # a later --clients wins
  echo "$out" >&2
  echo "$out"
}
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" <<< "$2"; }

echo "ratelimiter benchmark: $clients clients, ${seconds}s per run, $(nproc) cores" >&2
c_cont=$(run "corral  contended (16 permits)" --mode=corral --addr="$addr" --limit=bench)
d_cont=$(run "corral  contended, lease snapshot" --mode=corral --addr="$durable_addr" --limit=bench)
r_cont=$(run "redis   contended (16 permits)" --mode=redis --addr="127.0.0.1:$redis_port" --limit=bench --permits=16)
c_open=$(run "corral  uncontended ($clients permits)" --mode=corral --addr="$addr" --limit=bench_open)
r_open=$(run "redis   uncontended ($clients permits)" --mode=redis --addr="127.0.0.1:$redis_port" --limit=bench_open --permits="$clients")
# The same 64 threads on one shared client: one session stream, as a scheduler's episodes share its client.
c_shared=$(run "corral  contended, one shared client" --mode=corral --addr="$addr" --limit=bench --shared)
# One client alone: the grant latency without 64 threads competing for 2 cores.
c_one=$(run "corral  single client" --mode=corral --addr="$addr" --limit=bench_open --clients=1)
r_one=$(run "redis   single client" --mode=redis --addr="127.0.0.1:$redis_port" --limit=bench_open --permits="$clients" --clients=1)

"$gen" --mode=leases --addr="$addr" --limit=bench_big --leases="$leases" > "$work/leases.out" 2>&1 &
holder=$!
pids+=($holder)
for _ in $(seq 600); do grep -q held "$work/leases.out" 2>/dev/null && break; sleep 0.1; done
rss_kib=$(awk '/VmRSS/ {print $2}' "/proc/$limiter_pid/status")
rss_mib=$(awk -v k="$rss_kib" 'BEGIN {printf "%.1f", k/1024}')
kill "$holder"

ratio=$(awk -v a="$(field pairs_per_s "$c_cont")" -v b="$(field pairs_per_s "$r_cont")" 'BEGIN {printf "%.2f", a/b}')
ratio_open=$(awk -v a="$(field pairs_per_s "$c_open")" -v b="$(field pairs_per_s "$r_open")" 'BEGIN {printf "%.2f", a/b}')
printf '\n%-26s %12s %12s %10s %10s\n' "run" "pairs/s" "vs redis" "p50 ms" "p99 ms"
printf '%-26s %12s %12s %10s %10s\n' "corral contended" "$(field pairs_per_s "$c_cont")" "${ratio}x" "$(field p50_ms "$c_cont")" "$(field p99_ms "$c_cont")"
ratio_durable=$(awk -v a="$(field pairs_per_s "$d_cont")" -v b="$(field pairs_per_s "$r_cont")" 'BEGIN {printf "%.2f", a/b}')
printf '%-26s %12s %12s %10s %10s\n' "corral contended+snapshot" "$(field pairs_per_s "$d_cont")" "${ratio_durable}x" "$(field p50_ms "$d_cont")" "$(field p99_ms "$d_cont")"
ratio_shared=$(awk -v a="$(field pairs_per_s "$c_shared")" -v b="$(field pairs_per_s "$r_cont")" 'BEGIN {printf "%.2f", a/b}')
printf '%-26s %12s %12s %10s %10s\n' "corral contended, shared" "$(field pairs_per_s "$c_shared")" "${ratio_shared}x" "$(field p50_ms "$c_shared")" "$(field p99_ms "$c_shared")"
printf '%-26s %12s %12s %10s %10s\n' "redis contended" "$(field pairs_per_s "$r_cont")" "1.00x" "$(field p50_ms "$r_cont")" "$(field p99_ms "$r_cont")"
printf '%-26s %12s %12s %10s %10s\n' "corral uncontended" "$(field pairs_per_s "$c_open")" "${ratio_open}x" "$(field p50_ms "$c_open")" "$(field p99_ms "$c_open")"
printf '%-26s %12s %12s %10s %10s\n' "redis uncontended" "$(field pairs_per_s "$r_open")" "1.00x" "$(field p50_ms "$r_open")" "$(field p99_ms "$r_open")"
printf '%-26s %12s %12s %10s %10s\n' "corral single client" "$(field pairs_per_s "$c_one")" "" "$(field p50_ms "$c_one")" "$(field p99_ms "$c_one")"
printf '%-26s %12s %12s %10s %10s\n' "redis single client" "$(field pairs_per_s "$r_one")" "" "$(field p50_ms "$r_one")" "$(field p99_ms "$r_one")"
printf 'corral-ratelimiter RSS with %s live leases: %s MiB (target <= 64 with 10,000)\n' "$leases" "$rss_mib"

# The targets are judged over alternating rounds: each round runs both sides, contended and uncontended, and the
# side that goes first swaps every round (a VM's speed drifts within minutes).
echo "== $rounds alternating rounds, ${round_seconds}s per run" >&2
round_run() {  # side (corral or redis), limit, permits (the limit's, which Redis's script is told)
  local side_addr=$addr
  [[ $1 == redis ]] && side_addr=127.0.0.1:$redis_port
  "$gen" --clients="$clients" --seconds="$round_seconds" --mode="$1" --addr="$side_addr" --limit="$2" --permits="$3"
}
met_cont=0 met_open=0
for r in $(seq "$rounds"); do
  order="corral redis"
  (( r % 2 == 0 )) && order="redis corral"
  declare -A got=()
  for side in $order; do
    got[cont_$side]=$(round_run "$side" bench 16)
    got[open_$side]=$(round_run "$side" bench_open "$clients")
  done
  rc=$(awk -v a="$(field pairs_per_s "${got[cont_corral]}")" -v b="$(field pairs_per_s "${got[cont_redis]}")" 'BEGIN {printf "%.2f", a/b}')
  ro=$(awk -v a="$(field pairs_per_s "${got[open_corral]}")" -v b="$(field pairs_per_s "${got[open_redis]}")" 'BEGIN {printf "%.2f", a/b}')
  printf 'round %d (%s first): contended %sx redis, uncontended %sx\n' "$r" "${order%% *}" "$rc" "$ro"
  if awk -v x="$rc" 'BEGIN {exit !(x >= 1.5)}'; then met_cont=$((met_cont + 1)); fi
  if awk -v x="$ro" 'BEGIN {exit !(x >= 1.0)}'; then met_open=$((met_open + 1)); fi
done
printf 'targets: contended >= 1.5x redis in %d/%d rounds, uncontended >= 1.0x in %d/%d rounds (both: in every round)\n' \
  "$met_cont" "$rounds" "$met_open" "$rounds"
echo "RESULT ratelimiter pairs_per_s=$(field pairs_per_s "$c_cont") redis_pairs_per_s=$(field pairs_per_s "$r_cont") ratio=$ratio shared_ratio=$ratio_shared p99_ms=$(field p99_ms "$c_open") rounds=$rounds rounds_contended_met=$met_cont rounds_uncontended_met=$met_open"
