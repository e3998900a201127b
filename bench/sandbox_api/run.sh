#!/usr/bin/env bash
# Sandbox API benchmark (needs root for the sandbox host). Side by side in one run, rounds alternating:
#   corral   SandboxFusion's /run_code of `print(1)` through corral-sandbox-api — a code_exec permit from the
#            ratelimiter, a sandbox leased from the scheduler (its warm pool), the code run there, the lease
#            released — with C callers at once
#   floor    the same C callers each running `python3 -c 'print(1)'` on this machine, no sandbox at all
# Prints calls per second and latency percentiles for both, and the ratio corral/floor (target: at least 0.7).
# Then the E2B API, with the real e2b SDK (tests/e2b): create -> first command p50/p95/p99 one at a time, one
# every 50 ms and a burst, beside the same work on Corral's own gRPC path (LeaseSandbox + Exec) with the ratio,
# the burst beside its floor (the same `bash -l -c` first commands started at once with no sandbox) with the ratio,
# and fork of 8 -> a first command in each child; the vendors' published figures are printed for reference. Then
# @e2b/code-interpreter's runCode on a warm context beside a bare `python3 -c` in the same sandbox, with the ratio;
# betaPause, and connect (the resume) -> a first command beside create -> a first command, with the ratio; and a
# template build (three RUN steps and a COPY) cold and cached, beside the same commands run by hand in a sandbox.
#   bench/sandbox_api/run.sh        (BENCH_CALLS=400 per round, BENCH_CONCURRENCY=8, BENCH_ROUNDS=3,
#                                    BENCH_E2B=50 one at a time, BENCH_E2B_PACED=100, BENCH_E2B_BURST=100,
#                                    BENCH_E2B_FORKS=10 rounds, BENCH_E2B_RUNS=50 runCode calls,
#                                    BENCH_E2B_PAUSES=20 pause/resume cycles, BENCH_E2B_TEMPLATES=5 builds)
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/prepare.sh
calls=${BENCH_CALLS:-$(smoke_or 400 8)}
concurrency=${BENCH_CONCURRENCY:-$(smoke_or 8 2)}
rounds=${BENCH_ROUNDS:-$(smoke_or 3 1)}
e2b_one=${BENCH_E2B:-$(smoke_or 50 2)}
e2b_paced=${BENCH_E2B_PACED:-$(smoke_or 100 3)}
e2b_burst=${BENCH_E2B_BURST:-$(smoke_or 100 3)}
e2b_forks=${BENCH_E2B_FORKS:-$(smoke_or 10 1)}
e2b_runs=${BENCH_E2B_RUNS:-$(smoke_or 50 3)}
e2b_pauses=${BENCH_E2B_PAUSES:-$(smoke_or 20 2)}
e2b_templates=${BENCH_E2B_TEMPLATES:-$(smoke_or 5 1)}
[[ $(id -u) -eq 0 ]] || { echo "run as root: the sandbox host switches uids" >&2; exit 77; }
prepare "" corral-scheduler corral-proxy corral-ratelimiter corral-sandbox-host corral-fake-llm corral-sandbox-api corral \
  corral_python_sdk
[[ -f tests/e2b/node_modules/e2b/dist/index.mjs && -f tests/e2b/node_modules/@e2b/code-interpreter/dist/index.mjs ]] ||
  npm ci --prefix tests/e2b --no-audit --no-fund --loglevel=error

work=$(mktemp -d)
root=$(host_root sandbox-api)
scratch=$root
source bench/scheduler/cluster.sh

start_model_and_proxy
printf 'limits:\n  - name: code_exec/{language}\n    kind: concurrency\n    permits: %d\nstate_path: none\nlearning_mode: false\n' \
  "$concurrency" > "$work/limiter.yaml"
start limiter $bin/corral-ratelimiter --insecure --config "$work/limiter.yaml" --grpc-listen 127.0.0.1:0 \
  --metrics-listen 127.0.0.1:0 --log-level warn
start host $bin/corral-sandbox-host --insecure --root "$root" --capacity 128 --grpc-listen 127.0.0.1:0 \
  --metrics-listen 127.0.0.1:0 --log-level warn "${host_uids[@]}"
start scheduler $bin/corral-scheduler --insecure --grpc-listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 \
  --journal "$work/scheduler.db" --host "$(addr host grpc)" --proxy "$(addr proxy grpc)" \
  --ratelimiter "$(addr limiter grpc)" --default-model fake-model --warm-pool-size "$((2 * concurrency))" \
  --log-level warn
# The API checks E2B keys with a secret of its own (the cluster itself runs --insecure).
python3 -c 'import secrets; print(secrets.token_hex(32))' > "$work/secret"
chmod 600 "$work/secret"
start api $bin/corral-sandbox-api --insecure --secret-file "$work/secret" --grpc-listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 \
  --http-listen 127.0.0.1:0 --scheduler "$(addr scheduler grpc)" --ratelimiter "$(addr limiter grpc)" --log-level warn

# The floor runs the python3 a sandbox finds on its PATH (not, say, a pyenv shim first on the caller's PATH).
python=$(PATH=/usr/local/bin:/usr/bin:/bin command -v python3)
echo "sandbox API benchmark: $rounds rounds of $calls print(1) calls per side, $concurrency at once, $python, $(nproc) cores, sandboxes on $(fs_kind "$root")" >&2
python3 - "http://$(addr api http)/run_code" "$calls" "$concurrency" "$rounds" "$python" <<'PY'
import concurrent.futures, json, subprocess, sys, time, urllib.request
url, calls, concurrency, rounds, python = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
body = json.dumps({"compile_timeout": 10, "run_timeout": 10, "code": "print(1)", "stdin": None,
                   "memory_limit_MB": 1024, "language": "python", "files": {}, "fetch_files": []}).encode()

def corral(_):
    t = time.perf_counter()
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=60) as r:
        answer = json.loads(r.read())
    assert answer["status"] == "Success" and answer["run_result"]["stdout"] == "1\n", answer
    return time.perf_counter() - t

def floor(_):
    t = time.perf_counter()
    out = subprocess.run([python, "-c", "print(1)"], capture_output=True, check=True).stdout
    assert out == b"1\n"
    return time.perf_counter() - t

def side(fn):
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        t = time.perf_counter()
        latencies = sorted(pool.map(fn, range(calls)))
        return calls / (time.perf_counter() - t), latencies

def pct(xs, q):
    return 1000 * xs[min(len(xs) - 1, int(q * len(xs)))]

side(corral)  # warm the pool and the connections: not counted
results = {"corral": [], "floor": []}
for r in range(rounds):
    for name, fn in ((("corral", corral), ("floor", floor)) if r % 2 == 0 else (("floor", floor), ("corral", corral))):
        results[name].append(side(fn))

def summary(name):
    rates = sorted(rate for rate, _ in results[name])
    latencies = sorted(x for _, xs in results[name] for x in xs)
    return rates[len(rates) // 2], pct(latencies, 0.5), pct(latencies, 0.99)

print("\n%-46s %10s %10s %10s" % ("%d calls x %d rounds, %d at once" % (calls, rounds, concurrency), "calls/s", "p50 ms",
                                   "p99 ms"))
rows = {name: summary(name) for name in ("corral", "floor")}
print("%-46s %10.1f %10.1f %10.1f" % (("corral /run_code (permit, lease, run, release)",) + rows["corral"]))
print("%-46s %10.1f %10.1f %10.1f" % (("floor: python3 -c 'print(1)', no sandbox",) + rows["floor"]))
ratio = rows["corral"][0] / rows["floor"][0]
print("ratio corral/floor: %.2fx (target >= 0.7)" % ratio)
print("RESULT sandbox_api calls_per_s=%.1f floor_calls_per_s=%.1f ratio=%.2f p50_ms=%.1f p99_ms=%.1f floor_p50_ms=%.1f" % (
    rows["corral"][0], rows["floor"][0], ratio, rows["corral"][1], rows["corral"][2], rows["floor"][1]))
PY
# Where a call's time went, from the API's histograms (means over every call, the warm-up's included): waiting for
# its permit, for its sandbox (LeaseSandbox), and the rest (writing the files, running, reading, the release).
python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())' \
  "http://$(addr api metrics)/metrics" | awk '
  /^corral_sandbox_api_(run_code|permit_wait|lease)_seconds_(sum|count)/ {
    split($1, a, "_seconds_"); v[a[1] "_" a[2]] = $2 }
  END {
    n = v["corral_sandbox_api_run_code_count"]; if (n == 0) exit
    call = 1000 * v["corral_sandbox_api_run_code_sum"] / n
    permit = 1000 * v["corral_sandbox_api_permit_wait_sum"] / v["corral_sandbox_api_permit_wait_count"]
    lease = 1000 * v["corral_sandbox_api_lease_sum"] / v["corral_sandbox_api_lease_count"]
    printf "  a call, mean %.1f ms: its permit %.1f ms, its sandbox %.1f ms, the rest %.1f ms\n", call, permit, lease,
      call - permit - lease }' >&2
# Where the CPU went, per /run_code call (everything since start: the warm-up and the floor's rounds included for
# the client, so only the services' figures are per call).
total=$(( calls * (rounds + 1) ))
for svc in api scheduler host limiter; do
  pid_var=pid_$svc
  awk -v t="$(cpu_ticks "${!pid_var}")" -v n="$total" -v s="$svc" 'BEGIN {printf "  cpu %-9s %.2f ms/call\n", s, 10*t/n}' >&2
done

# The E2B API.
key=$($bin/corral sandbox-api key bench --secret-file "$work/secret")
api=http://$(addr api http)
echo "E2B benchmark: create -> first command ($e2b_one one at a time, $e2b_paced one every 50 ms, a burst of $e2b_burst), fork of 8 x $e2b_forks, runCode x $e2b_runs, pause/resume x $e2b_pauses, template builds x $e2b_templates" >&2
e2b=$(E2B_API_KEY=$key E2B_API_URL=$api E2B_SANDBOX_URL=$api node bench/sandbox_api/e2b_bench.mjs \
  "$e2b_one" "$e2b_paced" "$e2b_burst" "$e2b_forks" "$e2b_runs" "$e2b_pauses" "$e2b_templates")
grpc=$("$build/sdk-venv/bin/python" bench/sandbox_api/grpc_path.py "$(addr scheduler grpc)" "$e2b_one")
# The burst's floor: the same first command (the SDK's `bash -l -c`) started as many times at once on this machine,
# with no sandbox, a clean environment and an empty home, each timed from the burst's start.
mkdir -p "$work/empty-home"
floor=$(python3 - "$e2b_burst" "$work/empty-home" <<'PY'
import concurrent.futures, subprocess, sys, time
n, home = int(sys.argv[1]), sys.argv[2]
start = time.perf_counter()
def one(_):
    out = subprocess.run(["bash", "-l", "-c", "echo 1"], env={"HOME": home, "PATH": "/usr/bin:/bin"},
                         capture_output=True, check=True).stdout
    assert out == b"1\n"
    return 1000 * (time.perf_counter() - start)
with concurrent.futures.ThreadPoolExecutor(n) as pool:
    xs = sorted(pool.map(one, range(n)))
pct = lambda q: xs[min(len(xs) - 1, int(q * len(xs)))]
print("RESULT floor mode=bash_l_burst_of_%d n=%d p50_ms=%.1f p95_ms=%.1f p99_ms=%.1f" % (n, n, pct(.5), pct(.95), pct(.99)))
PY
)
python3 - "$e2b" "$grpc" "$floor" <<'PY'
import re, sys
rows = [dict(re.findall(r"(\w+)=([\w.]+)", line), api=line.split()[1])
        for line in "\n".join(sys.argv[1:]).splitlines() if line.startswith("RESULT")]
print("\n%-52s %6s %9s %9s %9s" % ("create -> first command", "n", "p50 ms", "p95 ms", "p99 ms"))
for r in rows:
    name = {"grpc": "gRPC: LeaseSandbox + Exec, ", "floor": "floor, no sandbox: "}.get(r["api"], "e2b SDK: ") + \
        r["mode"].replace("_", " ")
    print("%-52s %6s %9s %9s %9s" % (name, r["n"], r["p50_ms"], r["p95_ms"], r["p99_ms"]))
e2b = next(r for r in rows if r["api"] == "e2b" and r["mode"] == "one_at_a_time")
grpc = next(r for r in rows if r["api"] == "grpc")
print("ratio e2b SDK / gRPC path, p50 one at a time: %.2fx" % (float(e2b["p50_ms"]) / float(grpc["p50_ms"])))
burst = next(r for r in rows if r["api"] == "e2b" and r["mode"].startswith("burst_of"))
floor = next(r for r in rows if r["api"] == "floor")
print("ratio e2b SDK burst / the same first commands with no sandbox, p50: %.2fx" %
      (float(burst["p50_ms"]) / float(floor["p50_ms"])))
run_code = next((r for r in rows if r["mode"] == "run_code"), None)
bare = next((r for r in rows if r["mode"] == "python3_c"), None)
if run_code and bare:  # (BENCH_E2B_RUNS=0: not measured)
    print("ratio runCode (warm context) / a bare python3 -c in the same sandbox, p50: %.2fx" %
          (float(run_code["p50_ms"]) / float(bare["p50_ms"])))
resume = next((r for r in rows if r["mode"] == "resume_to_first_command"), None)
if resume:  # (BENCH_E2B_PAUSES=0: not measured)
    print("ratio resume -> first command / create -> first command, p50: %.2fx" %
          (float(resume["p50_ms"]) / float(e2b["p50_ms"])))
cold = next((r for r in rows if r["mode"] == "template_build_cold"), None)
if cold:  # (BENCH_E2B_TEMPLATES=0: not measured)
    cached = next(r for r in rows if r["mode"] == "template_build_cached")
    by_hand = next(r for r in rows if r["mode"] == "template_steps_by_hand")
    print("ratio template build cold / the same steps run by hand in a new sandbox, p50: %.2fx; cached / cold: %.2fx" %
          (float(cold["p50_ms"]) / float(by_hand["p50_ms"]), float(cached["p50_ms"]) / float(cold["p50_ms"])))
    inside = {r["mode"]: float(r["p50_ms"]) for r in rows if r["mode"].endswith("in_the_scheduler")}
    if len(inside) == 2:  # the SDK waits for its 200 ms status polls; the build itself is this
        print("  in the scheduler: cold %.1f ms, cached %.1f ms (%.2fx)" % (
            inside["template_build_cold_in_the_scheduler"], inside["template_build_cached_in_the_scheduler"],
            inside["template_build_cached_in_the_scheduler"] / inside["template_build_cold_in_the_scheduler"]))
print("published, not measured here (their hardware): E2B ~150 ms sandbox start; Daytona sub-90 ms creation;")
print("  E2B pause ~4 s per GiB of memory, resume ~1 s (its docs)")
PY
