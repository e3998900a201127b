#!/usr/bin/env python3
"""Builds Corral's container images with deploy/docker/*.Dockerfile as a user would (podman here, Docker
elsewhere), then checks what they hold: every binary runs (its runtime libraries are all there), the control
services' image runs as uid 10001 and carries no compiler, the sandbox host's image starts as root with the
tools sandboxed tasks run.

The images package the binaries the test run already built (--build-arg BINARIES=prebuilt, a context made by
deploy/docker/prebuilt-context): compiling the whole tree again inside the build stage took 13 of a cold run's
40 minutes, and proved only that the same compiler compiles the same tree. The source path (the default,
BINARIES=build, what release builds use) is checked without compiling: both paths must hand the runtime stages
the same binaries (test_both_paths_package_the_same_binaries). CORRAL_DEPLOY_FROM_SOURCE=1 builds from source
as before (its build stage then shares this machine's ccache through a --volume).

    python3 images_test.py --repo REPO --build-dir BUILD
"""
import argparse
import os
import re
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploy_support as ds  # noqa: E402

ARGS = None
BINARIES = ["corral", "corral-scheduler", "corral-proxy", "corral-ratelimiter", "corral-sandbox-host",
            "corral-fake-llm", "corral-sandbox-api"]


def build(target_args, tag, log_name, context=None):
    """podman build from `context` (default the repository's root), its output in a log file; raises with the log's
    tail on failure."""
    cmd = ["podman", "build", "--network", "host", "--layers", "-t", tag, *target_args, context or ARGS.repo]
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


def from_source():
    return os.environ.get("CORRAL_DEPLOY_FROM_SOURCE", "") not in ("", "0")


def image_source():
    """The build arguments and context of the images: the binaries this run built, or the tree to compile."""
    if from_source():  # (podman's builder needs BINARIES spelled out to build the stage a FROM names by it)
        return ["--build-arg", "BINARIES=build", *ccache_volume()], ARGS.repo
    context = os.path.join(ARGS.logs, "prebuilt-context")
    ds.run([os.path.join(ARGS.repo, "deploy", "docker", "prebuilt-context"), ARGS.build_dir, context], timeout=300)
    return ["--build-arg", "BINARIES=prebuilt"], context


def dockerfile_targets(dockerfile):
    """What the Dockerfile's build stage compiles (its ninja targets) and what prebuilt-context packages."""
    with open(dockerfile) as f:
        text = f.read().replace("\\\n", " ")
    ninja = re.search(r"ninja -C build \$\{JOBS[^}]*\} ([^&]+)&&", text)
    with open(os.path.join(ARGS.repo, "deploy", "docker", "prebuilt-context")) as f:
        packaged = re.search(r"^binaries=\(([^)]*)\)", f.read(), re.M)
    return ninja.group(1).split() if ninja else [], packaged.group(1).split() if packaged else []


class Images(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        dockerfile = os.path.join(ARGS.repo, "deploy", "docker", "Dockerfile")
        args, context = image_source()
        for target, tag in (("corral", ds.IMAGE), ("corral-sandbox-host", ds.SANDBOX_HOST_IMAGE)):
            log = build(["-f", dockerfile, "--target", target, *args], tag, f"{target}.log", context)
            # The source path compiles in the build stage; the prebuilt one must not (no build stage ran at all).
            if not from_source():
                assert "cmake -S . -B build" not in log, f"{tag}: the prebuilt build ran the compile stage:\n{log}"
        build(["-f", os.path.join(ARGS.repo, "deploy", "docker", "prometheus.Dockerfile")], ds.PROMETHEUS_IMAGE,
              "prometheus.log")
        sizes = ds.run(["podman", "images", "--format", "{{.Repository}}:{{.Tag}} {{.Size}}", "--filter",
                        "reference=localhost/*"], quiet=True).stdout
        ds.log("image sizes:\n" + sizes)

    def test_both_paths_package_the_same_binaries(self):
        compiled, packaged = dockerfile_targets(os.path.join(ARGS.repo, "deploy", "docker", "Dockerfile"))
        self.assertEqual(sorted(compiled), sorted(BINARIES))
        self.assertEqual(sorted(packaged), sorted(BINARIES))
        # Both hand the runtime stages the same two things, through the one `binaries` stage.
        with open(os.path.join(ARGS.repo, "deploy", "docker", "Dockerfile")) as f:
            text = f.read()
        self.assertIn("FROM ${BINARIES} AS binaries", text)
        self.assertEqual(text.count("COPY --from=binaries"), 2)
        self.assertNotIn("COPY --from=build ", text)

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
    parser.add_argument("--build-dir", default=os.path.join(os.getcwd()),
                        help="the build tree whose bin/ the images package")
    ARGS, rest = parser.parse_known_args()
    os.makedirs(ARGS.logs, exist_ok=True)
    ds.ready_podman_or_skip(ARGS.repo)
    unittest.main(argv=[sys.argv[0], "-v"] + rest)


if __name__ == "__main__":
    main()
