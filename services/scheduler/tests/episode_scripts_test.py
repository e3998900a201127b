#!/usr/bin/env python3
"""The programs the scheduler runs in sandboxes (services/scheduler/episode/scripts/), run on their own exactly as
the scheduler starts them: the persistent bash and python tools' drivers (state kept between calls, the marker
after each, exit status, errors and interrupts), the environment relay (waits for the server's health check,
carries requests, reports a server that exited with its log, sessions) and the MCP relay (streamable HTTP, both
eras of the protocol).

    python3 episode_scripts_test.py --scripts DIR
"""
import argparse
import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
import unittest

SCRIPTS = None
DRILL = None


def script(name):
    with open(os.path.join(SCRIPTS, name)) as f:
        return f.read()


def relay(name, cfg):
    """A relay (sandbox_server.py, then `name`) as RelayCommand starts it."""
    return Resident([sys.executable, "-u", "-c", script("sandbox_server.py") + "\n" + script(name)],
                    {"__CORRAL_RELAY": json.dumps(cfg)})


class Resident:
    """A process spoken to over stdin, read up to a marker, as InteractiveProcess does."""

    def __init__(self, argv, env):
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  env={**os.environ, **env}, start_new_session=True)
        self.buffer = b""

    def write(self, data: bytes):
        self.p.stdin.write(data)
        self.p.stdin.flush()

    def read_until(self, marker: str, timeout=10.0) -> str:
        end = time.monotonic() + timeout
        mark = marker.encode()
        while mark not in self.buffer:
            left = end - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no marker within {timeout}s; got {self.buffer!r}")
            ready, _, _ = select.select([self.p.stdout], [], [], left)
            if ready:
                chunk = os.read(self.p.stdout.fileno(), 65536)
                if not chunk:
                    raise AssertionError(f"the process ended before the marker; got {self.buffer!r}")
                self.buffer += chunk
        text, _, self.buffer = self.buffer.partition(mark)
        return text.decode()

    def close(self):
        if self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGKILL)
        self.p.wait()
        self.p.stdin.close()
        self.p.stdout.close()


class PersistentBash(unittest.TestCase):
    def setUp(self):
        self.mark = "__CORRAL_DONE_test__"
        self.shell = Resident(["bash", "--noprofile", "--norc", "-c", script("persistent_bash.sh")],
                              {"__CORRAL_MARK": self.mark})
        self.addCleanup(self.shell.close)

    def call(self, command):
        self.shell.write(command.encode() + b"\0")
        return self.shell.read_until(self.mark).lstrip("\n")  # (the newline after the last call's marker)

    def test_state_persists_between_calls_and_each_reports_its_status(self):
        self.assertIn("__CORRAL_STATUS 0", self.call("cd /tmp; x=5"))
        out = self.call("echo $x; pwd")
        self.assertTrue(out.startswith("5\n/tmp\n"), out)
        self.assertIn("__CORRAL_STATUS 3", self.call("(exit 3)"))
        self.assertNotIn("__CORRAL_MARK", self.call("env"))  # the marker is not the command's to read

    def test_an_interrupt_ends_the_call_not_the_session(self):
        self.shell.write(b"sleep 30\0")
        time.sleep(0.3)
        os.killpg(self.shell.p.pid, signal.SIGINT)
        self.assertIn("[interrupted]", self.shell.read_until(self.mark))
        self.assertTrue(self.call("echo alive").startswith("alive\n"))


class PersistentPython(unittest.TestCase):
    def setUp(self):
        self.mark = "__CORRAL_DONE_test__"
        self.python = Resident([sys.executable, "-u", "-c", script("persistent_python.py")],
                               {"__CORRAL_MARK": self.mark})
        self.addCleanup(self.python.close)

    def call(self, cell):
        self.python.write(cell.encode() + b"\0")
        return self.python.read_until(self.mark).strip()

    def test_globals_persist_and_the_last_expression_is_echoed(self):
        self.assertEqual(self.call("a = 2"), "")
        self.assertEqual(self.call("a + 3"), "5")
        self.assertEqual(self.call("print('x'); None"), "x")

    def test_an_error_is_the_cells_output_and_the_session_goes_on(self):
        self.assertIn("ValueError: boom", self.call("raise ValueError('boom')"))
        self.assertIn("SyntaxError", self.call("def ("))
        self.assertEqual(self.call("1 + 1"), "2")


SERVER = r"""
import http.server, json, sys
state = {"n": 0}
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.path == "/crash":
            print("crashing on purpose", flush=True); sys.stdout.flush(); import os; os._exit(3)
        state["n"] += 1
        out = json.dumps({"got": json.loads(body), "n": state["n"]}).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(out))); self.end_headers()
        self.wfile.write(out)
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class EnvRelay(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="corral-relay-")
        with open(os.path.join(self.dir, "server.py"), "w") as f:
            f.write(SERVER)
        self.mark = "__CORRAL_ENV_test__"
        port = free_port()
        cfg = {"argv": [sys.executable, "server.py", str(port)], "env": {}, "cwd": self.dir, "port": port,
               "socket": "", "log": os.path.join(self.dir, "env-server.log"), "mark": self.mark}
        self.relay = relay("env_relay.py", cfg)
        self.addCleanup(self.relay.close)

    def ask(self, request):
        self.relay.write((json.dumps(request) + "\n").encode())
        return json.loads(self.relay.read_until(self.mark, timeout=30))

    def test_it_waits_for_health_then_carries_requests_to_one_server(self):
        self.assertEqual(self.ask({"wait": True, "path": "/health", "timeout": 20})["status"], 200)
        first = self.ask({"method": "POST", "path": "/step", "body": json.dumps({"a": 1}), "timeout": 5})
        second = self.ask({"method": "POST", "path": "/step", "body": json.dumps({"a": 2}), "timeout": 5})
        self.assertEqual(first["status"], 200)
        self.assertEqual(json.loads(first["body"]), {"got": {"a": 1}, "n": 1})
        self.assertEqual(json.loads(second["body"])["n"], 2)  # the same server, its state kept

    def test_a_server_that_exits_is_reported_with_its_log(self):
        self.assertEqual(self.ask({"wait": True, "path": "/health", "timeout": 20})["status"], 200)
        crashed = self.ask({"method": "POST", "path": "/crash", "body": "{}", "timeout": 5})
        self.assertTrue(crashed.get("exited"), crashed)
        self.assertIn("the server exited with code 3", crashed["error"])
        self.assertIn("crashing on purpose", crashed["log"])
        again = self.ask({"method": "POST", "path": "/step", "body": "{}", "timeout": 5})
        self.assertTrue(again.get("exited"), again)

    def test_a_malformed_request_is_answered_not_fatal(self):
        self.relay.write(b"not json\n")
        self.assertIn("relay:", json.loads(self.relay.read_until(self.mark))["error"])
        self.assertEqual(self.ask({"wait": True, "path": "/health", "timeout": 20})["status"], 200)


class EnvSessions(unittest.TestCase):
    """The relay's transports against the example drill (examples/environments/arithmetic_drill/server.py): an
    OpenEnv session on /ws, plain HTTP, and cookie sessions."""

    def start(self, sessions):
        self.mark = "__CORRAL_ENV_test__"
        port = free_port()
        directory = tempfile.mkdtemp(prefix="corral-sessions-")
        cfg = {"argv": [sys.executable, DRILL, "--port", str(port), "--sessions", sessions], "env": {},
               "cwd": directory, "port": port, "socket": "", "log": os.path.join(directory, "env-server.log"),
               "mark": self.mark}
        self.relay = relay("env_relay.py", cfg)
        self.addCleanup(self.relay.close)
        self.assertEqual(self.ask({"wait": True, "path": "/health", "timeout": 20})["status"], 200)

    ask = EnvRelay.ask

    def env(self, kind, body, timeout=5):
        return self.ask({"env": kind, "body": json.dumps(body), "timeout": timeout})

    def play(self, fault=None):
        """Reset with seed 7 and answer the first question right: the step's answer."""
        reset = self.env("reset", {"seed": 7, "episode_id": "e", "questions": 2, **({"fault": fault} if fault else {})})
        self.assertEqual(reset.get("status"), 200, reset)
        a, b = map(int, re.search(r"(\d+) \+ (\d+)", json.loads(reset["body"])["observation"]["prompt"]).groups())
        return self.env("step", {"action": {"message": "The answer is %d." % (a + b)}})

    def test_auto_opens_the_openenv_session_and_the_episode_is_rewarded(self):
        self.start("openenv")
        self.assertEqual(self.ask({"open": "auto", "ws_path": "/ws", "timeout": 5}),
                         {"transport": "websocket", "ws_path": "/ws"})
        step = self.play()
        self.assertEqual(step["call"], "step over the WebSocket session")
        self.assertEqual(json.loads(step["body"])["reward"], 1.0)
        self.assertEqual(json.loads(step["body"])["observation"]["question"], 2)  # the same drill, its state kept

    def test_plain_http_on_a_stock_openenv_server_steps_a_drill_never_reset(self):
        # What the relay did before sessions: each HTTP call acts on a fresh drill, so the right answer earns 0.
        self.start("openenv")
        self.assertEqual(self.ask({"open": "http", "timeout": 5}), {"transport": "http"})
        step = self.play()
        self.assertEqual(step["call"], "POST /step")
        self.assertEqual(json.loads(step["body"])["reward"], 0.0)

    def test_an_error_frame_is_the_environments_and_quotes_it(self):
        self.start("openenv")
        self.ask({"open": "auto", "timeout": 5})
        step = self.play({"error_at_step": 1})
        self.assertEqual(step, {"env_error": "the environment answered step over the WebSocket session with an "
                                             "error [EXECUTION_ERROR]: the drill broke at step 1",
                                "call": "step over the WebSocket session"})

    def test_a_dropped_session_is_reported_unreachable(self):
        self.start("openenv")
        self.ask({"open": "auto", "timeout": 5})
        step = self.play({"drop_at_step": 1})
        self.assertTrue(step.get("unreachable"), step)
        self.assertIn("step over the WebSocket session: the server closed the connection", step["error"])

    def test_a_server_without_ws_gets_http_and_its_cookie_back(self):
        self.start("cookie")
        opened = self.ask({"open": "auto", "timeout": 5})
        self.assertEqual(opened, {"transport": "http", "upgrade_status": 404})
        self.assertEqual(json.loads(self.play()["body"])["reward"], 1.0)  # the step found the reset's drill

    def test_websocket_asked_of_a_server_without_it_is_the_environments_error(self):
        self.start("http")
        self.assertEqual(self.ask({"open": "websocket", "ws_path": "/ws", "timeout": 5}),
                         {"env_error": "the server refused the WebSocket upgrade at /ws (HTTP 404)"})


MCP_SERVER = r"""
# An MCP server over streamable HTTP on a unix socket, as the tests want it: "legacy" (initialize, sessions, SSE
# answers), "modern" (2026-07-28: server/discover, per-request _meta and headers, JSON answers) or "openenv" (an
# OpenEnv server's /mcp: no initialize, openenv/session/create|close, JSON answers). Its tools:
# echo, headers (what the last request's headers were), ask (pings the client on the stream first), forget
# (ends every session), slow (until its connection closes: says so in the log), boom (HTTP 500), exit.
import http.server, json, os, select, socketserver, sys, threading, time, uuid
era, path = sys.argv[1], sys.argv[2]
time.sleep(0.3)  # not listening at once: the relay waits
sessions, pending = set(), {}
lock = threading.Lock()
def note(what):  # to the log, where the tests read what the server saw: one write per line
    with lock: sys.stdout.write("seen: " + what + "\n"); sys.stdout.flush()
MODERN = "2026-07-28"

class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    def handle_error(self, request, address):  # one line (a client that hangs up early), never amid a "seen:"
        note_error = "error: %r" % (sys.exc_info()[1],)
        with lock: sys.stdout.write(note_error + "\n"); sys.stdout.flush()

class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def address_string(self): return "unix"
    def reply(self, status, body, kind="application/json", headers=()):
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", kind); self.send_header("Content-Length", str(len(data)))
        for k, v in headers: self.send_header(k, v)
        self.end_headers(); self.wfile.write(data)
    def sse(self, messages, headers=()):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream"); self.send_header("Connection", "close")
        for k, v in headers: self.send_header(k, v)
        self.end_headers()
        for m in messages:
            if callable(m): m = m()
            self.wfile.write(("event: message\nid: %s\ndata: %s\n\n" % (uuid.uuid4(), json.dumps(m))).encode())
            self.wfile.flush()
        self.close_connection = True
    def do_DELETE(self):
        note("DELETE " + str(self.headers.get("Mcp-Session-Id")))
        self.reply(200, "{}")
    def do_POST(self):
        msg = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        h = {k.lower(): v for k, v in self.headers.items()}
        note(msg.get("method") or "response")
        if "method" not in msg:  # the client's answer to our request
            pending[msg["id"]] = msg; return self.reply(202, "")
        if "text/event-stream" not in h.get("accept", "") or "application/json" not in h.get("accept", ""):
            return self.reply(406, '{"error": "Accept"}')
        ok = lambda result: {"jsonrpc": "2.0", "id": msg.get("id"), "result": result}
        method = msg["method"]
        if era == "openenv":
            params = msg.get("params") or {}
            if method == "openenv/session/create":
                sid = str(uuid.uuid4()); sessions.add(sid)
                return self.reply(200, json.dumps(ok({"session_id": sid})))
            if method == "openenv/session/close":
                sessions.discard(params.get("session_id"))
                note("closed " + str(params.get("session_id") in sessions))
                return self.reply(200, json.dumps(ok({})))
            if method not in ("tools/list", "tools/call"):
                return self.reply(200, json.dumps({"jsonrpc": "2.0", "id": msg.get("id"), "error": {"code": -32601, "message": "Method not found: " + method}}))
            if params.get("session_id") not in sessions or h.get("x-openenv-session-id") != params.get("session_id"):
                return self.reply(200, json.dumps({"jsonrpc": "2.0", "id": msg.get("id"), "error": {"code": -32602, "message": "no session"}}))
            return self.tool(msg, ok, h, lambda m: self.reply(200, json.dumps(m)))
        if era == "modern":
            meta = (msg.get("params") or {}).get("_meta") or {}
            if method.startswith("notifications/"): return self.reply(202, "")
            if method == "initialize":
                return self.reply(200, json.dumps({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": "no initialize in 2026-07-28"}}))
            if meta.get("io.modelcontextprotocol/protocolVersion") != MODERN or h.get("mcp-protocol-version") != MODERN or h.get("mcp-method") != method:
                return self.reply(400, json.dumps({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32004, "message": "version or headers missing: %r %r" % (meta, h)}}))
            if method == "server/discover":
                return self.reply(200, json.dumps(ok({"supportedVersions": [MODERN], "capabilities": {"tools": {}}, "serverInfo": {"name": "modern-fixture", "version": "1"}})))
            return self.tool(msg, ok, h, lambda m: self.reply(200, json.dumps(m)))
        sid = h.get("mcp-session-id")
        if method == "initialize":
            sid = str(uuid.uuid4()); sessions.add(sid)
            return self.sse([ok({"protocolVersion": "2025-11-25", "capabilities": {"tools": {}}, "serverInfo": {"name": "legacy-fixture", "version": "1"}})], [("Mcp-Session-Id", sid)])
        if sid not in sessions:
            return self.reply(404 if sid else 400, json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32001, "message": "Session not found"}}))
        if h.get("mcp-protocol-version") != "2025-11-25":
            return self.reply(400, '{"error": "MCP-Protocol-Version"}')
        if method.startswith("notifications/"): return self.reply(202, "")
        return self.tool(msg, ok, h, lambda m: self.sse([m]))
    def tool(self, msg, ok, h, send):
        if msg["method"] == "tools/list":
            return send(ok({"tools": [{"name": n, "inputSchema": {"type": "object"}} for n in ("echo", "headers", "ask", "forget", "slow", "boom", "unparsed", "exit")]}))
        name = msg["params"]["name"]
        args = msg["params"].get("arguments") or {}
        text = lambda t: ok({"content": [{"type": "text", "text": t}]})
        if name == "echo": return send(text("echo: " + args.get("message", "")))
        if name == "headers": return send(text(json.dumps({k: h.get(k) for k in ("mcp-method", "mcp-name", "mcp-protocol-version")})))
        if name == "forget": sessions.clear(); return send(text("forgotten"))
        if name == "boom": return self.reply(500, "it broke", "text/plain")
        if name == "unparsed":  # what the TypeScript SDK answers when it fails before reading the request's id
            return self.reply(400, json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error", "data": "ReferenceError: crypto is not defined"}}))
        if name == "exit": print("exiting on purpose", flush=True); os._exit(3)
        if name == "slow":
            while True:
                r, _, _ = select.select([self.connection], [], [], 0.05)
                if r and not self.connection.recv(1):
                    print("slow: the client closed the connection", flush=True); return
        if name == "ask":  # a request of ours on the stream, answered by a separate POST, then the result
            def answer():
                for _ in range(200):
                    if "ping-1" in pending: return text("pinged")
                    time.sleep(0.02)
                return text("no pong")
            return self.sse([{"jsonrpc": "2.0", "id": "ping-1", "method": "ping"}, answer])
        send({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32602, "message": "no tool " + name}})
    def do_GET(self):
        self.reply(405, "")

if os.path.exists(path): os.unlink(path)
Server(path, H).serve_forever()
"""


class McpHttp(unittest.TestCase):
    """The MCP relay (mcp_http.py) against a server of both eras on a unix socket, spoken to as the scheduler
    speaks to a stdio server: one JSON-RPC message per line."""

    def start(self, era):
        self.dir = tempfile.mkdtemp(prefix="corral-mcp-")
        with open(os.path.join(self.dir, "server.py"), "w") as f:
            f.write(MCP_SERVER)
        self.sock = os.path.join(self.dir, "mcp.sock")
        self.log = os.path.join(self.dir, "mcp.log")
        cfg = {"argv": [sys.executable, "server.py", era, self.sock], "env": {}, "cwd": self.dir, "port": 0,
               "socket": self.sock, "log": self.log, "path": "/mcp", "ready_timeout": 20}
        self.relay = relay("mcp_http.py", cfg)
        self.addCleanup(self.relay.close)
        self.next_id = 0

    def send(self, message):
        self.relay.write((json.dumps(message) + "\n").encode())

    def read(self, timeout=15):
        return json.loads(self.relay.read_until("\n", timeout=timeout))

    def request(self, method, params=None):
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params or {}})
        return self.read()

    def call(self, tool, **arguments):
        return self.request("tools/call", {"name": tool, "arguments": arguments})

    def initialize(self):
        answer = self.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                             "clientInfo": {"name": "corral", "version": "1"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return answer

    def seen(self):
        """What the server saw, in order (from its log)."""
        with open(self.log) as f:
            return [line[6:].rstrip("\n") for line in f if line.startswith("seen: ")]

    def text(self, answer):
        return answer["result"]["content"][0]["text"]

    def test_a_legacy_server_gets_a_session_and_its_sse_answers_come_back_as_lines(self):
        self.start("legacy")
        init = self.initialize()
        self.assertEqual(init["result"]["serverInfo"]["name"], "legacy-fixture")
        self.assertEqual(init["result"]["protocolVersion"], "2025-11-25")
        tools = self.request("tools/list")["result"]["tools"]
        self.assertIn("echo", [t["name"] for t in tools])
        self.assertEqual(self.text(self.call("echo", message="hi")), "echo: hi")
        # The server refuses requests without its session id or the negotiated version: these carried both.
        headers = json.loads(self.text(self.call("headers")))
        self.assertEqual(headers["mcp-protocol-version"], "2025-11-25")
        # The modern probe came first and was refused; then the handshake.
        self.assertEqual(self.seen()[:3], ["server/discover", "initialize", "notifications/initialized"])

    def test_a_servers_request_on_an_open_stream_is_answered_before_its_result(self):
        self.start("legacy")
        self.initialize()
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": "tools/call", "params": {"name": "ask"}})
        ping = self.read()
        self.assertEqual((ping["method"], ping["id"]), ("ping", "ping-1"))
        self.send({"jsonrpc": "2.0", "id": "ping-1", "result": {}})  # as mcp_tools.cc answers a ping
        self.assertEqual(self.text(self.read()), "pinged")

    def test_an_expired_session_is_opened_again_and_the_request_sent_once_more(self):
        self.start("legacy")
        self.initialize()
        self.assertEqual(self.text(self.call("forget")), "forgotten")
        self.assertEqual(self.text(self.call("echo", message="again")), "echo: again")
        self.assertEqual(self.seen().count("initialize"), 2)

    def test_a_modern_server_is_spoken_to_statelessly_with_the_version_on_every_request(self):
        self.start("modern")
        init = self.initialize()
        self.assertEqual(init["result"]["protocolVersion"], "2026-07-28")
        self.assertEqual(init["result"]["serverInfo"]["name"], "modern-fixture")
        self.assertEqual(self.text(self.call("echo", message="hi")), "echo: hi")
        headers = json.loads(self.text(self.call("headers")))
        self.assertEqual(headers, {"mcp-method": "tools/call", "mcp-name": "headers", "mcp-protocol-version": "2026-07-28"})
        seen = self.seen()
        self.assertNotIn("initialize", seen)
        self.assertNotIn("notifications/initialized", seen)

    def test_an_openenv_mcp_endpoint_gets_its_own_session_without_a_handshake(self):
        self.start("openenv")
        init = self.initialize()
        self.assertEqual(init["result"]["serverInfo"]["name"], "openenv")
        self.assertEqual(init["result"]["protocolVersion"], "2025-06-18")
        self.assertEqual(self.text(self.call("echo", message="hi")), "echo: hi")  # refused without the session
        self.relay.p.stdin.close()
        self.relay.p.wait(timeout=10)
        seen = self.seen()
        self.assertEqual(seen[:4], ["server/discover", "initialize", "openenv/session/create", "tools/call"])
        self.assertEqual(seen[-2:], ["openenv/session/close", "closed False"])

    def test_a_cancelled_modern_request_has_its_connection_closed(self):
        self.start("modern")
        self.initialize()
        self.next_id += 1
        calls = self.seen().count("tools/call")
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": "tools/call", "params": {"name": "slow"}})
        end = time.monotonic() + 10  # until the server has the call (cancelling it before would test nothing)
        while time.monotonic() < end and self.seen().count("tools/call") == calls:
            time.sleep(0.02)
        self.send({"jsonrpc": "2.0", "method": "notifications/cancelled",
                   "params": {"requestId": self.next_id, "reason": "timed out"}})
        def log():
            with open(self.log) as f:
                return f.read()
        end = time.monotonic() + 10
        while time.monotonic() < end and "the client closed the connection" not in log():
            time.sleep(0.05)
        self.assertIn("slow: the client closed the connection", log())
        self.assertEqual(self.text(self.call("echo", message="still")), "echo: still")

    def test_an_http_error_is_the_requests_error_and_a_server_that_exits_ends_the_relay(self):
        self.start("legacy")
        self.initialize()
        boom = self.call("boom")
        self.assertEqual(boom["id"], self.next_id)
        self.assertIn("HTTP 500", boom["error"]["message"])
        self.assertIn("it broke", boom["error"]["message"])
        unparsed = self.call("unparsed")  # an error without an id answers the request it came for
        self.assertEqual((unparsed["id"], unparsed["error"]["message"]), (self.next_id, "Parse error"))
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": "tools/call", "params": {"name": "exit"}})
        last = self.relay.read_until("\n", timeout=15)
        self.assertIn("the server exited with code 3", last)
        self.assertIn("exiting on purpose", last)
        self.assertIsNotNone(self.relay.p.wait(timeout=10))

    def test_a_server_that_never_listens_is_reported(self):
        self.dir = tempfile.mkdtemp(prefix="corral-mcp-")
        marker = "31.%d" % os.getpid()  # this test's own server, whatever else runs beside it
        cfg = {"argv": ["sleep", marker], "env": {}, "cwd": self.dir, "port": 0,
               "socket": os.path.join(self.dir, "x"), "log": os.path.join(self.dir, "mcp.log"), "path": "/mcp",
               "ready_timeout": 1}
        self.relay = relay("mcp_http.py", cfg)
        self.addCleanup(self.relay.close)
        self.assertIn("nothing listens on", self.relay.read_until("\n", timeout=15))
        self.relay.p.wait(timeout=10)
        left = subprocess.run(["pgrep", "-f", "sleep " + marker], capture_output=True, text=True).stdout
        self.assertEqual(left, "", "the server is ended with the relay")


def main():
    global SCRIPTS
    parser = argparse.ArgumentParser()
    parser.add_argument("--scripts", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                                          "episode", "scripts"))
    parser.add_argument("--drill", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                                        "examples", "environments", "arithmetic_drill", "server.py"))
    args, rest = parser.parse_known_args()
    SCRIPTS = args.scripts
    global DRILL
    DRILL = args.drill
    unittest.main(argv=[sys.argv[0], "-v"] + rest)


if __name__ == "__main__":
    main()
