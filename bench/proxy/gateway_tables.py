"""Prints bench/proxy/run.sh's gateway runs as the LLM gateways publish theirs: added latency against concurrency
(BerriAI's ai-gateway-bench: p50 and p99 over the backend's own, and the throughput), and the latency overhead at
a fixed request rate (TensorZero's: mean, p50, p90, p95 and p99 over the backend's at the same rate).

Reads the runs' lines on stdin, e.g. `corral c=8 rps=... mean_ms=... p50_ms=...` or `nginx q=1000 rps=...`;
the arguments are the peers, in column order ("direct" is the backend alone).
"""
import re
import sys

peers = sys.argv[1:]
runs = {}
for line in sys.stdin:
    m = re.match(r"(\w+) ([cq])=(\d+) (.*)", line.strip())
    if m:
        runs[(m[1], m[2], int(m[3]))] = {k: float(v) for k, v in re.findall(r"(\w+)=([\d.]+)", m[4])}


def added(name, kind, n, field):
    return runs[(name, kind, n)][field] - runs[("direct", kind, n)][field]


concurrencies = sorted({n for _, kind, n in runs if kind == "c"})
w = max([12] + [len(p) + 6 for p in peers])  # every column wider than its heading
print(f"\n{'added latency (ms)':<20}" + "".join(f"{p + ' p50':>{w}}{p + ' p99':>{w}}{p + ' rps':>{w}}" for p in peers))
for c in concurrencies:
    row = f"{'c=' + str(c):<20}"
    for p in peers:
        row += f"{added(p, 'c', c, 'p50_ms'):{w}.3f}{added(p, 'c', c, 'p99_ms'):{w}.3f}{runs[(p, 'c', c)]['rps']:{w}.0f}"
    print(row)

for q in sorted({n for _, kind, n in runs if kind == "q"}):
    print(f"\n{'overhead at ' + str(q) + ' QPS (ms)':<24}" + "".join(f"{p:>{w}}" for p in peers))
    for label, field in (("mean", "mean_ms"), ("50%", "p50_ms"), ("90%", "p90_ms"), ("95%", "p95_ms"),
                         ("99%", "p99_ms")):
        print(f"{label:<24}" + "".join(f"{added(p, 'q', q, field):{w}.3f}" for p in peers))
    print(f"{'achieved QPS':<24}" + "".join(f"{runs[(p, 'q', q)]['rps']:{w}.0f}" for p in peers) +
          f"   (direct {runs[('direct', 'q', q)]['rps']:.0f})")
