#!/usr/bin/env python3
"""A SWE-style task end to end through the scheduler, in an OCI image: an image built here with podman holds a
small repository whose test fails; a tool_loop agent (the scripted model's tool calls) patches it inside a
sandbox made from that image; the task's verifier runs the repository's tests; the reward is 1 for the right patch
and 0 for a wrong one. Real binaries on loopback: corral-fake-llm, corral-proxy, corral-scheduler and one
corral-sandbox-host holding the image (imported with `corral image import`); the batch runs with `corral run`.

    python3 swe_test.py --bin BUILD/bin --repo REPO
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "deploy"))
import deploy_support as ds  # noqa: E402
from services import ClusterTestCase, image_test_main  # noqa: E402

ARGS = None
IMAGE = "localhost/corral-swe-task:1"

# The repository: `add` subtracts; its test says so. The right patch fixes the operator.
CALC = "add() { echo $(( $1 - $2 )); }\n"
TESTS = '. ./calc.sh\n[ "$(add 2 3)" = 5 ] && echo "1 passed" || { echo "1 failed: add 2 3 = $(add 2 3)"; exit 1; }\n'
CONTAINERFILE = f"FROM {ds.BASE_IMAGE}\nCOPY testbed /testbed\nWORKDIR /testbed\n"
# A Harbor agent with nothing but the image's bash (no curl, no python): one chat call through the proxy, then a
# look at what the Dockerfile built.
BASH_AGENT = r"""#!/bin/bash
set -e
url=${OPENAI_BASE_URL#http://}; hostport=${url%%/*}; path=/${url#*/}
body="{\"model\":\"$OPENAI_MODEL\",\"messages\":[{\"role\":\"user\",\"content\":\"fix calc.sh\"}]}"
exec 3<>/dev/tcp/${hostport%:*}/${hostport#*:}
printf 'POST %s/chat/completions HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s' \
  "$path" "$hostport" "$OPENAI_API_KEY" ${#body} "$body" >&3
read -r status_line <&3
echo "llm: ${status_line%$'\r'}"
cat NOTES
command -v python3 || echo no-python3
"""


def task(task_id, patch, **environment):
    """A tool_loop task: the scripted model runs `patch` with the shell tool; the verifier runs the tests."""
    return {
        "id": task_id,
        "prompt": "The test in /testbed fails. Fix calc.sh.",
        "runner": "tool_loop",
        "tool_loop": {"tools": [{"name": "shell", "kind": "TOOL_KIND_BASH"}], "max_turns": 2},
        "llm": {"params_json": json.dumps({"fake": {"tool_script": [patch]}})},
        "reward": {"function": "REWARD_FUNCTION_VERIFIER"},
        "environment": {"image": IMAGE, "workdir": "/testbed", "network_policy": "NETWORK_POLICY_NONE", **environment},
        "verifier": {"command": {"argv": ["sh", "run_tests.sh"]}},
    }


class SweTask(ClusterTestCase):
    prefix = "corral-swe-"

    @classmethod
    def set_up_cluster(cls):
        cls.build_image()
        start = cls.services.start
        cls.host = host = start("sandbox-host", ["corral-sandbox-host", "--grpc-listen=127.0.0.1:0",
                                      "--metrics-listen=127.0.0.1:0", f"--root={cls.dir}/sandboxes"])["grpc"]
        ds.run([cls.bin("corral"), "image", "import", cls.archive, "--ref", IMAGE, "--host", host,
                "--secret-file", cls.secret])
        llm = start("fake-llm", ["corral-fake-llm", "--listen=127.0.0.1:0"], secret=False)["http"]
        proxy = start("proxy", ["corral-proxy", "--grpc-listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0",
                                "--http-listen=127.0.0.1:0", f"--journal={cls.dir}/proxy.db",
                                f"--upstream=http://{llm}"])["grpc"]
        cls.scheduler = start("scheduler", [
            "corral-scheduler", "--grpc-listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0",
            "--http-listen=127.0.0.1:0", f"--journal={cls.dir}/scheduler.db", f"--proxy={proxy}",
            f"--host={host}", "--default-model=fake-model", "--warm-pool-size=2", "--host-poll-interval=200ms"])["grpc"]

    @classmethod
    def bin(cls, name):
        return os.path.join(ARGS.bin, name)

    @classmethod
    def build_image(cls):
        context = os.path.join(cls.dir, "context")
        os.makedirs(os.path.join(context, "testbed"))
        with open(os.path.join(context, "testbed", "calc.sh"), "w") as f:
            f.write(CALC)
        with open(os.path.join(context, "testbed", "run_tests.sh"), "w") as f:
            f.write(TESTS)
        with open(os.path.join(context, "Containerfile"), "w") as f:
            f.write(CONTAINERFILE)
        ds.run(["podman", "build", "-q", "-t", IMAGE, context], timeout=600)
        cls.archive = os.path.join(cls.dir, "swe.oci.tar")
        ds.run(["podman", "save", "--format", "oci-archive", "-o", cls.archive, IMAGE], timeout=600)
        ds.run(["podman", "rmi", IMAGE], check=False)

    def test_1_the_right_patch_earns_1_and_a_wrong_one_0(self):
        dataset = os.path.join(self.dir, "swe.jsonl")
        with open(dataset, "w") as f:
            f.write(json.dumps(task("right-patch", "sed -i 's/\\$1 - \\$2/$1 + $2/' calc.sh && sh run_tests.sh")) + "\n")
            f.write(json.dumps(task("wrong-patch", "sed -i 's/\\$1 - \\$2/$1 * $2/' calc.sh")) + "\n")
            f.write(json.dumps(task("no-python-here", "command -v python3 || echo 'no python3'")) + "\n")
            # A template on the image (a Dockerfile's RUN and COPY): the setup fixes the bug and adds a file, once
            # per host; the agent only looks.
            f.write(json.dumps(task("fixed-by-setup", "cat NOTES && sh run_tests.sh", setup_commands=[
                {"argv": ["sh", "-c", "sed -i 's/\\$1 - \\$2/$1 + $2/' /testbed/calc.sh"]}],
                setup_files=[{"path": "/testbed/NOTES", "content": "built by setup\n"}])) + "\n")  # text: corral run encodes it
        out = os.path.join(self.dir, "results.jsonl")
        start = time.time()
        ds.run([self.bin("corral"), "run", dataset, "--scheduler", self.scheduler, "--secret-file", self.secret,
                "--group-size", "2", "--out", out, "--seed", "7"], timeout=300)
        ds.log(f"8 episodes in the image in {time.time() - start:.1f}s")
        with open(out) as f:
            results = [json.loads(line) for line in f if line.strip()]
        self.assertEqual(len(results), 8)
        by_task = {}
        for r in results:
            self.assertEqual(r.get("status"), "EPISODE_STATUS_FINISHED", r)
            self.assertTrue(r["protections"]["user_namespace"], r["protections"])
            by_task.setdefault(r["ids"]["task_id"], []).append(r)
        self.assertEqual([r.get("reward", 0) for r in by_task["right-patch"]], [1, 1])
        self.assertEqual([r.get("reward", 0) for r in by_task["wrong-patch"]], [0, 0])
        self.assertEqual([r.get("reward", 0) for r in by_task["no-python-here"]], [0, 0])  # the test still fails
        for r in by_task["wrong-patch"]:
            self.assertIn("1 failed: add 2 3 = 6", r.get("verifier_output_tail", ""))

        def tool_outputs(task_id):
            return [m["message"]["content"] for r in by_task[task_id] for b in r["trajectory"]["branches"]
                    for m in b["messages"] if m["message"]["role"] == "tool"]

        # The agent's tool output came from the image: it has no python3, though the host running this test does.
        self.assertEqual(tool_outputs("no-python-here"), ["no python3\n"] * 2)
        # Each episode patched its own copy: the right patch's "1 passed" was the agent's own run of the tests.
        self.assertEqual(tool_outputs("right-patch"), ["1 passed\n"] * 2)
        # The template: both episodes of the group ran on the setup's layer, which the host built once.
        self.assertEqual([r.get("reward", 0) for r in by_task["fixed-by-setup"]], [1, 1])
        self.assertEqual(tool_outputs("fixed-by-setup"), ["built by setup\n1 passed\n"] * 2)
        host = json.loads(ds.run([self.bin("corral"), "sandbox", "info", "--host", self.host, "--secret-file",
                                  self.secret]).stdout)
        self.assertEqual(host["templates"], 1, host)

    def test_2_a_harbor_task_runs_in_its_dockerfiles_image(self):
        # A Harbor task whose environment/Dockerfile starts FROM the image: with --harbor-images its COPY and RUN
        # become a template built on the image (here they fix the bug), and its tests/ the verifier.
        task_dir = os.path.join(self.dir, "harbor", "fix-calc")
        for sub_dir in ("environment", "tests"):
            os.makedirs(os.path.join(task_dir, sub_dir))
        files = {
            "instruction.md": "The test in /testbed fails. Fix calc.sh.\n",
            "environment/Dockerfile": f"FROM {IMAGE}\nWORKDIR /testbed\nCOPY fix.sh /testbed/fix.sh\n"
                                      "RUN sh fix.sh && echo 'built from the Dockerfile' > NOTES\n",
            "environment/fix.sh": "sed -i 's/\\$1 - \\$2/$1 + $2/' calc.sh\n",
            "tests/test.sh": "sh /testbed/run_tests.sh && echo 1 > /logs/verifier/reward.txt\n",
            "../agent.sh": BASH_AGENT,
        }
        for path, content in files.items():
            with open(os.path.join(task_dir, path), "w") as f:
                f.write(content)
        out = os.path.join(self.dir, "harbor.jsonl")
        ds.run([self.bin("corral"), "run", task_dir, "--agent", "bash .corral/agent/agent.sh", "--agent-file",
                os.path.join(self.dir, "harbor", "agent.sh"), "--harbor-images", "--scheduler", self.scheduler, "--secret-file", self.secret, "--group-size", "2",
                "--out", out, "--seed", "7"], timeout=300)
        with open(out) as f:
            results = [json.loads(line) for line in f if line.strip()]
        self.assertEqual([(r.get("status"), r.get("reward", 0)) for r in results],
                         [("EPISODE_STATUS_FINISHED", 1)] * 2, results)
        for r in results:
            self.assertTrue(r["protections"]["user_namespace"], r["protections"])
            agent_output = r.get("agent_output_tail", "")
            self.assertEqual(agent_output, "llm: HTTP/1.1 200 OK\nbuilt from the Dockerfile\nno-python3\n", r)
            self.assertEqual(r["trajectory"]["call_count"], 1, r["trajectory"])

    def test_3_a_name_moved_to_another_image_never_gets_a_warm_sandbox_of_the_old_one(self):
        moving = "localhost/corral-swe-moving:latest"
        corral = [self.bin("corral")]
        on_host = ["--host", self.host, "--secret-file", self.secret]
        old = ds.run(corral + ["image", "import", self.archive, "--ref", moving] + on_host).stdout.split()[0]
        probe = "test -d /testbed && echo old-image || echo new-image"

        def run(name):
            dataset = os.path.join(self.dir, f"{name}.jsonl")
            with open(dataset, "w") as f:
                f.write(json.dumps(task(name, probe, image=moving, workdir="/")) + "\n")
            out = os.path.join(self.dir, f"{name}.results.jsonl")
            ds.run(corral + ["run", dataset, "--scheduler", self.scheduler, "--secret-file", self.secret,
                             "--group-size", "2", "--out", out, "--seed", "7"], timeout=300)
            with open(out) as f:
                results = [json.loads(line) for line in f if line.strip()]
            return results, [m["message"]["content"] for r in results for b in r["trajectory"]["branches"]
                             for m in b["messages"] if m["message"]["role"] == "tool"]

        _, outputs = run("before-the-move")
        self.assertEqual(outputs, ["old-image\n"] * 2)

        def sandboxes():
            lines = ds.run(corral + ["sandbox", "ls"] + on_host).stdout.splitlines()[1:]
            return [line.split()[0] for line in lines if line.strip()]

        # The spec is wanted now: the pool makes 2 sandboxes of the old image ahead of the next batch.
        def two_warm():
            ids = sandboxes()
            return ids if len(ids) == 2 else None

        stale = set(ds.wait_until("2 warm sandboxes", two_warm, timeout=60, interval=0.1))
        # The name moves to another image (podman's debian base: no /testbed), and the scheduler sees it.
        base = os.path.join(self.dir, "base.oci.tar")
        ds.run(["podman", "save", "--format", "oci-archive", "-o", base, ds.BASE_IMAGE], timeout=600)
        new = ds.run(corral + ["image", "import", base, "--ref", moving] + on_host).stdout.split()[0]
        self.assertNotEqual(new, old)

        def scheduler_sees_the_move():
            hosts = json.loads(ds.run(corral + ["hosts", "ls", "--json", "--scheduler", self.scheduler,
                                                "--secret-file", self.secret]).stdout)["hosts"]
            return (hosts[0].get("image_digests") or hosts[0].get("imageDigests") or {}).get(moving) == new

        ds.wait_until("the scheduler to see the moved name", scheduler_sees_the_move, timeout=60, interval=0.1)
        results, outputs = run("after-the-move")
        self.assertEqual(outputs, ["new-image\n"] * 2)
        self.assertFalse(stale & {r["sandbox_id"] for r in results}, "a sandbox of the old image was handed out")
        self.assertFalse(stale & set(sandboxes()), "the stale warm sandboxes were not deleted")


def main():
    image_test_main()


if __name__ == "__main__":
    main()
