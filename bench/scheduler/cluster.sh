# Sourced by the scheduler benchmarks: processes started with ready files in $work, stopped on exit.
#   start NAME BINARY ARGS...   starts a service; its pid in pid_NAME; waits (up to 30 s) for its ready file
#   addr NAME KEY               an address from NAME's ready file (grpc, http, metrics)
#   field KEY "LINE"            the value of KEY=... in a key=value line
#   start_model_and_proxy ARGS... the scripted model (arithmetic, zero latency) as "llm", and a proxy in front of it as
#                               "proxy" with ARGS added
# The caller sets $work (a scratch directory) and may list extra paths to remove in $scratch.
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [[ -n "${BENCH_KEEP:-}" ]] || rm -rf "$work" ${scratch:-}
}
trap cleanup EXIT
start() {
  local name=$1; shift
  "$@" --ready-file "$work/$name.json" > "$work/$name.log" 2>&1 &
  pids+=($!)
  eval "pid_${name//-/_}=$!"
  for _ in $(seq 600); do [[ -s "$work/$name.json" ]] && return; sleep 0.05; done
  echo "$name did not start:"; cat "$work/$name.log"; exit 1
}
addr() { python3 -c "import json; print(json.load(open('$work/$1.json'))['$2'])"; }
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" <<< "$2"; }
start_model_and_proxy() {
  start llm $bin/corral-fake-llm --listen 127.0.0.1:0 --arithmetic --log-level warn
  start proxy $bin/corral-proxy --insecure --grpc-listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --http-listen 127.0.0.1:0 \
    --journal "$work/proxy.db" --upstream "http://$(addr llm http)" --log-level warn "$@"
}
