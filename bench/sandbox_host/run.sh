#!/usr/bin/env bash
# Sandbox host benchmark (not in CI; needs root): 1,000 sandboxes created, exec'd and deleted through the gRPC
# API on loopback; exec round trip on a warm sandbox; the host's RSS with 1,000 live sandboxes; and, timed by
# the same program, the peers: raw posix_spawn of `true` (the physical floor) and bubblewrap with comparable
# isolation. Then create-to-first-command latency the way the public sandbox leaderboards measure it (one at a
# time, staggered, a burst), printed beside the hosted vendors' published medians. Then ForkSandbox: 1, 8 and 64
# children of a sandbox with a 100 MiB home against as many fresh creates and as many copies of the home, 64
# children of an empty home and of a 1 GiB one against 64 creates, and the host's memory and disk with 1,000 forks
# alive.
#   bench/sandbox_host/run.sh        (BENCH_SANDBOXES=1000, BENCH_EXECS=500, BENCH_FIRST_COMMANDS=100, BENCH_FORKS=1000,
#                                     BENCH_FORK_HOMES="0 1024": the homes, in MiB, of the 64-children-against-creates
#                                     runs; empty: none)
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/prepare.sh
n=${BENCH_SANDBOXES:-$(smoke_or 1000 20)}
execs=${BENCH_EXECS:-$(smoke_or 500 20)}
first=${BENCH_FIRST_COMMANDS:-$(smoke_or 100 10)}
forks=${BENCH_FORKS:-$(smoke_or 1000 20)}
fork_mib=$(smoke_or 100 1)
[[ $(id -u) -eq 0 ]] || { echo "run as root: the sandbox host switches uids" >&2; exit 77; }
prepare "bubblewrap libhiredis-dev" corral-sandbox-host corral-bench-sandbox

work=$(mktemp -d)
root=$(host_root host)
host_pid=
cleanup() { [[ -n "$host_pid" ]] && kill "$host_pid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$work" "$root"; }
trap cleanup EXIT
$bin/corral-sandbox-host --insecure --root "$root" --capacity $(( (n > forks ? n : forks) + 80 )) --log-level warn \
  --grpc-listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 "${host_uids[@]}" --ready-file "$work/ready.json" > "$work/host.log" 2>&1 &
host_pid=$!
for _ in $(seq 200); do [[ -s "$work/ready.json" ]] && break; sleep 0.05; done
addr=$(python3 -c "import json; print(json.load(open('$work/ready.json'))['grpc'])")
gen=$bin/corral-bench-sandbox
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" <<< "$2"; }

echo "sandbox host benchmark: $n sandboxes, $execs execs, $(nproc) cores, sandboxes on $(fs_kind "$root")" >&2
# Lifecycle: the generator pauses after creating, so the host's RSS is read with every sandbox alive.
mkfifo "$work/go"
"$gen" --mode=lifecycle --addr="$addr" --n="$n" < "$work/go" > "$work/lifecycle.out" &
gen_pid=$!
exec 3> "$work/go"
for _ in $(seq 1200); do grep -q created "$work/lifecycle.out" 2>/dev/null && break; sleep 0.1; done
rss_mib=$(awk '/VmRSS/ {printf "%.1f", $2/1024}' "/proc/$host_pid/status")
echo go >&3
exec 3>&-
wait "$gen_pid"
life=$(tail -1 "$work/lifecycle.out")
echo "  lifecycle: $life" >&2
exec_out=$("$gen" --mode=exec --addr="$addr" --n="$execs"); echo "  corral exec: $exec_out" >&2
spawn_out=$("$gen" --mode=spawn --n="$execs"); echo "  posix_spawn: $spawn_out" >&2
bwrap_out=$("$gen" --mode=bwrap --n="$execs" || true); echo "  bwrap: $bwrap_out" >&2
first_out() { "$gen" --mode=first-command --addr="$addr" --n="$first" --pattern="$1" --stagger-ms=50; }
seq_out=$(first_out sequential); echo "  first command, one at a time: $seq_out" >&2
stag_out=$(first_out staggered); echo "  first command, staggered 50 ms: $stag_out" >&2
burst_out=$(first_out burst); echo "  first command, burst: $burst_out" >&2
fork_out=$("$gen" --mode=fork --addr="$addr" --home-mib="$fork_mib"); echo "  fork: $fork_out" >&2
# The same against fresh creates for an empty home and a 1 GiB one (no copies: 64 of 1 GiB would take minutes).
fork_rows="$fork_mib $(grep '^children=64' <<< "$fork_out")"$'\n'
for mib in ${BENCH_FORK_HOMES-$(smoke_or "0 1024" "0")}; do
  out=$("$gen" --mode=fork --addr="$addr" --home-mib="$mib" --no-copy | grep '^children=64')
  echo "  fork, home of $mib MiB: $out" >&2
  fork_rows+="$mib $out"$'\n'
done
# With $forks children of one sandbox alive: the host's RSS and the root's disk use, against before.
rss_kib() { awk '/VmRSS/ {print $2}' "/proc/$host_pid/status"; }
disk_kib() { du -sxk "$root" | cut -f1; }
rss0=$(rss_kib) disk0=$(disk_kib)
mkfifo "$work/go2"
"$gen" --mode=fork-many --addr="$addr" --n="$forks" --home-mib="$fork_mib" < "$work/go2" > "$work/forks.out" &
many_pid=$!
exec 4> "$work/go2"
for _ in $(seq 1200); do grep -q forked "$work/forks.out" 2>/dev/null && break; sleep 0.1; done
rss1=$(rss_kib) disk1=$(disk_kib)
echo go >&4
exec 4>&-
wait "$many_pid"
many=$(cat "$work/forks.out"); echo "  fork-many: $many" >&2

ratio=$(awk -v a="$(field p50_ms "$exec_out")" -v b="$(field p50_ms "$spawn_out")" 'BEGIN {printf "%.1f", a/b}')
printf '\n%-34s %10s\n' "phase ($n sandboxes)" "seconds"
for p in create exec delete total; do printf '%-34s %10s\n' "$p" "$(field ${p}_s "$life")"; done
printf '\n%-34s %10s %10s\n' "run 'true'" "p50 ms" "p99 ms"
printf '%-34s %10s %10s\n' "corral exec (gRPC, warm sandbox)" "$(field p50_ms "$exec_out")" "$(field p99_ms "$exec_out")"
printf '%-34s %10s %10s\n' "bwrap (unshare-all)" "$(field p50_ms "$bwrap_out")" "$(field p99_ms "$bwrap_out")"
printf '%-34s %10s %10s\n' "posix_spawn (floor)" "$(field p50_ms "$spawn_out")" "$(field p99_ms "$spawn_out")"
printf 'corral exec / posix_spawn (p50): %sx   host RSS with %s live sandboxes: %s MiB\n' "$ratio" "$n" "$rss_mib"
printf '\n%-40s %9s %9s %9s\n' "create to first command ($first each)" "p50 ms" "p95 ms" "p99 ms"
for row in "one at a time:$seq_out" "staggered, one per 50 ms:$stag_out" "burst, all at once:$burst_out"; do
  out=${row#*:}
  printf '%-40s %9s %9s %9s\n' "${row%%:*}" "$(field p50_ms "$out")" "$(field p95_ms "$out")" "$(field p99_ms "$out")"
done
# Hosted vendors' published medians, create to first command, measured by their clients over the internet: they
# include a network round trip this loopback figure does not.
daytona=110 e2b=440 modal=2660
seq_p50=$(field p50_ms "$seq_out")
printf '%-40s %9s\n' "Daytona (published median)" "$daytona" "E2B (published median)" "$e2b" "Modal (published median)" "$modal"
awk -v c="$seq_p50" -v d=$daytona -v e=$e2b -v m=$modal 'BEGIN {
  printf "corral one at a time / published median: Daytona %.3fx, E2B %.3fx, Modal %.4fx (loopback, no WAN)\n", c/d, c/e, c/m }'
printf '\n%-30s %9s %12s %12s %12s %10s\n' "fork, home of $fork_mib MiB" "fork ms" "1st cmd ms" "create ms" "copy ms" "copy/fork"
while read -r line; do
  [[ $line == children=* ]] || continue
  k=$(field children "$line") fk=$(field fork_ms "$line") cr=$(field create_ms "$line") cp=$(field copy_ms "$line")
  printf '%-30s %9s %12s %12s %12s %10s\n' "$k children" "$fk" "$(field first_command_ms "$line")" "$cr" "$cp" \
    "$(awk -v a="$cp" -v b="$fk" 'BEGIN {printf "%.1fx", a/b}')"
done <<< "$fork_out"
printf '\n%-34s %9s %10s %8s\n' "64 children against 64 creates" "fork ms" "create ms" "ratio"
while read -r mib line; do
  [[ -n "$mib" ]] || continue
  fk=$(field fork_ms "$line") cr=$(field create_ms "$line")
  printf '%-34s %9s %10s %8s\n' "home of $mib MiB" "$fk" "$cr" "$(awk -v a="$fk" -v b="$cr" 'BEGIN {printf "%.2fx", a/b}')"
done <<< "$fork_rows"
awk -v n="$forks" -v r0="$rss0" -v r1="$rss1" -v d0="$disk0" -v d1="$disk1" -v mib="$fork_mib" -v line="$many" 'BEGIN {
  printf "%d forks alive: host RSS +%.1f MiB (%.1f KiB per fork); disk +%.1f MiB beyond the %d MiB home (%.1f KiB per fork); %s\n",
    n, (r1 - r0) / 1024, (r1 - r0) / n, (d1 - d0) / 1024 - mib, mib, ((d1 - d0) - mib * 1024) / n, line }'
printf 'targets: 1,000 create+exec+delete <= 3 s; exec p50 <= 2 ms; within 3x of posix_spawn; RSS <= 100 MiB;\n'
printf '         64 forked children <= 1.2x 64 empty creates\n'
echo "RESULT sandbox_host sandboxes=$n total_s=$(field total_s "$life") exec_p50_ms=$(field p50_ms "$exec_out") spawn_p50_ms=$(field p50_ms "$spawn_out") bwrap_p50_ms=$(field p50_ms "$bwrap_out") rss_mib=$rss_mib first_p50_ms=$seq_p50 first_p99_ms=$(field p99_ms "$seq_out") burst_p50_ms=$(field p50_ms "$burst_out") burst_p99_ms=$(field p99_ms "$burst_out") fork64_ms=$(sed -n 's/^children=64 fork_ms=\([0-9.]*\).*/\1/p' <<< "$fork_out") fork_rss_kib_per_fork=$(( (rss1 - rss0) / forks ))"
