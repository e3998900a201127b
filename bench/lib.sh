# Sourced by bench/*/*.sh after `cd` to the repository: a scratch directory ($work) and the processes a run
# starts ($pids), both cleaned up on exit (a script may redefine cleanup to do more); free_port; ready FILE FIELD (waits for a service's --ready-file, prints the
# named address; empty if it never came).
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ready() {
  for _ in $(seq 400); do [[ -s "$1" ]] && break; sleep 0.05; done
  sed -n "s/.*\"$2\":\"\([^\"]*\)\".*/\1/p" "$1" 2>/dev/null || true
}
