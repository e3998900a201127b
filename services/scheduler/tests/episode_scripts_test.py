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
import select
import signal
import subprocess
import sys
import tempfile
import time
import unittest

SCRIPTS = None


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


def main():
    global SCRIPTS
    parser = argparse.ArgumentParser()
    parser.add_argument("--scripts", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                                          "episode", "scripts"))
    args, rest = parser.parse_known_args()
    SCRIPTS = args.scripts
    unittest.main(argv=[sys.argv[0], "-v"] + rest)


if __name__ == "__main__":
    main()
