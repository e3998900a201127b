#!/usr/bin/env bash
# Verifier isolation benchmark (not in CI; needs root for the sandbox host). Side by side in one run, rounds
# alternating: agent episodes whose verifier runs in a fork of the sandbox as another uid (SEPARATE_UID, the
# default) and the same episodes with the verifier in the agent's own sandbox (CLEAN_ENV). Prints the verifier
# phase's time (EpisodeResult.timings.verifier: from the end of the agent phase to the reward, the fork and its
# delete included) per isolation, p50 and p99, and the ratio SEPARATE_UID/CLEAN_ENV.
# Beside each, the CPU an episode costs: the sandbox host's own (user + system) and the whole machine's (every
# process and the kernel's threads), per episode, from /proc.
#   bench/verifier/run.sh        (BENCH_EPISODES=200 per isolation, BENCH_ROUNDS=4, BENCH_CONCURRENCY=16 episodes
#                                 at once; BENCH_LOGS=DIR keeps the host's log there, at info: one line per fork
#                                 with its time and its wait)
# Where the time goes: bench/verifier/README.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/prepare.sh
n=${BENCH_EPISODES:-$(smoke_or 200 4)}
rounds=${BENCH_ROUNDS:-$(smoke_or 4 1)}
concurrency=${BENCH_CONCURRENCY:-16}
[[ $(id -u) -eq 0 ]] || { echo "run as root: the sandbox host switches uids" >&2; exit 77; }
prepare "" corral-scheduler corral-proxy corral-sandbox-host corral-fake-llm
python=$build/sdk-venv/bin/python
[[ -x $python ]] || { echo "no SDK venv in $build (build the corral_python_sdk target)" >&2; exit 1; }

work=$(mktemp -d)
root=$(host_root verifier)
scratch=$root
source bench/scheduler/cluster.sh

start_model_and_proxy
host_log_level=warn
[[ -z "${BENCH_LOGS:-}" ]] || host_log_level=info
start host $bin/corral-sandbox-host --insecure --root "$root" --capacity 64 --grpc-listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --log-level "$host_log_level" "${host_uids[@]}"
start scheduler $bin/corral-scheduler --insecure --grpc-listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --http-listen 127.0.0.1:0 \
  --journal "$work/scheduler.db" --host "$(addr host grpc)" --proxy "$(addr proxy grpc)" --default-model fake-model \
  --max-concurrent-episodes "$concurrency" --log-level warn

echo "verifier benchmark: $rounds rounds of $n agent episodes per isolation, $concurrency concurrent, $(nproc) cores, sandboxes on $(fs_kind "$root")" >&2
"$python" - "$(addr scheduler grpc)" "$n" "$rounds" "$pid_host" <<'PY'
import os, sys
import corral
from corral.v1 import common_pb2, scheduler_pb2

address, n, rounds, host_pid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
client = corral.Client(address)
tick = os.sysconf("SC_CLK_TCK")

def host_cpu():  # the sandbox host's user + system seconds
    fields = open(f"/proc/{host_pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / tick

def machine_cpu():  # every CPU's busy seconds: all but idle and iowait
    values = [int(v) for v in open("/proc/stat").readline().split()[1:]]
    return (sum(values) - values[3] - values[4]) / tick

def task(i, isolation):
    t = scheduler_pb2.Task(id=f"t{i}", prompt="noop", runner=scheduler_pb2.RUNNER_AGENT)
    t.agent.command.argv.extend(["true"])
    t.verifier.command.argv.extend(["sh", "-c", "echo 1 > /logs/verifier/reward.txt"])
    t.verifier.isolation = isolation
    return t

times = {"separate_uid": [], "clean_env": []}
cpu = {name: [0.0, 0.0] for name in times}  # host, machine seconds
kinds = [("separate_uid", scheduler_pb2.VERIFIER_ISOLATION_SEPARATE_UID),
         ("clean_env", scheduler_pb2.VERIFIER_ISOLATION_CLEAN_ENV)]
for r in range(rounds):
    for name, isolation in (kinds if r % 2 == 0 else kinds[::-1]):
        host0, machine0 = host_cpu(), machine_cpu()
        batch = client.submit([task(i, isolation) for i in range(n)], batch_id=f"{name}-{r}")
        for res in batch.results(exclude_trajectories=True):
            ev = res.verifier_evidence
            assert ev.isolation == isolation, (name, res.failure_message)
            t = res.timings.verifier
            times[name].append((t.seconds + t.nanos / 1e9) * 1000)
        cpu[name][0] += host_cpu() - host0
        cpu[name][1] += machine_cpu() - machine0
        print(f"  round {r + 1}: {name} done", file=sys.stderr)

def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]

print(f"\n{'verifier phase (ms)':<24} {'p50':>8} {'p99':>8} {'episodes':>9} {'host CPU ms/ep':>15} {'machine CPU ms/ep':>18}")
for name, _ in kinds:
    k = len(times[name])
    print(f"{name:<24} {pct(times[name], 0.5):8.1f} {pct(times[name], 0.99):8.1f} {k:9d} "
          f"{cpu[name][0] * 1000 / k:15.1f} {cpu[name][1] * 1000 / k:18.1f}")
ratio = pct(times["separate_uid"], 0.5) / pct(times["clean_env"], 0.5)
print(f"ratio separate_uid/clean_env (p50): {ratio:.2f}x")
print(f"RESULT verifier separate_p50_ms={pct(times['separate_uid'], 0.5):.1f} "
      f"clean_p50_ms={pct(times['clean_env'], 0.5):.1f} separate_p99_ms={pct(times['separate_uid'], 0.99):.1f} "
      f"clean_p99_ms={pct(times['clean_env'], 0.99):.1f} ratio={ratio:.2f} "
      f"separate_host_cpu_ms={cpu['separate_uid'][0] * 1000 / len(times['separate_uid']):.1f} "
      f"clean_host_cpu_ms={cpu['clean_env'][0] * 1000 / len(times['clean_env']):.1f}")
PY
[[ -z "${BENCH_LOGS:-}" ]] || { mkdir -p "$BENCH_LOGS"; cp "$work/host.log" "$BENCH_LOGS/"; }
