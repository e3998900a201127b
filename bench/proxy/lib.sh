# Sourced by bench/proxy/*.sh: helpers for the processes a run starts.

ready() {  # ready-file field: waits for a service's --ready-file, prints the named address
  for _ in $(seq 400); do [[ -s "$1" ]] && break; sleep 0.05; done
  sed -n "s/.*\"$2\":\"\([^\"]*\)\".*/\1/p" "$1"
}
