#!/usr/bin/env bash
# Scheduler benchmark (not in CI; needs root for the sandbox host). Side by side in one run:
#   corral   N tool_loop episodes (2 LLM calls + 1 bash exec each; scripted model at zero latency) through the
#            whole cluster — scheduler, proxy, ratelimiter, one sandbox host of capacity 256
#   direct   the same episodes with no scheduler, proxy or limiter: 256 threads calling the scripted model and
#            the sandbox host directly — the floor on this machine
# then the scheduler's RSS with 100,000 queued episodes and its restart time with them journaled.
#   bench/scheduler/run.sh        (BENCH_EPISODES=10000, BENCH_QUEUED=100000)
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/prepare.sh
n=${BENCH_EPISODES:-$(smoke_or 10000 40)}
queued=${BENCH_QUEUED:-$(smoke_or 100000 200)}
[[ $(id -u) -eq 0 ]] || { echo "run as root: the sandbox host switches uids" >&2; exit 77; }
prepare "libhiredis-dev" corral corral-scheduler corral-proxy corral-ratelimiter corral-sandbox-host corral-fake-llm \
  corral-bench-scheduler

gen=$bin/corral-bench-scheduler
work=$(mktemp -d)
root=$(host_root sched)
scratch=$root
source bench/scheduler/cluster.sh

start_model_and_proxy --max-sessions 1000000
printf 'limits:\n  - name: code_exec/{language}\n    kind: concurrency\n    permits: 256\nstate_path: none\nlearning_mode: false\n' > "$work/limiter.yaml"
start limiter $bin/corral-ratelimiter --insecure --config "$work/limiter.yaml" --grpc-listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --log-level warn
start host $bin/corral-sandbox-host --insecure --root "$root" --capacity 256 --grpc-listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --log-level warn "${host_uids[@]}"
sched_args=(--insecure --grpc-listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --http-listen 127.0.0.1:0 --journal "$work/scheduler.db"
  --host "$(addr host grpc)" --proxy "$(addr proxy grpc)" --ratelimiter "$(addr limiter grpc)" --default-model fake-model
  --max-concurrent-episodes 256 --log-level warn)
start scheduler $bin/corral-scheduler "${sched_args[@]}"

echo "scheduler benchmark: $n tool_loop episodes (2 LLM calls + 1 exec), 256 concurrent, $(nproc) cores, sandboxes on $(fs_kind "$root")" >&2
corral_out=$("$gen" --mode=scheduler --addr="$(addr scheduler grpc)" --n="$n"); echo "  corral: $corral_out" >&2
direct_out=$("$gen" --mode=direct --host="$(addr host grpc)" --llm="$(addr llm http)" --n="$n" --concurrency=256)
echo "  direct: $direct_out" >&2
sched_cpu=$(awk '{printf "%.2f", ($14+$15)/100}' "/proc/$pid_scheduler/stat")

# 100,000 episodes that cannot start (their only host drained): the scheduler's memory with them queued.
$bin/corral drain --scheduler "$(addr scheduler grpc)" --host "$(addr host grpc)" --grace 0 > /dev/null
queue_out=$("$gen" --mode=queue --addr="$(addr scheduler grpc)" --n="$queued"); echo "  queue: $queue_out" >&2
rss_mib=$(awk '/VmRSS/ {printf "%.1f", $2/1024}' "/proc/$pid_scheduler/status")

# kill -9, then the time until the restarted scheduler serves again with them journaled.
kill -9 "$pid_scheduler"; wait "$pid_scheduler" 2>/dev/null || true
rm -f "$work/scheduler.json"
t0=$(date +%s.%N)
start scheduler $bin/corral-scheduler "${sched_args[@]}"
until $bin/corral batch get queued --scheduler "$(addr scheduler grpc)" > /dev/null 2>&1; do sleep 0.02; done
restart_s=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.2f", b-a}')

eps=$(field eps "$corral_out"); direct_eps=$(field eps "$direct_out")
ratio=$(awk -v a="$eps" -v b="$direct_eps" 'BEGIN {printf "%.2f", a/b}')
cpu_ms=$(awk -v c="$sched_cpu" -v n="$n" 'BEGIN {printf "%.2f", 1000*c/n}')
printf '\n%-44s %10s %10s\n' "$n episodes, 256 concurrent" "eps" "seconds"
printf '%-44s %10s %10s\n' "corral (scheduler + proxy + limiter + host)" "$eps" "$(field seconds "$corral_out")"
printf '%-44s %10s %10s\n' "direct loop (model + host only)" "$direct_eps" "$(field seconds "$direct_out")"
printf 'ratio corral/direct: %sx   scheduler CPU %s ms/episode\n' "$ratio" "$cpu_ms"
printf 'overhead per episode (wall minus LLM calls and tools): p50 %s ms, p99 %s ms\n' \
  "$(field overhead_p50_ms "$corral_out")" "$(field overhead_p99_ms "$corral_out")"
printf '  of which not sandbox create/uploads (the scheduler and proxy themselves): p50 %s ms, p99 %s ms\n' \
  "$(field own_p50_ms "$corral_out")" "$(field own_p99_ms "$corral_out")"
printf 'scheduler RSS with %s queued episodes: %s MiB   restart with them journaled: %s s\n' "$queued" "$rss_mib" "$restart_s"
printf 'targets: ratio >= 0.8; overhead p99 <= 20 ms; RSS <= 256 MiB with 100,000 queued; restart <= 5 s\n'
echo "RESULT scheduler eps=$eps direct_eps=$direct_eps ratio=$ratio overhead_p99_ms=$(field overhead_p99_ms "$corral_out") rss_mib=$rss_mib restart_s=$restart_s"
