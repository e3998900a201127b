"""What the deploy tests share: podman made ready (scripts/podman-ready), the images they run, commands with
clear failures, free loopback ports, and waiting on health (never on sleeps alone).

The tests skip (exit 77, ctest's SKIP_RETURN_CODE) where real containers cannot run: not root, or podman
cannot start a container here (an unprivileged container, say)."""
import argparse
import os
import shlex
import socket
import subprocess
import sys
import time

SKIP = 77
IMAGE = "localhost/corral:dev"
SANDBOX_HOST_IMAGE = "localhost/corral-sandbox-host:dev"
PROMETHEUS_IMAGE = "localhost/corral-prometheus:dev"
BASE_IMAGE = "docker.io/library/debian:bookworm-slim"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def run(cmd, *, check=True, timeout=600, env=None, cwd=None, quiet=False) -> subprocess.CompletedProcess:
    """Runs `cmd` and returns it done; on failure (when `check`) raises with its output."""
    if not quiet:
        log("$ " + " ".join(shlex.quote(c) for c in cmd))
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
    if check and done.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {done.returncode}\n--- stdout\n{done.stdout[-4000:]}"
                             f"\n--- stderr\n{done.stderr[-4000:]}")
    return done


def podman_ready(repo: str):
    """Installs and configures podman (scripts/podman-ready); returns why containers cannot run here, or None."""
    if os.geteuid() != 0:
        return "the deploy tests run containers as root"
    done = subprocess.run([os.path.join(repo, "scripts", "podman-ready")], capture_output=True, text=True,
                          timeout=1200)
    if done.returncode != 0:
        raise AssertionError("scripts/podman-ready failed:\n" + done.stdout + done.stderr)
    for line in done.stdout.splitlines():
        if line.startswith("export "):
            key, _, value = line[len("export "):].partition("=")
            os.environ[key] = value
    probe = subprocess.run(["podman", "run", "--rm", "--network", "none", BASE_IMAGE, "true"],
                           capture_output=True, text=True, timeout=120)
    if probe.returncode != 0:
        return "podman cannot run a container here: " + probe.stderr.strip()
    return None


def ready_podman_or_skip(repo: str) -> None:
    """podman_ready, exiting SKIP (ctest's SKIP_RETURN_CODE) when containers cannot run here."""
    reason = podman_ready(repo)
    if reason:
        print(f"deploy tests: skipped ({reason})")
        sys.exit(SKIP)


def args_or_skip(needs_layer_store: bool = False):
    """The start of a podman-backed test script: parses --bin and --repo (returned with the arguments left for
    unittest), exiting SKIP where containers cannot run or, with `needs_layer_store`, where /var/tmp is on
    overlayfs (a container's root), which cannot hold image layers."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True)
    parser.add_argument("--repo", required=True)
    args, rest = parser.parse_known_args()
    args.repo = os.path.abspath(args.repo)
    fs_type = subprocess.run(["stat", "-f", "-c", "%T", "/var/tmp"], capture_output=True, text=True).stdout.strip()
    if needs_layer_store and fs_type == "overlayfs":
        print("image tests: skipped (/var/tmp is on overlayfs, which cannot hold image layers: a container's root)")
        sys.exit(SKIP)
    ready_podman_or_skip(args.repo)
    return args, rest


def require_images() -> None:
    for image in (IMAGE, SANDBOX_HOST_IMAGE, PROMETHEUS_IMAGE):
        if subprocess.run(["podman", "image", "exists", image]).returncode != 0:
            raise AssertionError(f"{image} is missing: the Deploy.Images test builds it (ctest -R Deploy)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(what: str, predicate, timeout: float, interval: float = 1.0):
    """Polls `predicate` until it returns something truthy (returned) or `timeout` seconds pass (raises)."""
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            last = predicate()
            if last:
                return last
        except Exception as e:  # noqa: BLE001 - keep polling, report the last error
            last = e
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


def serving(cli: str, address: str) -> bool:
    """`corral health ADDRESS` exits 0: a Corral service answers there and serves."""
    return subprocess.run([cli, "health", address, "--timeout", "2"], capture_output=True, timeout=30).returncode == 0
