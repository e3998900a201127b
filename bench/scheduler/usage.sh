#!/usr/bin/env bash
# What metering costs (not in CI; needs root for the sandbox host). The scheduler benchmark's tool_loop episodes
# through the whole cluster, in alternating rounds side by side:
#   metered    as shipped: the host reads every sandbox's cgroup each second, and the scheduler reads each
#              episode's sandbox usage as it deletes the sandbox (DeleteSandbox with its disk measured)
#   unmetered  --usage-readings=false on the host, --measure-usage=false on the scheduler
# and prints the throughput of each and their ratio (target: metered >= 0.98 x unmetered), and the CPU the host
# and the scheduler spent per episode (steadier than throughput on a noisy machine: the cost of metering itself).
#   bench/scheduler/usage.sh        (BENCH_EPISODES=3000 per round, BENCH_ROUNDS=5)
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/prepare.sh
n=${BENCH_EPISODES:-$(smoke_or 3000 20)}
rounds=${BENCH_ROUNDS:-$(smoke_or 5 1)}
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

# One round: a host and a scheduler with metering on or off, N episodes, then both stopped. Prints
# "EPS CPU_MS": episodes per second, and the host's and the scheduler's CPU per episode in milliseconds.
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
  local ticks=$(( $(cpu_ticks "$pid_h") + $(cpu_ticks "$pid_s") ))
  kill "$pid_s" "$pid_h"; wait "$pid_s" "$pid_h" 2>/dev/null || true
  rm -rf "$root-$name"
  echo "$(field eps "$out") $(awk -v t="$ticks" -v n="$n" 'BEGIN {printf "%.2f", 10 * t / n}')"
}

echo "metering overhead: $n tool_loop episodes per round, $rounds round(s) each way, $(nproc) cores" >&2
metered=(); unmetered=(); metered_cpu=(); unmetered_cpu=()
# Alternating, and which goes first alternates too: a machine's drift, and whatever the shared model, proxy and
# limiter accumulate from round to round, hit both alike.
one() {
  local on=$1 r=$2 eps cpu
  if [[ $on == true ]]; then
    read -r eps cpu <<< "$(round true "on$r")"; metered+=("$eps"); metered_cpu+=("$cpu")
    echo "  round $r metered:   $eps eps, $cpu ms CPU/episode" >&2
  else
    read -r eps cpu <<< "$(round false "off$r")"; unmetered+=("$eps"); unmetered_cpu+=("$cpu")
    echo "  round $r unmetered: $eps eps, $cpu ms CPU/episode" >&2
  fi
}
for r in $(seq "$rounds"); do
  if (( r % 2 )); then one false "$r"; one true "$r"; else one true "$r"; one false "$r"; fi
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
on=$(median "${metered[@]}"); off=$(median "${unmetered[@]}")
on_cpu=$(median "${metered_cpu[@]}"); off_cpu=$(median "${unmetered_cpu[@]}")
ratio=$(awk -v a="$on" -v b="$off" 'BEGIN {printf "%.3f", a/b}')
cpu_ratio=$(awk -v a="$on_cpu" -v b="$off_cpu" 'BEGIN {printf "%.3f", a/b}')
printf '\n%-40s %10s %22s\n' "median of $rounds round(s), $n episodes" "eps" "host+scheduler CPU/ep"
printf '%-40s %10s %19s ms\n' "metered (as shipped)" "$on" "$on_cpu"
printf '%-40s %10s %19s ms\n' "unmetered (readings and reads off)" "$off" "$off_cpu"
printf 'ratio metered/unmetered: %sx throughput (target: >= 0.98), %sx CPU per episode\n' "$ratio" "$cpu_ratio"
echo "RESULT scheduler_usage metered_eps=$on unmetered_eps=$off ratio=$ratio cpu_ratio=$cpu_ratio"
