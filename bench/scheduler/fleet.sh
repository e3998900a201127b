#!/usr/bin/env bash
# Fleet simulation (not in CI): how the scheduler behaves past this machine. 200 simulated sandbox hosts (one
# process, each its own gRPC server: capacity 64, 5 ms creates, 20 ms execs) and the scripted model behind the
# proxy; N tool_loop episodes (2 LLM calls + 1 exec) with up to 12,800 running at once. Prints episodes/s, the
# scheduler's CPU per episode, placement latency (acquire) p50/p99 and its RSS.
#   bench/scheduler/fleet.sh     (FLEET_HOSTS=200, FLEET_EPISODES=25600, FLEET_CONCURRENT=12800, FLEET_FAIL_RATE=0)
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/prepare.sh
hosts=${FLEET_HOSTS:-$(smoke_or 200 4)}
n=${FLEET_EPISODES:-$(smoke_or 25600 64)}
concurrent=${FLEET_CONCURRENT:-$(smoke_or 12800 32)}
fail=${FLEET_FAIL_RATE:-0}
prepare "libhiredis-dev" corral-scheduler corral-proxy corral-fake-llm corral-bench-scheduler corral-bench-fleet

work=$(mktemp -d)
source bench/scheduler/cluster.sh
ulimit -n 65536 2>/dev/null || true

$bin/corral-bench-fleet --hosts="$hosts" --capacity=64 --create-ms=5 --exec-ms=20 --fail-rate="$fail" \
  --hosts-file="$work/hosts.txt" 2> "$work/fleet.log" &
pids+=($!)
for _ in $(seq 600); do [[ -s "$work/hosts.txt" ]] && break; sleep 0.05; done
start llm $bin/corral-fake-llm --listen 127.0.0.1:0 --arithmetic --threads 2 --log-level warn
start proxy $bin/corral-proxy --insecure --grpc-listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --http-listen 127.0.0.1:0 \
  --journal "$work/proxy.db" --upstream "http://$(addr llm http)" --log-level warn --max-sessions 1000000 --max-connections 100000 --header-timeout 120s
{
  echo "host:"
  sed 's/^/  - /' "$work/hosts.txt"
} > "$work/scheduler.yaml"
start scheduler $bin/corral-scheduler --insecure --config "$work/scheduler.yaml" --grpc-listen 127.0.0.1:0 \
  --metrics-listen 127.0.0.1:0 --http-listen 127.0.0.1:0 --journal "$work/scheduler.db" --proxy "$(addr proxy grpc)" \
  --default-model fake-model --max-concurrent-episodes "$concurrent" --log-level warn
sleep "$(smoke_or 3 1)"  # the first HostInfo round over every host

echo "fleet simulation: $hosts hosts x 64, $n episodes, up to $concurrent at once, $(nproc) cores" >&2
out=$($bin/corral-bench-scheduler --mode=scheduler --addr="$(addr scheduler grpc)" --n="$n") || true
echo "  corral: $out" >&2
cpu=$(awk '{printf "%.2f", ($14+$15)/100}' "/proc/$pid_scheduler/stat")
proxy_cpu=$(awk '{printf "%.2f", ($14+$15)/100}' "/proc/$pid_proxy/stat")
rss=$(awk '/VmHWM/ {printf "%.1f", $2/1024}' "/proc/$pid_scheduler/status")
printf '\nepisodes/s %s   scheduler CPU %s ms/episode (proxy %s ms/episode)   peak RSS %s MiB\n' "$(field eps "$out")" \
  "$(awk -v c="$cpu" -v n="$n" 'BEGIN {printf "%.2f", 1000*c/n}')" "$(awk -v c="$proxy_cpu" -v n="$n" 'BEGIN {printf "%.2f", 1000*c/n}')" "$rss"
printf 'placement (acquire) p50 %s ms, p99 %s ms   overhead without create p50 %s ms, p99 %s ms\n' \
  "$(field acquire_p50_ms "$out")" "$(field acquire_p99_ms "$out")" "$(field own_p50_ms "$out")" "$(field own_p99_ms "$out")"
echo "RESULT fleet hosts=$hosts episodes=$n eps=$(field eps "$out") sched_cpu_ms_per_episode=$(awk -v c="$cpu" -v n="$n" 'BEGIN {printf "%.2f", 1000*c/n}') acquire_p99_ms=$(field acquire_p99_ms "$out") peak_rss_mib=$rss"
