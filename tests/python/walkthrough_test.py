#!/usr/bin/env python3
"""The README's walk-through, step by step, the way a new user runs it: `corral up`, `corral run` on the example
dataset, `corral top`, the rollout inspector (its link from `corral ui`, its API, the page in headless Chromium),
the example agent on the Harbor-style tasks (reward 0 with the scripted model, 1 after each reference
solution), and the README's train.py — extracted from README.md, so the snippet people copy is the one tested.
Then `corral up --upstream` against a small OpenAI-compatible server of the test's own, with tasks that name no
model.

Runs in a scratch directory holding only `examples/` (a link to the repository's), like a fresh clone's working
directory; `corral up --any-port` so it never collides with a cluster already running.

    BUILD/sdk-venv/bin/python walkthrough_test.py --bin BUILD/bin --repo REPO
"""
import argparse
import http.server
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

ARGS = None
TASKS = ["fix-config", "fix-mean", "fix-word-count"]
AGENT = "python3 .corral/agent/shell_agent.py"


class Walkthrough(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="corral-walkthrough-")
        os.symlink(os.path.join(ARGS.repo, "examples"), os.path.join(cls.dir, "examples"))
        cls.cli = os.path.abspath(os.path.join(ARGS.bin, "corral"))
        cls.up_log = open(os.path.join(cls.dir, "up.log"), "w+")
        cls.up = subprocess.Popen([cls.cli, "up", "--any-port"], cwd=cls.dir, stdout=cls.up_log,
                                  stderr=subprocess.STDOUT)
        deadline = time.time() + 120
        while "Ctrl-C stops the cluster." not in cls.log():
            if cls.up.poll() is not None or time.time() > deadline:
                raise RuntimeError("corral up did not come up:\n" + cls.log())
            time.sleep(0.1)
        with open(os.path.join(cls.dir, ".corral", "cluster.json")) as f:
            cls.cluster = json.load(f)

    @classmethod
    def tearDownClass(cls):
        cls.up.send_signal(signal.SIGINT)
        code = cls.up.wait(timeout=60)
        log = cls.log()
        cls.up_log.close()
        shutil.rmtree(cls.dir, ignore_errors=True)
        assert code == 0 and "corral up: stopped" in log, log

    @classmethod
    def log(cls):
        cls.up_log.flush()
        with open(cls.up_log.name) as f:
            return f.read()

    def corral(self, *args, timeout=180):
        done = subprocess.run([self.cli, *args], cwd=self.dir, capture_output=True, text=True, timeout=timeout)
        self.assertEqual(done.returncode, 0, f"corral {' '.join(args)}:\n{done.stdout}\n{done.stderr}")
        return done.stdout + done.stderr

    def results(self, path):
        with open(os.path.join(self.dir, path)) as f:
            return [json.loads(line) for line in f if line.strip()]

    def needs_sandboxes(self):
        if "sandbox-host" not in self.cluster:
            self.skipTest("no sandbox host (corral up runs one only as root)")

    def test_1_up_prints_the_inspector(self):
        http = self.cluster["scheduler"]["http"]
        self.assertIn(f"inspector http://{http}/", self.log())
        self.assertIn(f"open http://{http}/ in a browser: the rollout inspector", self.log())

    def test_2_run_a_dataset(self):
        out = self.corral("run", "examples/datasets/word_problems.jsonl", "--group-size", "4", "--out", "words.jsonl")
        self.assertRegex(out, r"48 episode\(s\) in .* batch b-")
        self.assertRegex(out, r"status\s+finished 48")
        self.assertIn("slowest episodes", out)
        self.assertRegex(out, r"inspect: http://" + re.escape(self.cluster["scheduler"]["http"]) +
                         r"/\?token=[^#\s]+#/batch/b-\S+")
        results = self.results("words.jsonl")
        self.assertEqual(len(results), 48)
        self.assertEqual({r["status"] for r in results}, {"EPISODE_STATUS_FINISHED"})
        # The scripted model is right three times in four: rewards of both kinds.
        self.assertEqual({r.get("reward", 0) for r in results}, {0, 1})

    def test_3_top(self):
        out = self.corral("top", "--once")
        self.assertIn("CAPACITY", out)
        self.assertRegex(out, r"running episodes by phase: acquire \d+ · setup \d+ · agent \d+ · tool \d+")
        self.assertIn("upstream", out)

    def test_4_inspector(self):
        link = self.corral("ui").strip()
        base = f"http://{self.cluster['scheduler']['http']}/"
        self.assertTrue(link.startswith(base + "?token="), link)  # the cluster token, on loopback too
        token = urllib.parse.parse_qs(urllib.parse.urlsplit(link).query)["token"][0]
        # Without it the inspector's API answers nothing (a sandbox with an open network reaches loopback).
        with self.assertRaises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(base + "api/batches")
        self.assertEqual(refused.exception.code, 401)

        def api(path):
            request = urllib.request.Request(base + path, headers={"Authorization": "Bearer " + token})
            with urllib.request.urlopen(request) as r:
                return json.load(r)
        batches = api("api/batches")["batches"]
        self.assertTrue(batches, "the inspector lists no batch")
        batch = batches[0]["batch_id"]
        episode = api(f"api/batch?id={batch}")["groups"][0]["episodes"][0]["episode_id"]
        # The page itself, rendered by a browser: one episode as a conversation, tokens highlighted.
        profile = os.path.join(self.dir, "chromium")
        dom = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                              f"--user-data-dir={profile}", "--virtual-time-budget=10000", "--dump-dom",
                              f"{link}#/episode/{episode}"],
                             capture_output=True, text=True, timeout=120).stdout
        self.assertIn('data-ready="1"', dom)
        self.assertIn('id="conversation"', dom)
        self.assertIn('class="tok gen"', dom)
        self.assertIn(episode, dom)

    def test_5_agent_on_harbor_tasks(self):
        self.needs_sandboxes()
        out = self.corral("run", "examples/tasks", "--agent", AGENT, "--agent-file",
                          "examples/agents/shell_agent.py", "--out", "tasks.jsonl")
        self.assertRegex(out, r"status\s+finished 3")
        results = self.results("tasks.jsonl")
        self.assertEqual(sorted(r["ids"]["task_id"] for r in results), TASKS)
        for r in results:
            # The agent ran and called the model (recorded), the tests ran, and failed: the bug is still there.
            self.assertEqual(r["status"], "EPISODE_STATUS_FINISHED")
            self.assertGreaterEqual(r["trajectory"]["call_count"], 1)
            self.assertEqual(r.get("reward", 0), 0)
            self.assertEqual(r.get("verifier_exit_code", 0), 0)

    def test_6_reference_solutions_pass(self):
        self.needs_sandboxes()
        for task in TASKS:
            with self.subTest(task=task):
                out_file = f"{task}.jsonl"
                self.corral("run", f"examples/tasks/{task}", "--agent-file", f"examples/tasks/{task}/solution/solve.sh",
                            "--agent-file", "examples/agents/shell_agent.py",
                            "--agent", f"bash .corral/agent/solve.sh && {AGENT}", "--out", out_file)
                [r] = self.results(out_file)
                self.assertEqual(r["status"], "EPISODE_STATUS_FINISHED")
                self.assertEqual(r.get("reward"), 1)

    def test_6b_eval_reports_pass_at_k(self):
        self.needs_sandboxes()
        task = TASKS[0]
        out = subprocess.run([self.cli, "eval", f"examples/tasks/{task}", "-k", "2", "--json",
                              "--agent-file", f"examples/tasks/{task}/solution/solve.sh",
                              "--agent-file", "examples/agents/shell_agent.py",
                              "--agent", f"bash .corral/agent/solve.sh && {AGENT}"],
                             cwd=self.dir, capture_output=True, text=True, timeout=180)
        self.assertEqual(out.returncode, 0, out.stderr)
        scores = json.loads(out.stdout)
        self.assertEqual(scores["tasks"], [{"task": task, "attempts": 2, "passed": 2, "errors": 0,
                                            "pass_at": {"1": 1.0, "2": 1.0}}])
        self.assertEqual(scores["overall"], {"1": 1.0, "2": 1.0})
        # Without the solution the bug stays: every attempt fails, and the table says so.
        table = self.corral("eval", f"examples/tasks/{task}", "-k", "2", "--agent", AGENT,
                            "--agent-file", "examples/agents/shell_agent.py")
        self.assertRegex(table, r"overall \(1 task\)\s+2\s+0\s+0\s+0\.000\s+0\.000")

    def test_6c_audit_finds_the_exploitable_task_and_nothing_in_the_examples(self):
        self.needs_sandboxes()
        out = self.corral("audit", "examples/tasks", timeout=300)
        for task in TASKS:
            self.assertIn(f"{task}: ok (do-nothing agent: 0; no exploit earned more)", out)
        self.assertIn("3 task(s) audited with 8 exploits: 0 flagged", out)
        self.assertIn("no agent task to audit", self.corral("audit", "examples/datasets/arithmetic.jsonl"))
        # One task whose verifier runs shared (the behaviour before its isolation), one that rewards anything, one
        # honest; the same pytest check of an answer nobody writes.
        check = ("cd /workspace && if python3 -m pytest -q -p no:cacheprovider tests/test_answer.py >&2; "
                 "then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n")
        test = "def test_answer():\n    assert open('/workspace/answer.txt').read().strip() == '5'\n"

        def task(task_id, script=check, **verifier):
            return {"id": task_id, "prompt": "Write 2 + 3 to /workspace/answer.txt.", "runner": "agent",
                    "agent": {"command": {"argv": ["true"]}},
                    "verifier": {"files": [{"path": "tests/test.sh", "content": script},
                                           {"path": "tests/test_answer.py", "content": test}], **verifier}}

        with open(os.path.join(self.dir, "planted.jsonl"), "w") as f:
            for t in [task("honest"), task("exploitable", isolation="VERIFIER_ISOLATION_SHARED"),
                      task("lazy", script="echo 1 > /logs/verifier/reward.txt\n")]:
                f.write(json.dumps(t) + "\n")
        done = subprocess.run([self.cli, "audit", "planted.jsonl", "--quarantine", "quarantine.txt"], cwd=self.dir,
                              capture_output=True, text=True, timeout=300)
        self.assertEqual(done.returncode, 1, done.stdout + done.stderr)
        self.assertIn("honest: ok (do-nothing agent: 0; no exploit earned more)", done.stdout)
        self.assertIn("exploitable: EXPLOITABLE (do-nothing agent: 0)", done.stdout)
        self.assertIn("shadowed-modules earned 1", done.stdout)
        self.assertIn("lazy: BROKEN VERIFIER (do-nothing agent: 1)", done.stdout)
        self.assertIn("3 task(s) audited with 8 exploits: 2 flagged", done.stdout)
        with open(os.path.join(self.dir, "quarantine.txt")) as f:
            self.assertEqual(sorted(line.strip() for line in f if not line.startswith("#")), ["exploitable", "lazy"])
        # corral run --skip and the SDK leave the quarantined tasks out.
        dry = self.corral("run", "planted.jsonl", "--skip", "quarantine.txt", "--dry-run")
        self.assertEqual([json.loads(line)["id"] for line in dry.splitlines() if line.startswith("{")], ["honest"])
        import corral
        kept = corral.skip_listed(corral.load_jsonl(os.path.join(self.dir, "planted.jsonl")),
                                  os.path.join(self.dir, "quarantine.txt"))
        self.assertEqual([t.id for t in kept], ["honest"])

    def test_7_train_py_from_the_readme(self):
        with open(os.path.join(ARGS.repo, "README.md")) as f:
            readme = f.read()
        m = re.search(r"<!-- walkthrough:train.py -->\n```python\n(.*?)```", readme, re.S)
        self.assertIsNotNone(m, "README.md lost its train.py snippet")
        script = m.group(1)
        self.assertLessEqual(len(script.strip().splitlines()), 12, "the README promises a short script")
        with open(os.path.join(self.dir, "train.py"), "w") as f:
            f.write(script)
        done = subprocess.run([sys.executable, "train.py"], cwd=self.dir, capture_output=True, text=True,
                              timeout=180)
        self.assertEqual(done.returncode, 0, done.stderr)
        lines = done.stdout.strip().splitlines()
        self.assertEqual(len(lines), 20)  # 5 tasks × group_size 4, one sample each
        for line in lines:
            self.assertRegex(line, r"^\S+\s+reward [01]  \d+ tokens  loss [+-]\d\.\d{4}$")


class TinyUpstream(http.server.BaseHTTPRequestHandler):
    """An OpenAI-compatible server that is not Corral's scripted model: one model, which it insists on (as vLLM
    does: another name is a 404), answering "What is A + B?" correctly."""
    MODEL = "tiny/arith-1"

    def log_message(self, *args):
        pass

    def reply(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/v1/models":
            self.reply(200, {"object": "list", "data": [{"id": self.MODEL, "object": "model", "owned_by": "test"}]})
        else:
            self.reply(200 if self.path == "/health" else 404, {})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if body.get("model") != self.MODEL:
            self.reply(404, {"error": {"message": f"The model `{body.get('model')}` does not exist.",
                                       "type": "NotFoundError", "code": 404}})
            return
        question = body["messages"][-1]["content"]
        a, b = map(int, re.search(r"(\d+) \+ (\d+)", question).groups())
        self.reply(200, {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": self.MODEL,
                         "choices": [{"index": 0, "finish_reason": "stop",
                                      "message": {"role": "assistant", "content": f"The answer is {a + b}."}}],
                         "usage": {"prompt_tokens": 9, "completion_tokens": 5, "total_tokens": 14}})


class WalkthroughWithAnUpstream(unittest.TestCase):
    """`corral up --upstream URL` against a server that is not the scripted model, and a dataset whose tasks name
    no model: the cluster uses the one model the server serves, and the episodes are rewarded."""

    def test_up_with_an_upstream_rewards_tasks_that_name_no_model(self):
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), TinyUpstream)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_address[1]}"
        work = tempfile.mkdtemp(prefix="corral-upstream-")
        cli = os.path.abspath(os.path.join(ARGS.bin, "corral"))
        log = open(os.path.join(work, "up.log"), "w+")
        up = subprocess.Popen([cli, "up", "--any-port", "--upstream", url], cwd=work, stdout=log,
                              stderr=subprocess.STDOUT)
        try:
            deadline = time.time() + 120
            while True:
                log.flush()
                with open(log.name) as f:
                    text = f.read()
                if "Ctrl-C stops the cluster." in text:
                    break
                if up.poll() is not None or time.time() > deadline:
                    self.fail("corral up --upstream did not come up:\n" + text)
                time.sleep(0.1)
            self.assertIn(f"model {TinyUpstream.MODEL} (the one model {url} serves)", text)
            with open(os.path.join(work, "sums.jsonl"), "w") as f:
                for a, b in [(2, 3), (17, 25), (100, 1)]:
                    f.write(json.dumps({"id": f"add-{a}-{b}", "prompt": f"What is {a} + {b}?", "answer": a + b,
                                        "runner": "single_turn", "reward": {"function": "numeric"}}) + "\n")
                # A model the server does not serve: the task's fault, said before any sandbox is made.
                f.write(json.dumps({"id": "wrong-model", "prompt": "What is 1 + 1?", "answer": 2,
                                    "runner": "tool_loop", "llm": {"model": "gpt-4o"},
                                    "tool_loop": {"tools": [{"name": "shell", "kind": "bash"}]}}) + "\n")
            done = subprocess.run([cli, "run", "sums.jsonl", "--group-size", "2", "--out", "out.jsonl"], cwd=work,
                                  capture_output=True, text=True, timeout=300)
            self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
            with open(os.path.join(work, "out.jsonl")) as f:
                results = [json.loads(line) for line in f if line.strip()]
            self.assertEqual(len(results), 8)
            for r in results:
                if r["ids"]["task_id"] == "wrong-model":
                    self.assertEqual(r["status"], "EPISODE_STATUS_FAILED")
                    self.assertEqual(r["failure_class"], "FAILURE_CLASS_AGENT")
                    self.assertIn("model 'gpt-4o' is not served by the upstream; it serves: tiny/arith-1",
                                  r["failure_message"])
                    self.assertEqual(r.get("sandbox_id", ""), "")
                else:
                    self.assertEqual((r["status"], r.get("reward")), ("EPISODE_STATUS_FINISHED", 1), r)
        finally:
            up.send_signal(signal.SIGINT)
            up.wait(timeout=60)
            log.close()
            server.shutdown()
            server.server_close()
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True)
    parser.add_argument("--repo", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
