#!/usr/bin/env bash
# Sandboxes from an OCI image (not in CI; needs root and podman): N sandboxes created from one cached image,
# `true` exec'd in each, each deleted — through corral-sandbox-host's gRPC API on loopback, by the same generator
# and in the same run as (a) N of Corral's plain sandboxes and (b) `podman run --rm IMAGE true`, the peer a user
# would otherwise run. Also the disk N live image sandboxes use next to the one copy of the image.
#   bench/images/run.sh        (BENCH_SANDBOXES=1000, BENCH_PODMAN=20 podman runs)
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/prepare.sh
n=${BENCH_SANDBOXES:-$(smoke_or 1000 10)}
podman_runs=${BENCH_PODMAN:-$(smoke_or 20 2)}
[[ $(id -u) -eq 0 ]] || { echo "run as root: the sandbox host switches uids" >&2; exit 77; }
prepare "libhiredis-dev" corral corral-sandbox-host corral-bench-sandbox
# podman and its base image (serialized and idempotent). Where podman cannot run a container, or /var/tmp cannot
# hold image layers (an overlayfs), there is nothing to measure: exit 77 (a skip for the smoke test).
ready_out=$(scripts/podman-ready)
eval "$ready_out"

image=docker.io/library/debian:bookworm-slim  # podman-ready's debootstrap base
podman run --rm --network none "$image" true > /dev/null 2>&1 || { echo "podman cannot run a container here" >&2; exit 77; }
[[ "$(stat -f -c %T /var/tmp)" != overlayfs ]] || { echo "/var/tmp is an overlayfs: no image layers there" >&2; exit 77; }
root=$(host_root images)         # a real filesystem (image layers cannot live on overlayfs)
work=$(mktemp -d)
host_pid=
cleanup() { [[ -n "$host_pid" ]] && kill "$host_pid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$work" "$root"; }
trap cleanup EXIT
mkdir -p "$root" && chmod 0711 "$root"
$bin/corral-sandbox-host --insecure --root "$root/sandboxes" --capacity $((n > 140 ? n + 10 : 150)) --log-level warn \
  --grpc-listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 "${host_uids[@]}" --ready-file "$work/ready.json" > "$work/host.log" 2>&1 &
host_pid=$!
for _ in $(seq 200); do [[ -s "$work/ready.json" ]] && break; sleep 0.05; done
addr=$(python3 -c "import json; print(json.load(open('$work/ready.json'))['grpc'])")
podman save --format oci-archive -o "$work/image.tar" "$image" > /dev/null
$bin/corral image import "$work/image.tar" --ref bench/debian --host "$addr" > /dev/null
gen=$bin/corral-bench-sandbox
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" <<< "$2"; }

echo "image benchmark: $n sandboxes, $podman_runs podman runs, $(nproc) cores, sandboxes on $(fs_kind "$root")" >&2
# One lifecycle run; with an image, the disk is read while every sandbox is alive (the generator waits).
lifecycle() {
  rm -f "$work/go" && mkfifo "$work/go"
  "$gen" --mode=lifecycle --addr="$addr" --n="$n" "$@" < "$work/go" > "$work/lifecycle.out" &
  local gen_pid=$!
  exec 3> "$work/go"
  for _ in $(seq 1200); do grep -q created "$work/lifecycle.out" 2>/dev/null && break; sleep 0.1; done
  echo "$(du -sk "$root/sandboxes/homes" | cut -f1) $(awk '/VmRSS/ {printf "%.1f", $2/1024}' "/proc/$host_pid/status")" \
    > "$work/alive"  # KiB of the sandboxes' directories, host RSS MiB
  echo go >&3
  exec 3>&-
  wait "$gen_pid"
  tail -1 "$work/lifecycle.out"
}
plain=$(lifecycle); echo "  plain sandboxes: $plain" >&2
images=$(lifecycle --image=bench/debian); echo "  image sandboxes: $images" >&2
read -r image_homes_kib image_rss < "$work/alive"
image_kib=$(du -sk "$root/sandboxes/images/layers" | cut -f1)

# The peer: podman run --rm IMAGE true, one after another (as a rollout worker would start its container).
start=$(date +%s.%N)
for _ in $(seq "$podman_runs"); do podman run --rm --network none "$image" true; done
podman_s=$(awk -v s="$start" -v e="$(date +%s.%N)" -v k="$podman_runs" 'BEGIN {printf "%.3f", (e - s) / k}')
echo "  podman run --rm: ${podman_s} s per run" >&2

per() { awk -v t="$(field total_s "$1")" -v n="$n" 'BEGIN {printf "%.2f", t * 1000 / n}'; }
printf '\n%-44s %10s %10s %10s %10s\n' "create + exec true + delete" "create s" "exec s" "delete s" "ms/sandbox"
printf '%-44s %10s %10s %10s %10s\n' "corral, $n sandboxes from an image" "$(field create_s "$images")" \
  "$(field exec_s "$images")" "$(field delete_s "$images")" "$(per "$images")"
printf '%-44s %10s %10s %10s %10s\n' "corral, $n plain sandboxes" "$(field create_s "$plain")" \
  "$(field exec_s "$plain")" "$(field delete_s "$plain")" "$(per "$plain")"
printf '%-44s %10s %10s %10s %10s\n' "podman run --rm IMAGE true ($podman_runs runs)" "" "" "" \
  "$(awk -v s="$podman_s" 'BEGIN {printf "%.2f", s * 1000}')"
vs_podman=$(awk -v p="$podman_s" -v c="$(per "$images")" 'BEGIN {printf "%.1f", p * 1000 / c}')
vs_plain=$(awk -v a="$(per "$images")" -v b="$(per "$plain")" 'BEGIN {printf "%.2f", a / b}')
printf '\nimage sandboxes vs podman (throughput): %sx   image vs plain sandboxes (time): %sx\n' "$vs_podman" "$vs_plain"
printf 'disk with %s live image sandboxes: their own directories %s MiB, the image once %s MiB; host RSS %s MiB\n' \
  "$n" "$((image_homes_kib / 1024))" "$((image_kib / 1024))" "$image_rss"
printf 'targets: >= 20x podman; within 2x of plain sandboxes; disk ~ one image + upper layers\n'

# Forks of an image sandbox whose working directory holds 100 MiB (in its tmpfs upper layer), against as many fresh
# sandboxes from the image (a copy is not timed: no host path reaches a tmpfs upper).
forks=$("$gen" --mode=fork --addr="$addr" --home-mib="$(smoke_or 100 4)" --image=bench/debian)
printf '\n%-44s %10s %10s %10s %10s\n' "fork of an image sandbox, 100 MiB written" "fork ms" "1st cmd ms" "create ms" \
  "create/fork"
while read -r line; do
  [[ "$line" == children=* ]] || continue
  k=$(field children "$line")
  printf '%-44s %10s %10s %10s %9sx\n' "$k children" "$(field fork_ms "$line")" "$(field first_command_ms "$line")" \
    "$(field create_ms "$line")" \
    "$(awk -v c="$(field create_ms "$line")" -v f="$(field fork_ms "$line")" 'BEGIN {printf "%.1f", c / f}')"
done <<< "$forks"
echo "RESULT images sandboxes=$n image_ms_per_sandbox=$(per "$images") plain_ms_per_sandbox=$(per "$plain") podman_s_per_run=$podman_s vs_podman=$vs_podman vs_plain=$vs_plain"
