#!/usr/bin/env python3
"""Attacks from inside a sandbox made from an OCI image, where the sandbox's processes are root (in their own user
namespace): each is a shell command that must fail. Mounting and unmounting (also after unshare), pivot_root,
sysctls and /proc/sysrq-trigger, sysfs and cgroupfs, device nodes, ids the namespace does not map, the host's
processes, clock, hostname and hard limits, and the host's loopback network; the root is nosuid,nodev and the
host's files are out of reach. A control command that must succeed proves the script runs. The image is the
debootstrap base podman-ready makes (podman save); everything runs on a real corral-sandbox-host.

    python3 attack_test.py --bin BUILD/bin --repo REPO
"""
import json
import os
import socket
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "deploy"))
import deploy_support as ds  # noqa: E402
from services import ClusterTestCase, image_test_main  # noqa: E402

ARGS = None

# name -> a command that succeeds only if the attack works. Run as root inside the image sandbox.
ATTACKS = {
    "mount a tmpfs": "mount -t tmpfs none /mnt",
    "unmount /proc": "umount /proc",
    "lazily unmount /": "umount -l /",
    "mount after unsharing a mount namespace": "unshare -m sh -c 'mount -t tmpfs none /mnt'",
    "pivot_root after unsharing": "mkdir -p /tmp/nr && unshare -m pivot_root /tmp/nr /tmp/nr",
    "mount sysfs": "mkdir -p /tmp/sys && mount -t sysfs sysfs /tmp/sys",
    "mount cgroup2": "mkdir -p /tmp/cg && mount -t cgroup2 none /tmp/cg",
    "write a sysctl": "echo corral-evil > /proc/sys/kernel/hostname",
    "write /proc/sysrq-trigger": "echo h > /proc/sysrq-trigger",
    "make a block device": "mknod /tmp/sda b 8 0",
    "make /dev/mem": "mknod /tmp/mem c 1 1",
    "give a file to an unmapped uid": "touch /tmp/f && chown 1000 /tmp/f",
    "signal the host's init": "kill -0 1",
    "read the host's init's root": "ls /proc/1/root/",
    "set the clock": "date -s '2000-01-01 00:00:00'",
    "set the hostname": "hostname corral-evil",
    "raise a hard limit": "ulimit -Hn 1048576",
    "reach the host's loopback": "bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}'",
    "find the host's files": "test -e /work || test -e /var/lib/corral || test -e {host_dir}",
    "a root mounted without nosuid": "grep -E ' / / ' /proc/self/mountinfo | grep -vq nosuid",
}
CONTROL = "echo ok > /etc/corral-control && cat /etc/corral-control && id -u"


class Attacks(ClusterTestCase):
    prefix = "corral-attack-"

    @classmethod
    def set_up_cluster(cls):
        archive = os.path.join(cls.dir, "debian.oci.tar")
        ds.run(["podman", "save", "--format", "oci-archive", "-o", archive, ds.BASE_IMAGE], timeout=600)
        cls.host = cls.services.start("sandbox-host", [
            "corral-sandbox-host", "--grpc-listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0",
            f"--root={cls.dir}/sandboxes"])["grpc"]
        cls.corral("image", "import", archive, "--ref", "localhost/debian:attack")
        out = cls.corral("sandbox", "create", "--image", "localhost/debian:attack", "--network", "none").stdout
        cls.sandbox = out.split()[0]

    @classmethod
    def corral(cls, group, command, *args, check=True):
        return ds.run([os.path.join(ARGS.bin, "corral"), group, command, "--host", cls.host, "--secret-file",
                       cls.secret, *args], check=check, timeout=120)

    def sh(self, script, check=False):
        return self.corral("sandbox", "exec", self.sandbox, "--", "sh", "-c", script, check=check)

    def test_the_control_runs_as_root_inside(self):
        self.assertEqual(self.sh(CONTROL, check=True).stdout.split(), ["ok", "0"])

    def test_every_attack_fails(self):
        # The loopback listener a sandbox with network none must not reach (the host's network namespace).
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        escaped = []
        try:
            for name, command in ATTACKS.items():
                done = self.sh(command.format(port=port, host_dir=self.dir) + " 2>&1; echo rc=$?")
                self.assertIn("rc=", done.stdout, f"{name}: the shell did not run: {done.stderr}")
                ds.log(f"{name}: {' '.join(done.stdout.split())[-160:]}")
                if done.stdout.strip().endswith("rc=0"):
                    escaped.append(name)
        finally:
            listener.close()
        self.assertEqual(escaped, [], "attacks that worked from inside the image sandbox")
        # After all that the sandbox still works and still sees only its own root.
        self.assertEqual(self.sh(CONTROL, check=True).stdout.split(), ["ok", "0"])
        info = json.loads(self.corral("sandbox", "info", self.sandbox).stdout)
        self.assertTrue(info["protections"]["userNamespace"])
        self.assertGreaterEqual(info["protections"]["landlockAbi"], 1)


def main():
    image_test_main(failfast=False)


if __name__ == "__main__":
    main()
