#!/usr/bin/env python3
"""The code interpreter's kernel (services/sandbox_api/e2b/scripts/code_kernel.py), run on its own exactly as
corral-sandbox-api starts it (python3 -u -c SCRIPT): the lines @e2b/code-interpreter reads for each request, state
kept between runs, output captured from print and from subprocesses, the last value and its rich forms,
exceptions with the code's own traceback, envs for one run, and SIGINT interrupting the code alone.

    python3 code_kernel_test.py --script PATH
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

SCRIPT = None


class Kernel:
    def __init__(self):
        with open(SCRIPT) as f:
            source = f.read()
        self.cwd = tempfile.mkdtemp()
        self.p = subprocess.Popen([sys.executable, "-u", "-c", source], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, cwd=self.cwd)

    def send(self, code, env=None):
        self.p.stdin.write((json.dumps({"code": code, "env_vars": env or {}}) + "\n").encode())
        self.p.stdin.flush()

    def lines(self):
        """One run's lines, up to its end (which is not returned)."""
        out = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            line = self.p.stdout.readline()
            if not line:
                raise AssertionError("the kernel ended: %r" % out)
            message = json.loads(line)
            if message == {"type": "end_of_execution"}:
                return out
            out.append(message)
        raise AssertionError("no end of execution: %r" % out)

    def run(self, code, env=None):
        self.send(code, env)
        return self.lines()

    def close(self):
        self.p.stdin.close()
        return self.p.wait(10)



def of(lines, kind):
    return [m for m in lines if m["type"] == kind]


class CodeKernelTest(unittest.TestCase):
    def setUp(self):
        self.k = Kernel()

    def tearDown(self):
        if self.k.p.poll() is None:
            self.k.p.kill()
            self.k.p.wait()
        for pipe in (self.k.p.stdin, self.k.p.stdout):
            if not pipe.closed:
                pipe.close()

    def test_state_is_kept_and_the_last_value_is_the_main_result(self):
        out = self.k.run("x = 1\nx += 1\nx")
        self.assertEqual(of(out, "result"), [{"type": "result", "text": "2", "is_main_result": True}])
        self.assertEqual(of(out, "number_of_executions"), [{"type": "number_of_executions", "execution_count": 1}])
        out = self.k.run("x * 10")
        self.assertEqual(of(out, "result")[0]["text"], "20")
        self.assertEqual(of(self.k.run("y = 3"), "result"), [])  # a statement has no value
        self.assertEqual(of(self.k.run("None"), "result"), [])
        self.assertEqual(self.k.close(), 0)

    def test_print_stderr_and_a_subprocess_are_captured_as_whole_lines(self):
        out = self.k.run("import os, sys\nprint('hello')\nprint('oops', file=sys.stderr)\nos.system('echo shell')\n"
                         "print('no newline', end='')")
        self.assertEqual([m["text"] for m in of(out, "stderr")], ["oops\n"])
        self.assertEqual("".join(m["text"] for m in of(out, "stdout")), "hello\nshell\nno newline")
        self.assertIn({"type": "stdout", "text": "hello\n"}, out)
        # The code cannot read the kernel's requests: its stdin is /dev/null.
        out = self.k.run("input()")
        self.assertEqual(of(out, "error")[0]["name"], "EOFError")
        self.assertEqual(of(self.k.run("1 + 1"), "result")[0]["text"], "2")

    def test_an_exception_is_an_error_with_the_codes_traceback_and_the_kernel_lives_on(self):
        out = self.k.run("def f():\n    raise ValueError('bad')\nf()")
        [error] = of(out, "error")
        self.assertEqual((error["name"], error["value"]), ("ValueError", "bad"))
        self.assertIn('File "<cell>", line 2, in f', error["traceback"])
        self.assertNotIn("code_kernel", error["traceback"])
        self.assertEqual(of(self.k.run("syntax error here"), "error")[0]["name"], "SyntaxError")
        self.assertEqual(of(self.k.run("raise SystemExit(3)"), "error")[0]["name"], "SystemExit")
        self.assertEqual(of(self.k.run("2"), "result")[0]["text"], "2")

    def test_envs_last_one_run(self):
        os.environ.pop("ONLY_NOW", None)
        out = self.k.run("import os\nos.environ['ONLY_NOW']", {"ONLY_NOW": "yes"})
        self.assertEqual(of(out, "result")[0]["text"], "'yes'")
        self.assertEqual(of(self.k.run("os.environ.get('ONLY_NOW')"), "result"), [])

    def test_rich_forms_and_display(self):
        out = self.k.run("class H:\n    def _repr_html_(self): return '<b>h</b>'\n"
                         "    def _repr_png_(self): return b'\\x89PNG'\ndisplay(7)\nH()")
        results = of(out, "result")
        self.assertEqual(results[0], {"type": "result", "text": "7", "is_main_result": False})
        self.assertEqual(results[1]["html"], "<b>h</b>")
        self.assertEqual(results[1]["png"], "iVBORw==")
        self.assertTrue(results[1]["is_main_result"])

    def test_sigint_interrupts_the_code_only(self):
        self.k.run("z = 42")
        os.kill(self.k.p.pid, signal.SIGINT)  # between runs: ignored
        self.assertEqual(of(self.k.run("z"), "result")[0]["text"], "42")
        self.k.send("import time\nprint('looping')\nwhile True: time.sleep(0.01)")
        first = json.loads(self.k.p.stdout.readline())  # the code runs: now the interrupt is its
        self.assertEqual(first, {"type": "stdout", "text": "looping\n"})
        os.kill(self.k.p.pid, signal.SIGINT)
        out = self.k.lines()
        self.assertEqual(of(out, "error")[0]["name"], "KeyboardInterrupt")
        self.assertEqual(of(self.k.run("z"), "result")[0]["text"], "42")

    def test_garbage_requests_are_skipped(self):
        self.k.p.stdin.write(b"not json\n[1]\n")
        self.k.p.stdin.flush()
        self.assertEqual(of(self.k.run("5"), "result")[0]["text"], "5")
        self.assertEqual(of(self.k.run("6"), "number_of_executions")[0]["execution_count"], 2)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--script", required=True)
    args, rest = parser.parse_known_args()
    SCRIPT = args.script
    unittest.main(argv=[sys.argv[0]] + rest)
