#!/usr/bin/env bash
# Live fork benchmark (not in CI; needs root): a sandbox whose fork-ready Python process holds 50 MiB of state is
# forked into 64 children through corral-sandbox-host's gRPC API on loopback; timed until every child's copy
# answers with the parent's state, against forking a sandbox with no process into as many children (today's file
# fork), for a process that carries itself, one the host carries, and one beside a stdio MCP server the host
# carries. Also the memory each copy has of its own, beside the published figures of process forks without VMs
# (sandlock, DeltaBox) and with them (AgentENV, E2B).
#   bench/fork/run.sh        (BENCH_CHILDREN=64, BENCH_STATE_MIB=50)
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/prepare.sh
children=${BENCH_CHILDREN:-$(smoke_or 64 2)}
state=${BENCH_STATE_MIB:-$(smoke_or 50 1)}
[[ $(id -u) -eq 0 ]] || { echo "run as root: the sandbox host switches uids" >&2; exit 77; }
prepare "" corral-sandbox-host corral-bench-carry

work=$(mktemp -d)
root=$(host_root fork)
host_pid=
cleanup() { [[ -n "$host_pid" ]] && kill "$host_pid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$work" "$root"; }
trap cleanup EXIT
$bin/corral-sandbox-host --insecure --root "$root" --capacity $(( 2 * children + 8 )) --log-level ${BENCH_HOST_LOG:-warn} \
  --grpc-listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 "${host_uids[@]}" --ready-file "$work/ready.json" > "$work/host.log" 2>&1 &
host_pid=$!
for _ in $(seq 200); do [[ -s "$work/ready.json" ]] && break; sleep 0.05; done
addr=$(python3 -c "import json; print(json.load(open('$work/ready.json'))['grpc'])")
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" <<< "$2"; }

echo "live fork benchmark: $children children of a process holding $state MiB, $(nproc) cores, sandboxes on $(fs_kind "$root")" >&2
declare -A out
for mode in self driven mcp; do
  out[$mode]=$($bin/corral-bench-carry --addr="$addr" --n="$children" --state-mib="$state" --mode=$mode) ||
    { cat "$work/host.log" >&2; exit 1; }
  echo "  ${out[$mode]}" >&2
done
file=$(field file_fork_ms "${out[self]}")
printf '\n%-52s %10s %10s %10s\n' "$children children, ms" "self" "driven" "self+mcp"
row() {
  printf '%-52s %10s %10s %10s\n' "$1" "$(field "$2" "${out[self]}")" "$(field "$2" "${out[driven]}")" \
    "$(field "$2" "${out[mcp]}")"
}
row "file fork (no process), as today" file_fork_ms
row "carried: ForkSandbox returns" carry_fork_ms
row "carried: every copy answered with the parent's state" carry_all_ms
row "carry per child (carried fork - file fork) / n" carry_per_child_ms
row "a copy answering (attach + round trip), p50" answer_p50_ms
row "a copy answering, p99" answer_p99_ms
row "memory of its own per copy (private KiB)" copy_private_kib
row "the parent's own (private KiB)" parent_private_kib
all=$(field carry_all_ms "${out[self]}") per=$(field carry_per_child_ms "${out[self]}")
# Published figures (their own machines, not this one): a clone of a 50 MB Python process by a fork-ready init
# (sandlock, no VM) ~0.5 ms; a fork of a CRIU-restored template (DeltaBox) 1.86 ms; VM forks (AgentENV, E2B) under
# 100 ms each.
echo
printf '%-52s %10s\n' "published, per clone: sandlock (no VM)" "~0.5" "published, per fork: DeltaBox (CRIU template)" "1.86" \
  "published, per fork: AgentENV / E2B (VMs)" "<100"
for mode in self driven mcp; do
  awk -v m=$mode -v a="$(field carry_all_ms "${out[$mode]}")" -v f="$(field file_fork_ms "${out[$mode]}")" \
    -v p="$(field carry_per_child_ms "${out[$mode]}")" 'BEGIN {
    printf "%-6s carried/file fork: %.2fx (target <= 2x); carry per child %.2f ms (target p99 < 5 ms)\n", m, a/f, p }'
done
[[ "${BENCH_HOST_LOG:-warn}" == warn ]] || grep -E "carried|forked into" "$work/host.log" >&2
echo "RESULT fork children=$children state_mib=$state carry_all_ms=$all file_fork_ms=$file carry_per_child_ms=$per copy_private_kib=$(field copy_private_kib "${out[self]}") driven_all_ms=$(field carry_all_ms "${out[driven]}") mcp_all_ms=$(field carry_all_ms "${out[mcp]}")"
