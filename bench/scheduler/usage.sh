#!/usr/bin/env bash
# What metering costs (not in CI; needs root for the sandbox host). The scheduler benchmark's tool_loop episodes
# through the whole cluster, in alternating rounds side by side:
#   metered    as shipped: the host reads every sandbox's cgroup each second, and the scheduler reads each
#              episode's sandbox usage (one GetSandbox with its disk measured) as the episode ends
#   unmetered  --usage-readings=false on the host, --measure-usage=false on the scheduler
# and prints the throughput of each and their ratio (target: metered >= 0.98 x unmetered).
#   bench/scheduler/usage.sh        (BENCH_EPISODES=3000 per round, BENCH_ROUNDS=3)
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/prepare.sh
n=${BENCH_EPISODES:-$(smoke_or 3000 20)}
rounds=${BENCH_ROUNDS:-$(smoke_or 3 1)}
[[ $(id -u) -eq 0 ]] || { echo "run as root: the sandbox host switches uids" >&2; exit 77; }
prepare "" corral-scheduler corral-proxy corral-ratelimiter corral-sandbox-host corral-fake-llm corral-bench-scheduler

gen=$bin/corral-bench-scheduler
work=$(mktemp -d)
root=/var/tmp/corral-bench-usage-$$
scratch=$root
source bench/scheduler/cluster.sh

start_model_and_proxy --max-sessions 1000000
printf 'limits:\n  - name: code_exec/{language}\n    kind: concurrency\n    permits: 256\nstate_path: none\nlearning_mode: false\n' > "$work/limiter.yaml"
start limiter $bin/corral-ratelimiter --insecure --config "$work/limiter.yaml" --grpc-listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --log-level warn

# One round: a host and a scheduler with metering on or off, N episodes, then both stopped.
round() {
  local metered=$1 name=$2
  start "host-$name" $bin/corral-sandbox-host --insecure --root "$root-$name" --capacity 256 --grpc-listen 127.0.0.1:0 \
    --metrics-listen 127.0.0.1:0 --log-level warn --usage-readings="$metered" "${host_uids[@]}"
  start "scheduler-$name" $bin/corral-scheduler --insecure --grpc-listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 \
    --journal "$work/scheduler-$name.db" --host "$(addr "host-$name" grpc)" --proxy "$(addr proxy grpc)" \
    --ratelimiter "$(addr limiter grpc)" --default-model fake-model --max-concurrent-episodes 256 --log-level warn \
    --measure-usage="$metered"
  local out; out=$("$gen" --mode=scheduler --addr="$(addr "scheduler-$name" grpc)" --n="$n")
  local pid_h pid_s; eval "pid_h=\$pid_host_$name; pid_s=\$pid_scheduler_$name"
  kill "$pid_s" "$pid_h"; wait "$pid_s" "$pid_h" 2>/dev/null || true
  rm -rf "$root-$name"
  field eps "$out"
}

echo "metering overhead: $n tool_loop episodes per round, $rounds round(s) each way, $(nproc) cores" >&2
metered=(); unmetered=()
for r in $(seq "$rounds"); do  # alternating, so a machine's drift hits both alike
  unmetered+=("$(round false "off$r")"); echo "  round $r unmetered: ${unmetered[-1]} eps" >&2
  metered+=("$(round true "on$r")"); echo "  round $r metered:   ${metered[-1]} eps" >&2
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
on=$(median "${metered[@]}"); off=$(median "${unmetered[@]}")
ratio=$(awk -v a="$on" -v b="$off" 'BEGIN {printf "%.3f", a/b}')
printf '\n%-40s %10s\n' "median of $rounds round(s), $n episodes" "eps"
printf '%-40s %10s\n' "metered (as shipped)" "$on"
printf '%-40s %10s\n' "unmetered (readings and reads off)" "$off"
printf 'ratio metered/unmetered: %sx   target: >= 0.98\n' "$ratio"
echo "RESULT scheduler_usage metered_eps=$on unmetered_eps=$off ratio=$ratio"
