#!/usr/bin/env python3
"""The two Harbor loaders agree: `corral run DIR --dry-run` (tools/corral/harbor.cc) and the SDK's load_harbor
(clients/python/corral/datasets.py) turn the same task directories into the same Task messages, field by field —
the examples, and tasks made here that use what a Dockerfile and task.toml may say (RUN/COPY/ENV/WORKDIR,
timeouts, memory, metadata, docker_image), each with an agent command and with a harness, with and without
images.

    python harbor_parity_test.py --bin BUILD/bin --repo REPO
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from google.protobuf import json_format

from corral.datasets import load_harbor
from corral.tasks import to_task

ARGS = None

TASK_TOML = """\
version = "1.0"

[metadata]
difficulty = "easy"
tags = ["parity", "cli"]

[agent]
timeout_sec = 240.0

[verifier]
timeout_sec = 90

[environment]
build_timeout_sec = 300
memory_mb = 512
docker_image = "localhost/parity/base:1"
"""

DOCKERFILE = """\
FROM localhost/parity/base:1
WORKDIR /app
ENV MODE=test LEVEL=3
COPY src/ /app/src/
COPY setup.cfg /app/
RUN pip install --no-index -e . && \\
    echo built > /app/BUILT
"""


def make_task(root, name):
    """A Harbor task directory using every field the loaders read."""
    task = os.path.join(root, name)
    os.makedirs(os.path.join(task, "environment", "src"))
    os.makedirs(os.path.join(task, "tests"))
    with open(os.path.join(task, "instruction.md"), "w") as f:
        f.write("Make the tests pass.\n\nThey are in tests/.\n")
    with open(os.path.join(task, "task.toml"), "w") as f:
        f.write(TASK_TOML)
    with open(os.path.join(task, "environment", "Dockerfile"), "w") as f:
        f.write(DOCKERFILE)
    with open(os.path.join(task, "environment", "src", "lib.py"), "w") as f:
        f.write("def add(a, b):\n    return a - b\n")
    with open(os.path.join(task, "environment", "setup.cfg"), "w") as f:
        f.write("[metadata]\nname = lib\n")
    with open(os.path.join(task, "tests", "test.sh"), "w") as f:
        f.write("#!/bin/bash\npython3 -c 'import lib; assert lib.add(2, 3) == 5' && echo 1 > /logs/verifier/reward.txt\n")
    os.chmod(os.path.join(task, "tests", "test.sh"), 0o755)
    return task


def cli_tasks(task_dir, agent, use_image):
    cmd = [os.path.join(ARGS.bin, "corral"), "run", task_dir, "--agent", agent, "--dry-run"]
    if use_image:
        cmd.append("--harbor-images")
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {done.returncode}: {done.stderr}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def sdk_task(task_dir, agent, use_image):
    harness = agent if agent in ("claude-code", "codex", "opencode") else ""
    task = load_harbor(task_dir, agent=None if harness else agent, harness=harness, use_image=use_image)
    return json_format.MessageToDict(to_task(task), preserving_proto_field_name=True)


def dropped_empty(value):
    """`value` without empty sub-messages (set but empty, or absent: the same to the scheduler)."""
    if isinstance(value, dict):
        kept = {k: dropped_empty(v) for k, v in value.items()}
        return {k: v for k, v in kept.items() if v != {}}
    if isinstance(value, list):
        return [dropped_empty(v) for v in value]
    return value


def normalized(task):
    """A task with its file lists in path order, metadata_json parsed and empty sub-messages dropped (the loaders
    may order keys and files differently; what reaches the sandbox is the same)."""
    task = dropped_empty(json.loads(json.dumps(task)))
    for holder in (task.get("environment", {}), task.get("verifier", {})):
        for key in ("files", "setup_files"):
            if key in holder:
                holder[key] = sorted(holder[key], key=lambda f: f["path"])
    if "metadata_json" in task:
        task["metadata_json"] = json.loads(task["metadata_json"])
    return task


class HarborParity(unittest.TestCase):
    def compare(self, task_dir, agent, use_image=False):
        with self.subTest(task=os.path.basename(task_dir), agent=agent, use_image=use_image):
            from_cli = cli_tasks(task_dir, agent, use_image)
            self.assertEqual(len(from_cli), 1)
            cli = normalized(from_cli[0])
            sdk = normalized(sdk_task(task_dir, agent, use_image))
            for field in sorted(set(cli) | set(sdk)):
                self.assertEqual(cli.get(field), sdk.get(field), f"field '{field}' differs")

    def test_the_examples_load_the_same_from_both(self):
        examples = os.path.join(ARGS.repo, "examples", "tasks")
        for name in sorted(os.listdir(examples)):
            self.compare(os.path.join(examples, name), "python3 /opt/agent.py")
            self.compare(os.path.join(examples, name), "codex")

    def test_a_task_using_every_field_loads_the_same_with_and_without_its_image(self):
        root = tempfile.mkdtemp(prefix="corral-harbor-parity-")
        self.addCleanup(shutil.rmtree, root)
        task = make_task(root, "everything")
        for use_image in (False, True):
            self.compare(task, "python3 /opt/agent.py", use_image)
            self.compare(task, "claude-code", use_image)


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True)
    parser.add_argument("--repo", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0], "-v"] + rest)


if __name__ == "__main__":
    main()
