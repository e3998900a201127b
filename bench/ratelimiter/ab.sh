#!/usr/bin/env bash
# Side-by-side runs of two or more ratelimiter builds (not in CI). Each argument is a directory holding a
# corral-ratelimiter and a corral-bench-ratelimiter (e.g. build/bin, or a copy of an older build's). For each
# build in turn, `rounds` times: a fresh limiter, then the load generator's contended (64 clients, 16 permits),
# uncontended (64 permits), one-shared-client and single-client runs, a keyed limit with 5,000 instances (each of
# the 64 clients on a key of its own), the contended run again on a limiter
# keeping a lease snapshot (state_path), and Redis's contended run as the peer of that round. Prints every run with the CPU a pair cost the load generator (client) and the limiter (server),
# then the medians per build and run. Interleaving the builds keeps the VM's drift out of the comparison.
#   bench/ratelimiter/ab.sh DIR_A DIR_B [...]        (AB_SECONDS=4 per run, AB_ROUNDS=3)
#   e.g. mkdir /tmp/before && cp build/bin/corral-{ratelimiter,bench-ratelimiter} /tmp/before
#        (change, rebuild); bench/ratelimiter/ab.sh /tmp/before build/bin
set -euo pipefail
cd "$(dirname "$0")/../.."
[[ $# -ge 2 ]] || { sed -n '2,10p' "$0"; exit 2; }
source bench/prepare.sh
seconds=${AB_SECONDS:-$(smoke_or 4 1)}
rounds=${AB_ROUNDS:-$(smoke_or 3 1)}
keys=$(smoke_or 5000 50)
prepare "redis-server libhiredis-dev"

source bench/lib.sh

redis_port=$(free_port)
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no > "$work/redis.log" 2>&1 &
redis_pid=$!
pids+=($redis_pid)
for _ in $(seq 200); do redis-cli -p "$redis_port" ping > /dev/null 2>&1 && break; sleep 0.05; done
cat > "$work/limiter.yaml" <<YAML
limits:
  - {name: bench, kind: concurrency, permits: 16}
  - {name: bench_open, kind: concurrency, permits: 64}
  - {name: "bench_keyed/{k}", kind: concurrency, permits: 1}
learning_mode: false
state_path: none   # in memory only: the peer of the run with a lease snapshot
log_level: warn
YAML
# The same limits, with held leases kept on disk (what `corral up` and the deployments run).
{ sed '/^learning_mode/d; /^state_path/d' "$work/limiter.yaml"; echo "state_path: $work/state/leases.db"; } > "$work/durable.yaml"

# One load run: label, server pid, load generator, its arguments. Appends
# `label pairs_per_s p50_ms p99_ms client_us server_us` (CPU per pair, from clock ticks of 10 ms) to the runs, and
# shows it. A run with errors is shown with them and not counted.
measure() {
  local label=$1 server=$2 gen=$3
  shift 3
  local s0 s1 out client
  s0=$(cpu_ticks "$server")
  out=$({ TIMEFORMAT='%U %S'; time "$gen" --seconds="$seconds" "$@" 2> /dev/null; } 2> "$work/time") || true
  s1=$(cpu_ticks "$server")
  if [[ "$out" != *" errors=0"* || "$out" == *"pairs=0 "* ]]; then
    echo "  $label: not counted: ${out:-no output}" >&2
    return
  fi
  client=$(awk '{print $1 + $2}' "$work/time")
  awk -v label="$label" -v out="$out" -v c="$client" -v s="$(( s1 - s0 ))" 'BEGIN {
    n = split(out, f, /[ =]/); for (i = 1; i < n; i += 2) v[f[i]] = f[i + 1];
    printf "%s %d %.3f %.3f %.0f %.0f\n", label, v["pairs_per_s"], v["p50_ms"], v["p99_ms"],
      c * 1e6 / v["pairs"], s * 1e4 / v["pairs"] }' | tee -a "$work/runs" | sed 's/^/  /' >&2
}

# Starts `dir`'s limiter on `config`; sets limiter (its pid) and addr.
start_limiter() {  # directory, config
  rm -f "$work/ready.json"
  "$1/corral-ratelimiter" --config "$2" --insecure --grpc-listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 \
    --ready-file "$work/ready.json" > "$work/limiter.log" 2>&1 &
  limiter=$!
  pids+=($limiter)
  addr=$(ready "$work/ready.json" grpc)
  [[ -n "$addr" ]] || { echo "$1/corral-ratelimiter did not start:" >&2; cat "$work/limiter.log" >&2; exit 1; }
}
stop_limiter() { kill "$limiter" 2>/dev/null || true; wait "$limiter" 2>/dev/null || true; }

one_round() {  # directory
  local dir=$1 gen=$1/corral-bench-ratelimiter
  start_limiter "$dir" "$work/limiter.yaml"
  measure "$dir contended" "$limiter" "$gen" --mode=corral --addr="$addr" --limit=bench --clients=64
  measure "$dir uncontended" "$limiter" "$gen" --mode=corral --addr="$addr" --limit=bench_open --clients=64
  measure "$dir shared" "$limiter" "$gen" --mode=corral --addr="$addr" --limit=bench --clients=64 --shared
  measure "$dir single" "$limiter" "$gen" --mode=corral --addr="$addr" --limit=bench_open --clients=1
  measure "$dir keyed" "$limiter" "$gen" --mode=corral --addr="$addr" --limit=bench_keyed --clients=64 --keys="$keys"
  stop_limiter
  rm -rf "$work/state" && mkdir "$work/state"
  start_limiter "$dir" "$work/durable.yaml"
  measure "$dir snapshot" "$limiter" "$gen" --mode=corral --addr="$addr" --limit=bench --clients=64
  stop_limiter
  measure "redis contended" "$redis_pid" "$gen" --mode=redis --addr="127.0.0.1:$redis_port" --limit=bench \
    --permits=16 --clients=64
}

echo "ratelimiter a/b: $rounds rounds, ${seconds}s per run, $(nproc) cores" >&2
: > "$work/runs"
for round in $(seq "$rounds"); do
  for dir in "$@"; do
    echo "round $round: $dir" >&2
    one_round "$dir"
  done
done
printf '\n%-48s %10s %9s %9s %10s %10s\n' "medians" "pairs/s" "p50 ms" "p99 ms" "client µs" "server µs"
sort -k1,2 -s "$work/runs" | awk '
  function median(list,   n, a, i, j, t) {
    n = split(list, a, " ")
    for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] + 0 > t + 0; j--) a[j + 1] = a[j]; a[j + 1] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  { key = $1 " " $2; if (!(key in seen)) { seen[key] = 1; order[++k] = key }
    for (i = 3; i <= 7; i++) col[key, i] = col[key, i] " " $i }
  END { for (x = 1; x <= k; x++) { key = order[x]
          printf "%-48s %10d %9.3f %9.3f %10.0f %10.0f\n", key, median(col[key, 3]), median(col[key, 4]),
            median(col[key, 5]), median(col[key, 6]), median(col[key, 7]) } }' | tee "$work/medians"
# The contended pairs/s of each build, in the order given, and Redis's.
contended=()
for dir in "$@"; do contended+=("$(awk -v k="$dir contended" '$1 " " $2 == k {print $3}' "$work/medians")"); done
echo "RESULT ratelimiter_ab rounds=$rounds contended_pairs_per_s=$(IFS=,; echo "${contended[*]}") redis_pairs_per_s=$(awk '$1 == "redis" && $2 == "contended" {print $3}' "$work/medians")"
