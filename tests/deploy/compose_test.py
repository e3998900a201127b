#!/usr/bin/env python3
"""deploy/compose/compose.yaml run for real with podman-compose: the whole cluster in containers (scheduler,
ratelimiter, proxy, two sandbox hosts, the sandbox API, the scripted model, Prometheus), driven from this machine the way a user
drives it — the corral CLI and the Python SDK on the scheduler's published port.

In order: every service healthy and both hosts reporting their protections; a mixed batch (tool_loop, single_turn,
agents that call the model through the proxy by its compose name) run to the last result; Prometheus scraping
every target, with every expression of the dashboard and the rules returning series; a sandbox host killed
mid-batch and its episodes finishing on the other; the scheduler killed and restarted (its journal on a volume)
redelivering exactly what was not acknowledged; verl's SandboxFusion payload answered by the sandbox API on its
published port; `down` leaving no container, volume or network behind.

    BUILD/sdk-venv/bin/python compose_test.py --bin BUILD/bin --repo REPO
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploy_support as ds  # noqa: E402

ARGS = None

# An agent as a user would write one: it reads its instruction, asks the model through OPENAI_BASE_URL (the proxy,
# reached by its compose name from inside a proxy_only sandbox), optionally takes its time, writes the answer.
AGENT = r"""
import json, os, time, urllib.request
time.sleep(float(os.environ.get("AGENT_SLEEP", "0")))
with open(os.environ["CORRAL_INSTRUCTION_FILE"]) as f:
    prompt = f.read()
body = json.dumps({"model": os.environ["OPENAI_MODEL"], "messages": [{"role": "user", "content": prompt}]})
request = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions", data=body.encode(),
    headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "Content-Type": "application/json"})
answer = json.load(urllib.request.urlopen(request, timeout=60))["choices"][0]["message"]["content"]
with open("/workspace/answer.txt", "w") as f:
    f.write(answer)
"""
# The reward: 1 when the agent wrote an answer.
VERIFIER = "mkdir -p /logs/verifier; test -s /workspace/answer.txt && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt"


def agent_task(task_id, prompt, sleep_s=0.0):
    return {"id": task_id, "prompt": prompt, "runner": "agent",
            "agent": {"command": {"argv": ["python3", "-c", AGENT], "env": {"AGENT_SLEEP": str(sleep_s)}}},
            "verifier": {"command": {"argv": ["bash", "-c", VERIFIER]}}}


def write_jsonl(path, rows):
    with open(path, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    return path


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


class Compose(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        ds.require_images()
        cls.dir = tempfile.mkdtemp(prefix="corral-compose-")
        cls.project = f"corraltest{os.getpid()}"
        cls.secret = os.path.join(cls.dir, "secret")
        with open(cls.secret, "w") as f:
            f.write(os.urandom(32).hex() + "\n")
        os.chmod(cls.secret, 0o600)
        cls.ports = {name: ds.free_port() for name in ("SCHEDULER", "INSPECTOR", "PROMETHEUS", "PROXY", "SANDBOX_API")}
        cls.env = dict(os.environ, CORRAL_SECRET_FILE=cls.secret,
                       **{f"CORRAL_{k}_PORT": str(v) for k, v in cls.ports.items()})
        cls.scheduler = f"127.0.0.1:{cls.ports['SCHEDULER']}"
        cls.cli = os.path.abspath(os.path.join(ARGS.bin, "corral"))
        cls.compose_file = os.path.join(ARGS.repo, "deploy", "compose", "compose.yaml")
        start = time.time()
        try:
            cls.compose("up", "-d")
            ds.wait_until("the scheduler's health", lambda: ds.serving(cls.cli, cls.scheduler), 180)
            cls.wait_for_healthy_hosts(2)
        except BaseException:
            cls.dump_logs()
            cls.tearDownClass()  # unittest does not call it when setUpClass fails
            raise
        ds.log(f"compose stack up and healthy in {time.time() - start:.0f}s")

    @classmethod
    def tearDownClass(cls):
        # Whatever the tests did, nothing is left running (test_9 checks `down` itself).
        subprocess.run(["podman-compose", "-p", cls.project, "-f", cls.compose_file, "down", "-v"],
                       capture_output=True, env=cls.env, timeout=300)
        subprocess.run(["sh", "-c", f"podman ps -aq --filter label=io.podman.compose.project={cls.project} | "
                                    "xargs -r podman rm -f; "
                                    f"podman volume ls -q | grep '^{cls.project}_' | xargs -r podman volume rm -f; "
                                    f"podman network rm -f {cls.project}_default"],
                       capture_output=True, timeout=300)
        shutil.rmtree(cls.dir, ignore_errors=True)

    # ---- helpers

    @classmethod
    def dump_logs(cls):
        # What each container said, so a failure here can be read from the test's output alone.
        ps = subprocess.run(["podman", "ps", "-a", "--filter", f"label=io.podman.compose.project={cls.project}",
                             "--format", "{{.Names}} {{.Status}}"], capture_output=True, text=True, timeout=60)
        ds.log("containers:\n" + ps.stdout)
        for name in ps.stdout.split():
            if name.startswith(cls.project):
                logs = subprocess.run(["podman", "logs", "--tail", "40", name], capture_output=True, text=True,
                                      timeout=60)
                ds.log(f"--- {name}\n{logs.stdout}{logs.stderr}")

    @classmethod
    def compose(cls, *args, timeout=600):
        return ds.run(["podman-compose", "-p", cls.project, "-f", cls.compose_file, *args], env=cls.env,
                      timeout=timeout)

    @classmethod
    def container(cls, service):
        return f"{cls.project}_{service}_1"

    @classmethod
    def corral(cls, *args, timeout=600):
        return ds.run([cls.cli, *args, "--scheduler", cls.scheduler, "--secret-file", cls.secret], timeout=timeout,
                      cwd=ARGS.repo)

    @classmethod
    def hosts(cls):
        return json.loads(cls.corral("hosts", "ls", "--json", timeout=60).stdout).get("hosts", [])

    @classmethod
    def wait_for_healthy_hosts(cls, n):
        return ds.wait_until(f"{n} healthy sandbox hosts", lambda: [
            h for h in cls.hosts() if h.get("state") == "HOST_STATE_HEALTHY"] if sum(
                h.get("state") == "HOST_STATE_HEALTHY" for h in cls.hosts()) == n else None, 180, interval=2)

    def prometheus(self, path, **params):
        url = f"http://127.0.0.1:{self.ports['PROMETHEUS']}{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=30) as r:
            body = json.load(r)
        self.assertEqual(body.get("status"), "success", body)
        return body["data"]

    def sdk(self):
        import corral  # the SDK, from the venv this test runs in
        return corral.Client(self.scheduler, secret_file=self.secret)

    # ---- tests, in order

    def test_1_every_service_is_healthy_and_each_host_reports_its_protections(self):
        hosts = self.wait_for_healthy_hosts(2)
        self.assertEqual(sorted(h["host_id"] for h in hosts), ["sandbox-host-1", "sandbox-host-2"])
        for h in hosts:
            features = h.get("features", {})
            ds.log(f"{h['host_id']}: {json.dumps(features)}")
            self.assertGreaterEqual(int(features.get("landlock_abi", 0)), 1, features)
            self.assertTrue(features.get("mount_namespaces"), features)
            self.assertIn("containment", features)
        for service, port in (("ratelimiter", 7400), ("proxy", 7600), ("sandbox-api", 7800)):
            with self.subTest(service=service):
                ds.run(["podman", "exec", self.container(service), "corral", "health", f"127.0.0.1:{port}"])
        # The control services run as the corral user, not root.
        for service in ("scheduler", "proxy", "ratelimiter", "model", "sandbox-api"):
            with self.subTest(service=service):
                uid = ds.run(["podman", "exec", self.container(service), "sh", "-c",
                              "awk '/^Uid/ {print $2}' /proc/1/status"]).stdout.strip()
                self.assertEqual(uid, "10001")

    def test_2_a_mixed_batch_from_the_host_with_the_cli(self):
        tasks = read_jsonl(os.path.join(ARGS.repo, "examples", "datasets", "arithmetic.jsonl"))
        tasks += read_jsonl(os.path.join(ARGS.repo, "examples", "datasets", "word_problems.jsonl"))
        tasks += [agent_task("agent-add", "What is 345 + 678?"), agent_task("agent-mul", "What is 12 * 12?")]
        dataset = write_jsonl(os.path.join(self.dir, "mixed.jsonl"), tasks)
        out = os.path.join(self.dir, "mixed-results.jsonl")
        self.corral("batch", "submit", dataset, "--group-size", "4", "--seed", "20261124", "--follow", "--ack",
                    "--out", out)
        results = read_jsonl(out)
        self.assertEqual(len(results), len(tasks) * 4)
        self.assertEqual({r["status"] for r in results}, {"EPISODE_STATUS_FINISHED"},
                         [r for r in results if r["status"] != "EPISODE_STATUS_FINISHED"][:2])
        agents = [r for r in results if r["ids"]["task_id"].startswith("agent-")]
        self.assertEqual(len(agents), 8)
        for r in agents:
            self.assertEqual(r.get("reward"), 1, r)
            self.assertGreaterEqual(r["trajectory"]["call_count"], 1)  # the agent reached the model via the proxy
        self.assertLessEqual({r.get("host_id") for r in agents}, {"sandbox-host-1", "sandbox-host-2"})
        # The scripted model answers wrong for one seed in four: across the word problems' 48 episodes both rewards
        # occur (the batch seed is fixed, so this is deterministic).
        words = {t["id"] for t in read_jsonl(os.path.join(ARGS.repo, "examples", "datasets", "word_problems.jsonl"))}
        self.assertEqual({r.get("reward", 0) for r in results if r["ids"]["task_id"] in words}, {0, 1})

    def test_3_prometheus_scrapes_every_target_and_no_panel_or_rule_is_dead(self):
        targets = ds.wait_until("every Prometheus target up", self.all_targets_up, 120, interval=3)
        jobs = sorted({t["labels"]["job"] for t in targets})
        self.assertEqual(jobs, ["corral-proxy", "corral-ratelimiter", "corral-sandbox-api", "corral-sandbox-host",
                                "corral-scheduler", "prometheus"])
        self.assertEqual(len(targets), 7)
        expressions = self.dashboard_expressions() + self.rule_expressions()
        self.assertGreater(len(expressions), 40)
        ds.log(f"evaluating {len(expressions)} expressions of the dashboard and the rules")

        def dead():
            return [(origin, e) for origin, e in expressions if not self.prometheus("/api/v1/query", query=e)["result"]]
        left = dead()
        deadline = time.time() + 150  # rates need two scrapes of a series; recording rules one evaluation
        while left and time.time() < deadline:
            time.sleep(10)
            left = dead()
        self.assertEqual(left, [], "expressions that return no series")

    def all_targets_up(self):
        targets = self.prometheus("/api/v1/targets")["activeTargets"]
        return targets if targets and all(t["health"] == "up" for t in targets) else None

    def dashboard_expressions(self):
        path = os.path.join(ARGS.repo, "deploy", "observability", "grafana", "corral-dashboard.json")
        with open(path) as f:
            dashboard = json.load(f)
        out = []
        for panel in dashboard["panels"]:
            for target in panel.get("targets", []):
                expr = target["expr"].replace("$__rate_interval", "1m")
                self.assertNotIn("$", expr, f"an unhandled dashboard variable in {panel['title']}")
                out.append((f"panel '{panel['title']}'", expr))
        return out

    def rule_expressions(self):
        """Recording rules' expressions as they are; alerts' left side (the alert is `<lhs> <op> <number>`), so
        the check is that the data exists, whether or not the alert fires. The rules come from Prometheus itself:
        they were loaded."""
        out = []
        groups = self.prometheus("/api/v1/rules")["groups"]
        self.assertEqual(sorted(g["name"] for g in groups), ["corral.alerts", "corral.recording"])
        for group in groups:
            for rule in group["rules"]:
                self.assertEqual(rule["health"], "ok", rule)
                query = rule["query"]
                if rule["type"] == "alerting":
                    m = re.fullmatch(r"(.*\S)\s*(==|!=|>=|<=|>|<)\s*[0-9.]+", query.strip(), re.S)
                    self.assertIsNotNone(m, f"alert {rule['name']} is not `<expr> <op> <threshold>`: {query}")
                    query = m.group(1)
                out.append((f"rule {rule['name']}", query))
        return out

    def test_4_a_killed_sandbox_host_s_episodes_finish_on_the_other(self):
        tasks = [agent_task(f"slow-{i}", f"What is {i} + {i}?", sleep_s=8) for i in range(8)]
        client = self.sdk()
        batch = client.submit(tasks, group_size=2)
        # Wait until the second host runs some of them, then kill it for good (-9, container removed).
        ds.wait_until("episodes running on sandbox-host-2", lambda: any(
            h["host_id"] == "sandbox-host-2" and int(h.get("running_episodes", 0)) > 0 for h in self.hosts()), 120)
        ds.run(["podman", "rm", "-f", self.container("sandbox-host-2")])
        results = list(batch.results(ack=True))
        self.assertEqual(len(results), 16)
        retried = [r for r in results if r.ids.attempt > 1]
        ds.log(f"{len(retried)} episode(s) retried after the kill")
        self.assertGreater(len(retried), 0, "the killed host's episodes were not retried")
        for r in results:
            self.assertEqual(r.status, 1, r)  # EPISODE_STATUS_FINISHED
            self.assertEqual(r.reward, 1.0)
        self.assertEqual({r.host_id for r in retried}, {"sandbox-host-1"})
        # Bring it back (a replaced machine): the scheduler finds it healthy again.
        self.compose("up", "-d", "sandbox-host-2")
        self.wait_for_healthy_hosts(2)

    def test_5_a_restarted_scheduler_redelivers_exactly_what_was_not_acknowledged(self):
        client = self.sdk()
        done_batch = client.submit(read_jsonl(os.path.join(ARGS.repo, "examples", "datasets", "word_problems.jsonl")),
                                   group_size=2)
        done_batch.wait(timeout=120)
        seen = []
        for r in done_batch.results(ack=False):
            seen.append(r.ids.episode_id)
        self.assertEqual(len(seen), 24)
        acked = seen[:10]
        self.assertEqual(client.ack(acked), 10)
        # And a batch still running when the scheduler dies.
        running = client.submit([agent_task(f"held-{i}", f"What is {i} * 3?", sleep_s=4) for i in range(4)],
                                group_size=2)
        ds.wait_until("episodes running", lambda: any(int(h.get("running_episodes", 0)) for h in self.hosts()), 60)
        ds.run(["podman", "kill", "--signal", "KILL", self.container("scheduler")])
        ds.run(["podman", "start", self.container("scheduler")])
        ds.wait_until("the restarted scheduler's health", lambda: ds.serving(self.cli, self.scheduler), 120)
        client = self.sdk()
        again = [r.ids.episode_id for r in client.batch(done_batch.id).results(ack=True)]
        self.assertEqual(sorted(again), sorted(seen[10:]), "redelivered after the restart")
        self.assertFalse(set(again) & set(acked), "an acknowledged result came back")
        finished = list(client.batch(running.id).results(ack=True))
        self.assertEqual(len(finished), 8)
        self.assertEqual({r.status for r in finished}, {1})

    def test_6_verl_s_sandbox_fusion_payload_runs_through_the_sandbox_api(self):
        url = f"http://127.0.0.1:{self.ports['SANDBOX_API']}/run_code"
        client = os.path.join(ARGS.repo, "tests", "sandbox_api", "verl_client.py")
        out = ds.run([sys.executable, client, url, "--code", "print(int(input()) * 2)", "--stdin", "21",
                      "--concurrency", "4"]).stdout
        calls = [json.loads(line) for line in out.splitlines()]
        self.assertEqual(len(calls), 4)
        for call in calls:
            self.assertEqual(call["http"], 200, call)
            self.assertEqual(call["body"]["status"], "Success", call)
            self.assertEqual(call["body"]["run_result"]["stdout"], "42\n", call)

    def test_7_the_e2b_sdk_runs_against_the_sandbox_api(self):
        # The real e2b SDK (tests/e2b), unchanged: only its URLs and a key from `corral sandbox-api key` are set.
        key = ds.run([self.cli, "sandbox-api", "key", "deploy-test", "--secret-file", self.secret],
                     quiet=True).stdout.strip()
        url = f"http://127.0.0.1:{self.ports['SANDBOX_API']}"
        env = dict(os.environ, E2B_API_KEY=key, E2B_API_URL=url, E2B_SANDBOX_URL=url)
        # No fork here: the host cannot open a sandbox's user namespace in this unprivileged container.
        out = subprocess.run(["node", os.path.join(ARGS.repo, "tests", "e2b", "sdk_test.mjs"), "commands", "files",
                              "errors"], env=env, capture_output=True, text=True, timeout=300)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertEqual(out.stdout.split("\n")[:3], ["ok commands", "ok files", "ok errors"])

    def test_9_down_leaves_no_container_volume_or_network(self):
        self.compose("down", "-v")
        containers = ds.run(["podman", "ps", "-aq", "--filter", f"label=io.podman.compose.project={self.project}"],
                            quiet=True).stdout.split()
        volumes = [v for v in ds.run(["podman", "volume", "ls", "-q"], quiet=True).stdout.split()
                   if v.startswith(self.project + "_")]
        networks = [n for n in ds.run(["podman", "network", "ls", "--format", "{{.Name}}"], quiet=True).stdout.split()
                    if n.startswith(self.project)]
        if podman_compose_version() < (1, 0, 6) and networks == [f"{self.project}_default"]:
            # podman-compose before 1.0.6 does not remove the project's network on `down` (docker compose does);
            # docs/deploy.md tells users to remove it, as done here.
            ds.log(f"podman-compose {podman_compose_version()} left {networks[0]}: removing it as docs/deploy.md says")
            ds.run(["podman", "network", "rm", networks[0]])
            networks = []
        self.assertEqual((containers, volumes, networks), ([], [], []))


def podman_compose_version():
    out = subprocess.run(["podman-compose", "version"], capture_output=True, text=True, timeout=60).stdout
    m = re.search(r"podman-composer? version\s+(\d+)\.(\d+)\.(\d+)", out)
    return tuple(int(x) for x in m.groups()) if m else (0, 0, 0)


def main():
    global ARGS
    ARGS, rest = ds.args_or_skip()
    unittest.main(argv=[sys.argv[0], "-v", "-f"] + rest)


if __name__ == "__main__":
    main()
