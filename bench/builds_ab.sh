#!/usr/bin/env bash
# Two builds of the whole tree side by side (not in CI; root, for the sandbox host): did a change cost speed?
# For each round, each build in turn: the scheduler bench (episodes/s through the whole cluster, its overhead
# per episode), the sandbox host bench (1,000 sandboxes' lifecycle, exec round trip), and the proxy's A/B runs
# (requests/s at c=64). Interleaving the builds, first one then the other, keeps the VM's drift out of the
# comparison. Prints each run,
# then the median per build and the ratio NEW/OLD for each figure (higher is better for rates, lower for times).
#   bench/builds_ab.sh OLD_BUILD_DIR NEW_BUILD_DIR      (AB_ROUNDS=3; the benches' own knobs apply, e.g.
#                                                       BENCH_EPISODES=2000 BENCH_SANDBOXES=300)
#   e.g. git worktree add /tmp/before HEAD~3 && (cd /tmp/before && cmake -S . -B build -G Ninja -DCORRAL_BENCH=ON
#        && ninja -C build); bench/builds_ab.sh /tmp/before/build build
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $# -eq 2 ]] || { sed -n '2,10p' "$0"; exit 2; }
source bench/prepare.sh
prepare "bubblewrap libhiredis-dev wrk"  # the peers' packages; both builds must already hold the bench targets
[[ $(id -u) -eq 0 ]] || { echo "run as root: the sandbox host switches uids" >&2; exit 77; }
rounds=${AB_ROUNDS:-$(smoke_or 3 1)}
old=$(cd "$1" && pwd)
new=$(cd "$2" && pwd)
results=$(mktemp)
trap 'rm -f "$results"' EXIT

# One bench on one build: its RESULT line, tagged with the build.
run() {  # label build script [args...]
  local label=$1 build=$2
  shift 2
  local line
  line=$(BENCH_PREBUILT=1 BENCH_BUILD_DIR=$build bash "$@" 2> /dev/null | grep '^RESULT ') || { echo "$* on $build failed" >&2; exit 1; }
  echo "$label $line" | tee -a "$results" >&2
}

for r in $(seq "$rounds"); do
  order="old new"
  ((r % 2 == 0)) && order="new old"  # alternating, so a drift within a round favours neither build
  for side in $order; do
    build=$old
    [[ $side == new ]] && build=$new
    echo "round $r, $side build ($build)" >&2
    run "$side" "$build" bench/scheduler/run.sh
    # Only its lifecycle figures are compared: not the forks of larger homes (an older build's generator may
    # lack their flags).
    BENCH_FORK_HOMES= run "$side" "$build" bench/sandbox_host/run.sh
  done
  # The proxy's A/B script interleaves the two binaries itself.
  line=$(BENCH_PREBUILT=1 BENCH_BUILD_DIR=$new AB_ROUNDS=1 bash bench/proxy/ab.sh "$old/bin/corral-proxy" "$new/bin/corral-proxy" 2> /dev/null |
         grep '^RESULT ')
  rps=$(sed -n 's/.*rps_c64=\([0-9.,]*\).*/\1/p' <<< "$line")
  echo "old RESULT proxy_ab rps=${rps%%,*}" | tee -a "$results" >&2
  echo "new RESULT proxy_ab rps=${rps##*,}" | tee -a "$results" >&2
done

# Medians per build and figure, and NEW/OLD.
summary=$(python3 - "$results" <<'PY'
import re, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    side, _, bench, *pairs = line.split()
    for p in pairs:
        key, _, value = p.partition("=")
        if re.fullmatch(r"-?[0-9.]+", value):
            runs.setdefault((bench, key), {}).setdefault(side, []).append(float(value))
figures = [("scheduler", "eps"), ("scheduler", "overhead_p99_ms"), ("scheduler", "rss_mib"),
           ("sandbox_host", "total_s"), ("sandbox_host", "exec_p50_ms"), ("sandbox_host", "rss_mib"),
           ("proxy_ab", "rps")]
out = []
for bench, key in figures:
    sides = runs.get((bench, key), {})
    if "old" not in sides or "new" not in sides:
        continue
    o, n = statistics.median(sides["old"]), statistics.median(sides["new"])
    ratio = n / o if o else float("nan")
    print(f"{bench:>13} {key:<16} old {o:>10.2f}   new {n:>10.2f}   new/old {ratio:.3f}", file=sys.stderr)
    out.append(f"{bench}_{key}={ratio:.3f}")
print(" ".join(out))
PY
)
echo "RESULT builds_ab rounds=$rounds $summary"
