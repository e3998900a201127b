#!/usr/bin/env python3
"""Attacks from inside a sandbox made from an OCI image, where the sandbox's processes are root (in their own user
namespace, with every id of 0-65535 one of the sandbox's own block): each is a shell command that must fail.
Mounting and unmounting (also after unshare), pivot_root, sysctls and /proc/sysrq-trigger, sysfs and cgroupfs,
device nodes, ids beyond the block, the host's
processes, clock, hostname and hard limits, and the host's loopback network; the root is nosuid,nodev and the
host's files are out of reach. A control command that must succeed proves the script runs. Then the host's own
attack suite (tests/integration/sandbox_host_test.cc) replayed against image sandboxes: a neighbour's processes,
environment and files, the host's abstract sockets; filling the root, /tmp and /dev/shm past the disk quota;
setsid escapees outliving a delete. The image is the debootstrap base podman-ready makes (podman save); everything
runs on a real corral-sandbox-host.

    python3 attack_test.py --bin BUILD/bin --repo REPO
"""
import json
import os
import signal
import socket
import subprocess
import sys
import time

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
    "give a file to an id beyond the sandbox's block": "touch /tmp/f && chown 65536 /tmp/f",
    "become an id beyond the sandbox's block": "perl -e '$< = $> = 70000; exit($> == 70000 ? 0 : 1)'",
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
DISK = 16 << 20  # the host's default_disk_bytes here: what each image sandbox may write
# Appends 1 MiB blocks to $1 until a write fails or 64 MiB are written; prints how many MiB it wrote.
FILL = ("n=0; while [ $n -lt 64 ] && head -c 1048576 /dev/zero >> $1 2>/dev/null; do n=$((n+1)); done; "
        "echo $n; rm -f $1")


class Attacks(ClusterTestCase):
    prefix = "corral-attack-"

    @classmethod
    def set_up_cluster(cls):
        cls.host = cls.host_with_base_image("localhost/debian:attack", f"--default-disk-bytes={DISK}")
        cls.sandbox = cls.create()

    @classmethod
    def create(cls):
        out = cls.corral("sandbox", "create", "--image", "localhost/debian:attack", "--network", "none").stdout
        return out.split()[0]

    @classmethod
    def corral(cls, group, command, *args, check=True):
        return ds.run([os.path.join(ARGS.bin, "corral"), group, command, "--host", cls.host, "--secret-file",
                       cls.secret, *args], check=check, timeout=120)

    def sh(self, script, check=False, sandbox=None, user=None):
        as_user = ["--user", user] if user else []
        return self.corral("sandbox", "exec", sandbox or self.sandbox, *as_user, "--", "sh", "-c", script,
                           check=check)

    def info(self, sandbox):
        return json.loads(self.corral("sandbox", "info", sandbox).stdout)

    @staticmethod
    def live_processes(uid):
        """Processes of `uid` that still run (zombies, which the host reaps a few seconds later, do not)."""
        pids = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/status") as f:
                    fields = dict(line.split(":", 1) for line in f if ":" in line)
            except OSError:
                continue
            if int(fields["Uid"].split()[0]) == uid and fields["State"].split()[0] not in ("Z", "X"):
                pids.append(pid)
        return pids

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

    def test_root_adds_a_user_who_runs_as_an_id_of_the_sandboxs_own_block(self):
        sandbox = self.create()
        info = self.info(sandbox)
        self.assertTrue(info["protections"]["userIds"])
        block = info["uid"] << 16
        # As root (named, as Harbor and slime name it): a user, its home, a file given to it, su to it.
        done = self.sh("useradd -m -u 1000 agent && echo hi > /home/agent/f && chown agent:agent /home/agent/f && "
                       "chmod 600 /home/agent/f && su agent -c 'id -u; cat /home/agent/f' && id -u", check=True,
                       sandbox=sandbox, user="root")
        self.assertEqual(done.stdout.split(), ["1000", "hi", "0"], done.stderr)
        # The new user by name (the sandbox's /etc/passwd as it is now): its files are its own, root's are not.
        done = self.sh("id -u; echo $HOME; cat /home/agent/f; cat /etc/corral-control 2>/dev/null; "
                       "touch /etc/agent-was-here 2>/dev/null || echo etc-denied; sleep 60 >/dev/null 2>&1 & echo $!", sandbox=sandbox,
                       user="agent")
        out = done.stdout.split()
        self.assertEqual(out[:4], ["1000", "/home/agent", "hi", "etc-denied"], done.stdout + done.stderr)
        # Outside, its process is an id of the block, and the host's files keep their owners.
        with open(f"/proc/{out[-1]}/status") as f:
            uids = next(line for line in f if line.startswith("Uid:")).split()[1:]
        self.assertEqual(int(uids[0]), block + 1000)
        owner = os.stat(os.path.join(self.dir, "sandboxes", "homes", sandbox)).st_uid
        self.assertNotIn(owner, range(block, block + 65536))
        # The agent cannot become root again (no setuid binaries work: the root is nosuid).
        done = self.sh("su -c 'id -u' root </dev/null 2>&1; echo rc=$?", sandbox=sandbox, user="agent")
        self.assertNotIn("\n0\n", "\n" + done.stdout, done.stdout)
        self.assertNotEqual(done.stdout.strip().split("rc=")[-1], "0", done.stdout)
        # A user the sandbox does not define is refused, and a delete kills the block's processes too.
        refused = self.sh("true", sandbox=sandbox, user="nobody-here")
        self.assertNotEqual(refused.returncode, 0)
        self.assertIn("not in its /etc/passwd", refused.stderr)
        # A fork's child has the user and its files, as ids of the child's own block, and a copy of /tmp.
        os.kill(int(out[-1]), signal.SIGKILL)  # (another exec's process: Landlock scopes signals to one exec)
        self.sh("echo mine > /tmp/agent-tmp", check=True, sandbox=sandbox, user="agent")
        self.sh("echo rooted > /tmp/root-tmp", check=True, sandbox=sandbox, user="root")
        child = self.corral("sandbox", "fork", sandbox, "--wait", "20").stdout.split()[0]
        done = self.sh("stat -c %U /tmp/agent-tmp /tmp/root-tmp; cat /tmp/agent-tmp /tmp/root-tmp", check=True,
                       sandbox=child, user="root")
        self.assertEqual(done.stdout.split(), ["agent", "root", "mine", "rooted"], done.stderr)
        child_block = self.info(child)["uid"] << 16
        self.assertNotEqual(child_block, block)
        done = self.sh("stat -c '%U %a' /home/agent/f; cat /home/agent/f; id -un", check=True, sandbox=child,
                       user="agent")
        self.assertEqual(done.stdout.split(), ["agent", "600", "hi", "agent"], done.stderr)
        done = self.sh("sleep 60 >/dev/null 2>&1 & echo $!", check=True, sandbox=child, user="agent")
        with open(f"/proc/{done.stdout.strip()}/status") as f:
            uids = next(line for line in f if line.startswith("Uid:")).split()[1:]
        self.assertEqual(int(uids[0]), child_block + 1000)
        for s in (sandbox, child):
            self.corral("sandbox", "rm", s)
        self.assertEqual(self.live_processes(block + 1000), [])
        self.assertEqual(self.live_processes(child_block + 1000), [])

    def test_a_neighbour_and_the_host_are_out_of_reach(self):
        a, b = self.create(), self.create()
        b_uid, b_home = self.info(b)["uid"], os.path.join(self.dir, "sandboxes", "homes", b)
        victim = subprocess.Popen(
            [os.path.join(ARGS.bin, "corral"), "sandbox", "exec", b, "--host", self.host, "--secret-file",
             self.secret, "--", "sh", "-c", "echo secret > /root/mine; sleep 120; echo survived"],
            stdout=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 20
        while not (pids := subprocess.run(["pgrep", "-u", str(b_uid), "-x", "sleep"], capture_output=True,
                                          text=True).stdout.split()) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertTrue(pids, "the neighbour's command never started")
        abstract = f"corral-attack-{os.getpid()}"
        listener = socket.socket(socket.AF_UNIX)
        listener.bind("\0" + abstract)
        listener.listen(1)
        try:
            done = self.sh(" ; ".join([
                f"kill -9 {pids[0]} 2>/dev/null && echo killed || echo kill-denied",
                f"cat /proc/{pids[0]}/environ >/dev/null 2>&1 && echo environ-read || echo environ-hidden",
                "cat /proc/1/environ 2>/dev/null | grep -q CORRAL && echo host-environ-read || echo host-environ-hidden",
                f"ls {b_home} >/dev/null 2>&1 && echo home-listed || echo home-denied",
                "grep -q secret /root/mine 2>/dev/null && echo neighbour-file-read || echo neighbour-file-absent",
                "perl -MSocket -e 'socket(S, AF_UNIX, SOCK_STREAM, 0) or die; "
                f"connect(S, pack_sockaddr_un(\"\\0{abstract}\")) or exit 1' 2>/dev/null "
                "&& echo abstract-connected || echo abstract-denied",
            ]), sandbox=a)
        finally:
            listener.close()
        self.assertEqual(done.stdout.split(), ["kill-denied", "environ-hidden", "host-environ-hidden", "home-denied",
                                               "neighbour-file-absent", "abstract-denied"], done.stderr)
        # The neighbour's sleep outlived the attack; the test ends it from the host, and its shell goes on.
        self.assertTrue(os.path.exists(f"/proc/{pids[0]}"), "the neighbour's process died during the attack")
        os.kill(int(pids[0]), signal.SIGKILL)
        self.assertEqual(victim.communicate(timeout=60)[0], "survived\n")
        for sandbox in (a, b):
            self.corral("sandbox", "rm", sandbox)

    def test_filling_the_disk_stops_at_the_quota_and_the_neighbour_is_unharmed(self):
        filler, neighbour = self.create(), self.create()
        info = self.info(filler)
        self.assertEqual(int(info["protections"]["diskQuotaBytes"]), DISK)
        self.assertIn("writes up to 16 MiB (tmpfs upper layer)", info["protections"]["containment"])
        for path in ("/fill", "/tmp/fill", "/dev/shm/fill"):
            wrote = int(self.sh(FILL.replace("$1", path), sandbox=filler).stdout.split()[-1])
            ds.log(f"filling {path}: {wrote} MiB written of a {DISK >> 20} MiB quota")
            self.assertGreaterEqual(wrote, 14, path)  # the tmpfs's own bookkeeping takes a little
            self.assertLessEqual(wrote, DISK >> 20, path)
        # None of it reached the host's disk, the filler works again once it removed its files, and the neighbour
        # never noticed.
        self.assertEqual(os.listdir(os.path.join(self.dir, "sandboxes", "homes", filler, "rw")), [])
        self.assertEqual(self.sh(CONTROL, check=True, sandbox=filler).stdout.split(), ["ok", "0"])
        self.assertEqual(self.sh(CONTROL, check=True, sandbox=neighbour).stdout.split(), ["ok", "0"])
        for sandbox in (filler, neighbour):
            self.corral("sandbox", "rm", sandbox)

    def test_a_delete_kills_setsid_escapees(self):
        sandbox = self.create()
        uid = self.info(sandbox)["uid"]
        self.sh("setsid sleep 300 </dev/null >/dev/null 2>&1 & setsid sh -c 'sleep 300' </dev/null >/dev/null 2>&1 &",
                check=True, sandbox=sandbox)
        self.assertGreaterEqual(len(self.live_processes(uid)), 2)
        self.corral("sandbox", "rm", sandbox)
        self.assertEqual(self.live_processes(uid), [])
        self.assertFalse(os.path.exists(os.path.join(self.dir, "sandboxes", "homes", sandbox)))


def main():
    image_test_main(failfast=False)


if __name__ == "__main__":
    main()
