#!/usr/bin/env python3
"""The README's walk-through, step by step, the way a new user runs it: `corral up`, `corral run` on the example
dataset, `corral top`, the rollout inspector (its link from `corral ui`, its API, the page in headless Chromium),
the example agent on the Harbor-style tasks (reward 0 with the scripted model, 1 after each reference
solution), and the README's train.py — extracted from README.md, so the snippet people copy is the one tested.

Runs in a scratch directory holding only `examples/` (a link to the repository's), like a fresh clone's working
directory; `corral up --any-port` so it never collides with a cluster already running.

    BUILD/sdk-venv/bin/python walkthrough_test.py --bin BUILD/bin --repo REPO
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
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
        self.assertRegex(out, r"inspect: http://" + re.escape(self.cluster["scheduler"]["http"]) + r"/#/batch/b-\S+")
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
        self.assertEqual(link, f"http://{self.cluster['scheduler']['http']}/")
        with urllib.request.urlopen(link + "api/batches") as r:
            batches = json.load(r)["batches"]
        self.assertTrue(batches, "the inspector lists no batch")
        batch = batches[0]["batch_id"]
        with urllib.request.urlopen(f"{link}api/batch?id={batch}") as r:
            episode = json.load(r)["groups"][0]["episodes"][0]["episode_id"]
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


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True)
    parser.add_argument("--repo", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
