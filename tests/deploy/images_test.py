#!/usr/bin/env python3
"""Builds Corral's container images with deploy/docker/*.Dockerfile exactly as a user would (podman here, Docker
elsewhere), then checks what they hold: every binary runs (its runtime libraries are all there), the control
services' image runs as uid 10001 and carries no compiler, the sandbox host's image starts as root with the
tools sandboxed tasks run.

The build stage's ccache is this machine's own (mounted with --volume), so after scripts/test has built the tree
the image build recompiles nothing that did not change; podman's layer cache keeps the apt steps.

    python3 images_test.py --repo REPO
"""
import argparse
import os
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploy_support as ds  # noqa: E402

ARGS = None
BINARIES = ["corral", "corral-scheduler", "corral-proxy", "corral-ratelimiter", "corral-sandbox-host",
            "corral-fake-llm"]


def build(target_args, tag, log_name):
    """podman build from the repository's root, its output in a log file; raises with the log's tail on failure."""
    cmd = ["podman", "build", "--network", "host", "--layers", "-t", tag, *target_args, ARGS.repo]
    log_path = os.path.join(ARGS.logs, log_name)
    ds.log(f"building {tag} (log: {log_path})")
    start = time.time()
    with open(log_path, "w") as out:
        code = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, timeout=3600).returncode
    with open(log_path) as f:
        text = f.read()
    if code != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {code}:\n{text[-6000:]}")
    ds.log(f"built {tag} in {time.time() - start:.0f}s")
    return text


def ccache_volume():
    """--volume and --build-arg that give the build stage this machine's ccache, when there is one."""
    done = subprocess.run(["ccache", "-k", "cache_dir"], capture_output=True, text=True)
    if done.returncode != 0 or not done.stdout.strip():
        return []
    path = done.stdout.strip()
    os.makedirs(path, exist_ok=True)
    return ["--volume", f"{path}:/ccache-host", "--build-arg", "CCACHE_DIR=/ccache-host"]


def in_image(image, *cmd, check=True, user=None):
    args = ["podman", "run", "--rm", "--network", "none"]
    if user is not None:
        args += ["--user", user]
    return ds.run(args + [image, *cmd], check=check, timeout=120)


class Images(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        dockerfile = os.path.join(ARGS.repo, "deploy", "docker", "Dockerfile")
        cls.build_log = build(["-f", dockerfile, "--target", "corral", *ccache_volume()], ds.IMAGE, "corral.log")
        build(["-f", dockerfile, "--target", "corral-sandbox-host", *ccache_volume()], ds.SANDBOX_HOST_IMAGE,
              "corral-sandbox-host.log")
        build(["-f", os.path.join(ARGS.repo, "deploy", "docker", "prometheus.Dockerfile")], ds.PROMETHEUS_IMAGE,
              "prometheus.log")
        sizes = ds.run(["podman", "images", "--format", "{{.Repository}}:{{.Tag}} {{.Size}}", "--filter",
                        "reference=localhost/*"], quiet=True).stdout
        ds.log("image sizes:\n" + sizes)

    def test_every_binary_runs_in_the_image(self):
        for binary in BINARIES:
            with self.subTest(binary=binary):
                done = in_image(ds.IMAGE, binary, "--help")
                self.assertIn("--", done.stdout)  # its usage, not a loader error
        version = in_image(ds.IMAGE, "corral", "version").stdout
        self.assertRegex(version, r"corral \d+\.\d+\.\d+")

    def test_the_control_image_runs_as_uid_10001_without_a_compiler(self):
        self.assertEqual(in_image(ds.IMAGE, "id", "-u").stdout.strip(), "10001")
        self.assertEqual(in_image(ds.IMAGE, "id", "-un").stdout.strip(), "corral")
        compilers = in_image(ds.IMAGE, "sh", "-c", "command -v c++ g++ gcc cc cmake", check=False)
        self.assertEqual(compilers.stdout.strip(), "", "the runtime stage must hold no build tools")
        # The state directory belongs to the service's user.
        self.assertEqual(in_image(ds.IMAGE, "stat", "-c", "%u %a", "/var/lib/corral").stdout.strip(), "10001 750")

    def test_the_sandbox_host_image_starts_as_root_with_the_tools_tasks_run(self):
        self.assertEqual(in_image(ds.SANDBOX_HOST_IMAGE, "id", "-u").stdout.strip(), "0")
        for tool in ("python3", "bash", "patch", "diff", "ps"):
            with self.subTest(tool=tool):
                in_image(ds.SANDBOX_HOST_IMAGE, "sh", "-c", f"command -v {tool}")
        self.assertIn("corral-sandbox-host", in_image(ds.SANDBOX_HOST_IMAGE, "corral-sandbox-host", "--help").stdout)

    def test_the_entrypoint_drops_to_the_corral_user_with_a_private_copy_of_the_secret(self):
        # As docker-compose starts the control services: root, a secret owned by someone else with mode 600.
        secret = os.path.join(ARGS.logs, "secret")
        with open(secret, "w") as f:
            f.write("a" * 64 + "\n")
        os.chmod(secret, 0o600)
        os.chown(secret, 12345, 12345)
        done = ds.run(["podman", "run", "--rm", "--network", "none", "--user", "0:0",
                       "-e", "CORRAL_DROP_PRIVILEGES=1", "-e", "CORRAL_SECRET_SOURCE=/run/secrets/s",
                       "-v", f"{secret}:/run/secrets/s:ro", ds.IMAGE,
                       "sh", "-c", "id -u; stat -c '%u %a' /run/corral/secret; grep CapEff /proc/self/status"])
        uid, secret_stat, caps = done.stdout.strip().splitlines()
        self.assertEqual(uid, "10001")
        self.assertEqual(secret_stat, "10001 600")
        self.assertEqual(caps.split()[1], "0000000000000000")  # no capability left

    def test_the_prometheus_image_has_promtool(self):
        done = ds.run(["podman", "run", "--rm", "--network", "none", "--entrypoint", "promtool", ds.PROMETHEUS_IMAGE,
                       "--version"], timeout=60)
        self.assertIn("promtool, version", done.stdout + done.stderr)


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--repo", required=True)
    parser.add_argument("--logs", default=os.path.join(os.getcwd(), "deploy-logs"))
    ARGS, rest = parser.parse_known_args()
    os.makedirs(ARGS.logs, exist_ok=True)
    ds.ready_podman_or_skip(ARGS.repo)
    unittest.main(argv=[sys.argv[0], "-v"] + rest)


if __name__ == "__main__":
    main()
