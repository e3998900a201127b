#!/usr/bin/env bash
# MCP transport benchmark (no cluster, no root): the MCP project's server-everything (tests/mcp, pinned) called
# side by side, rounds alternating, over stdio (the scheduler's own client path) and over streamable HTTP through
# the relay the scheduler runs in the sandbox (episode/scripts/mcp_http.py, SSE answers, a session). Each call is
# a tools/call of `echo` written as one JSON-RPC line and timed until its answer line, as mcp_tools.cc does.
# Prints the per-call latency p50 and p99 per transport, the start-to-tools-listed time, and the ratio HTTP/stdio.
#   bench/mcp/run.sh        (BENCH_CALLS=500 per transport and round, BENCH_ROUNDS=4)
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/prepare.sh
calls=${BENCH_CALLS:-$(smoke_or 500 5)}
rounds=${BENCH_ROUNDS:-$(smoke_or 4 1)}
server=tests/mcp/everything.mjs  # server-everything, on Debian's Node 18 too
command -v node > /dev/null || { echo "no node on this machine" >&2; exit 77; }
[[ -f tests/mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js ]] ||
  { echo "no server-everything in tests/mcp (scripts/test installs it: npm ci --prefix tests/mcp)" >&2; exit 77; }

echo "MCP transport benchmark: $rounds rounds of $calls echo calls per transport, $(nproc) cores" >&2
python3 - "$server" "$calls" "$rounds" services/scheduler/episode/scripts <<'PY'
import json, os, select, socket, subprocess, sys, tempfile, time
server, calls, rounds, scripts = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
relay = open(os.path.join(scripts, "sandbox_server.py")).read() + "\n" + open(os.path.join(scripts, "mcp_http.py")).read()

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

def start(transport, log):
    if transport == "stdio":
        return subprocess.Popen(["node", server, "stdio"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log)
    port = free_port()
    cfg = {"argv": ["node", server, "streamableHttp"], "env": {"PORT": str(port)}, "cwd": "", "port": port,
           "socket": "", "log": log.name, "path": "/mcp", "ready_timeout": 60}
    return subprocess.Popen([sys.executable, "-u", "-c", relay], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=log, env={**os.environ, "__CORRAL_RELAY": json.dumps(cfg)}, start_new_session=True)

class Client:
    def __init__(self, p):
        self.p, self.buffer, self.id = p, b"", 0
    def request(self, method, params):
        self.id += 1
        self.p.stdin.write((json.dumps({"jsonrpc": "2.0", "id": self.id, "method": method, "params": params}) + "\n").encode())
        self.p.stdin.flush()
        while True:
            while b"\n" not in self.buffer:
                select.select([self.p.stdout], [], [], 60)
                chunk = os.read(self.p.stdout.fileno(), 65536)
                if not chunk:
                    raise SystemExit("the server ended: see its log")
                self.buffer += chunk
            line, _, self.buffer = self.buffer.partition(b"\n")
            try:
                m = json.loads(line)
            except ValueError:
                continue
            if m.get("id") == self.id and "method" not in m:
                if "error" in m:
                    raise SystemExit("%s: %s" % (method, m["error"]))
                return m["result"]

times = {"stdio": [], "http": []}
starts = {"stdio": [], "http": []}
for r in range(rounds):
    for transport in (("stdio", "http") if r % 2 == 0 else ("http", "stdio")):
        with tempfile.NamedTemporaryFile(prefix="corral-bench-mcp-", suffix=".log") as log:
            t0 = time.perf_counter()
            p = start(transport, log)
            c = Client(p)
            try:
                c.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                         "clientInfo": {"name": "bench", "version": "1"}})
                p.stdin.write(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
                p.stdin.flush()
                assert any(t["name"] == "echo" for t in c.request("tools/list", {})["tools"])
                starts[transport].append((time.perf_counter() - t0) * 1000)
                for i in range(calls):
                    t = time.perf_counter()
                    out = c.request("tools/call", {"name": "echo", "arguments": {"message": "m%d" % i}})
                    times[transport].append((time.perf_counter() - t) * 1000)
                    assert out["content"][0]["text"] == "Echo: m%d" % i, out
            finally:
                p.stdin.close()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
        print("  round %d: %s done" % (r + 1, transport), file=sys.stderr)

def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]
for transport in ("stdio", "http"):
    print("%-6s call p50 %.2f ms  p99 %.2f ms  start to tools listed p50 %.0f ms  (%d calls)" % (
        transport, pct(times[transport], 0.5), pct(times[transport], 0.99), pct(starts[transport], 0.5),
        len(times[transport])))
ratio = pct(times["http"], 0.5) / pct(times["stdio"], 0.5)
print("RESULT mcp http_p50_ms=%.2f stdio_p50_ms=%.2f ratio_http_over_stdio=%.2f" % (
    pct(times["http"], 0.5), pct(times["stdio"], 0.5), ratio))
PY
