#!/usr/bin/env python3
"""The programs the scheduler runs in sandboxes (services/scheduler/episode/scripts/), run on their own exactly as
the scheduler starts them: the persistent bash and python tools' drivers (state kept between calls, the marker
after each, exit status, errors and interrupts) and the environment relay (waits for the server's health check,
carries requests, reports a server that exited with its log).

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
        self.relay = Resident([sys.executable, "-u", "-c", script("env_relay.py")], {"__CORRAL_ENV": json.dumps(cfg)})
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
        self.relay = Resident([sys.executable, "-u", "-c", script("env_relay.py")], {"__CORRAL_ENV": json.dumps(cfg)})
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
