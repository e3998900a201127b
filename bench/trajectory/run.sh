#!/usr/bin/env bash
# The proxy's trajectory store on a long harness conversation (restoring re-encoded tool calls, recording, roles,
# export), per call beside parsing the same request's JSON — the work the proxy does for every call anyway.
# Prints p50/p99 per call over the conversation's last tenth, their ratio, and the session's export time.
#   bench/trajectory/run.sh        (BENCH_TURNS=200, BENCH_ROUNDS=5)
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/prepare.sh
prepare "" corral-bench-trajectory
turns=${BENCH_TURNS:-$(smoke_or 200 20)}
rounds=${BENCH_ROUNDS:-$(smoke_or 5 1)}
echo "trajectory store benchmark: $rounds rounds of a $turns-turn conversation, $(nproc) cores" >&2
"$bin/corral-bench-trajectory" "$turns" "$rounds"
