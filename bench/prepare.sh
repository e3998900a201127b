# Sourced first by every bench/*/*.sh after `cd` to the repository: where the binaries are, and how much to run.
#   build          the build directory: BENCH_BUILD_DIR, default build; bin=$build/bin
#   smoke          1 with BENCH_SMOKE=1: the smoke run the test command makes of every bench (seconds, tiny counts;
#                  it asserts the RESULT line, never the figures), on the test build and the packages it installed
#   prepare "PACKAGES" [TARGETS...] installs the Debian packages the bench's peers need and builds TARGETS with
#                  -DCORRAL_BENCH=ON (nothing in a smoke run: the test command did both; no build with
#                  BENCH_PREBUILT=1: the build directory is another tree's, as bench/builds_ab.sh runs them)
#   smoke_or FULL SMOKE             FULL, or SMOKE in a smoke run
#   cpu_ticks PID                   the process's utime + stime, in 10 ms clock ticks
#   host_uids                       the uid range flags for a sandbox host: the default pool, or in a smoke run a
#                  range of its own (26000-26999) so it never shares uids with the tests running beside it
#   host_root NAME                  where a bench's sandbox host keeps its sandboxes:
#                  ${BENCH_HOST_ROOT_PARENT:-/var/tmp}/corral-bench-NAME-PID (a parent on another filesystem, e.g.
#                  a journalled ext4 loop mount, times the host there)
#   fs_kind DIR                     the filesystem holding DIR, in words: "ext4 without a journal (/dev/vda)"
build=${BENCH_BUILD_DIR:-build}
bin=$build/bin
smoke=${BENCH_SMOKE:-0}
prepare() {
  [[ "$smoke" == 1 ]] && return
  local packages=$1 need=()
  shift
  scripts/bootstrap
  for p in $packages; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
  done
  [[ ${#need[@]} -eq 0 ]] || DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}"
  [[ $# -gt 0 && -z "${BENCH_PREBUILT:-}" ]] || return 0
  mkdir -p "$build"
  cmake -S . -B "$build" -G Ninja -DCORRAL_BENCH=ON > "$build/configure.log" 2>&1 || { cat "$build/configure.log"; exit 1; }
  ninja -C "$build" "$@"
}
smoke_or() { if [[ "$smoke" == 1 ]]; then echo "$2"; else echo "$1"; fi; }
# cpu_ticks PID: its utime + stime, in 10 ms clock ticks.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
host_uids=()
if [[ "$smoke" == 1 ]]; then host_uids=(--uid-first 26000 --uid-last 26999); fi
host_root() { echo "${BENCH_HOST_ROOT_PARENT:-/var/tmp}/corral-bench-$1-$$"; }
fs_kind() {
  local dir=$1 type source note=""
  while [[ ! -e $dir ]]; do dir=$(dirname "$dir"); done
  read -r type source < <(findmnt -n -o FSTYPE,SOURCE -T "$dir")
  # ext4 without a journal skips every inode freed in the last minute when it allocates one: a host that makes
  # and removes sandboxes all the time pays for that on every file it creates.
  if [[ $type == ext4 && $(cat "/sys/fs/ext4/$(basename "$source")/journal_task" 2>/dev/null) == "<none>" ]]; then
    note=" without a journal"
  fi
  echo "$type$note ($source)"
}
