#!/usr/bin/env python3
"""OCI images on a real corral-sandbox-host, from the shell: an oci-archive written by podman (the base image
podman-ready makes with debootstrap) imported with `corral image import`, listed, kept across a restart of the
host, run as a sandbox (root inside a user namespace, the pool uid outside), removed with its layers; a tampered
archive refused with nothing kept.

    python3 import_test.py --bin BUILD/bin --repo REPO
"""
import io
import json
import os
import subprocess
import sys
import tarfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "deploy"))
import deploy_support as ds  # noqa: E402
from services import ClusterTestCase, image_test_main  # noqa: E402

ARGS = None


class ImageImport(ClusterTestCase):
    prefix = "corral-images-"

    @classmethod
    def set_up_cluster(cls):
        cls.archive = os.path.join(cls.dir, "debian.oci.tar")
        ds.run(["podman", "save", "--format", "oci-archive", "-o", cls.archive, ds.BASE_IMAGE], timeout=600)
        with tarfile.open(cls.archive) as t:
            index = json.load(t.extractfile("index.json"))
        cls.digest = index["manifests"][0]["digest"]
        cls.root = os.path.join(cls.dir, "sandboxes")
        cls.start_host()

    @classmethod
    def start_host(cls):
        cls.host = cls.services.start("sandbox-host", ["corral-sandbox-host", "--grpc-listen=127.0.0.1:0",
                                                       "--metrics-listen=127.0.0.1:0", f"--root={cls.root}"])["grpc"]

    @classmethod
    def stop_host(cls):
        cls.services.stop("sandbox-host")

    def corral(self, *args, check=True):
        return ds.run([os.path.join(ARGS.bin, "corral"), "image", *args, "--host", self.host,
                       "--secret-file", self.secret], check=check, timeout=600)

    def layers(self):
        path = os.path.join(self.root, "images", "layers")
        return sorted(n for n in os.listdir(path) if not n.endswith(".size"))

    def test_2_a_podman_archive_is_imported_listed_and_kept_across_a_restart(self):
        start = time.time()
        out = self.corral("import", self.archive, "--ref", "localhost/debian:bookworm").stdout
        ds.log(f"imported in {time.time() - start:.1f}s: {out.strip()}")
        self.assertTrue(out.startswith(self.digest + " localhost/debian:bookworm "), out)
        self.assertEqual(len(self.layers()), 1)
        layer = os.path.join(self.root, "images", "layers", self.layers()[0])
        self.assertTrue(os.path.isfile(os.path.join(layer, "etc", "debian_version")))
        self.assertTrue(os.path.islink(os.path.join(layer, "bin")) or os.path.isdir(os.path.join(layer, "bin")))
        self.assertEqual(os.stat(os.path.join(layer, "etc", "shadow")).st_uid, 0)  # owners kept: root's files
        listing = self.corral("ls").stdout
        self.assertIn(self.digest[:19], listing)
        self.assertIn("localhost/debian:bookworm", listing)
        # Imported again under a second name: nothing unpacked twice, both names kept.
        self.corral("import", self.archive, "--ref", "localhost/debian:12")
        self.assertEqual(len(self.layers()), 1)
        self.stop_host()
        self.start_host()
        listing = self.corral("ls").stdout
        self.assertIn("localhost/debian:bookworm,localhost/debian:12", listing)

    def test_1_a_tampered_archive_is_refused_and_nothing_is_kept(self):
        # First, on an empty store: a blob the store already holds is not read again (its name is its content),
        # so a tampered copy of it could only ever be ignored.
        tampered = os.path.join(self.dir, "tampered.tar")
        with tarfile.open(self.archive) as src, tarfile.open(tampered, "w") as dst:
            for member in src.getmembers():
                data = src.extractfile(member).read() if member.isfile() else None
                if data is not None and member.name.startswith("blobs/") and member.size > 1_000_000:
                    data = data[:-1] + bytes([data[-1] ^ 1])  # one bit of the layer flipped
                dst.addfile(member, None if data is None else io.BytesIO(data))
        before = self.layers()
        done = self.corral("import", tampered, "--ref", "localhost/tampered", check=False)
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("INVALID_ARGUMENT", done.stderr)
        self.assertIn("has content sha256:", done.stderr)
        self.assertEqual(self.layers(), before)
        self.assertEqual(before, [])
        self.assertNotIn("localhost/tampered", self.corral("ls").stdout)

    def sandbox(self, command, *args, check=True):
        return ds.run([os.path.join(ARGS.bin, "corral"), "sandbox", command, "--host", self.host,
                       "--secret-file", self.secret, *args], check=check, timeout=120)

    def test_2b_a_sandbox_runs_in_the_image_as_root_inside_and_its_pool_uid_outside(self):
        start = time.time()
        sandbox_id = self.sandbox("create", "--image", "localhost/debian:bookworm", "--network", "none",
                                  "--task-path", "/workspace").stdout.split()[0]
        ds.log(f"sandbox from the image created in {time.time() - start:.2f}s")

        def sh(script):
            return self.sandbox("exec", sandbox_id, "--", "sh", "-c", script).stdout

        self.assertTrue(sh("cat /etc/debian_version").startswith("12."))
        self.assertEqual(sh("id -u; id -g; pwd; echo $HOME").split(), ["0", "0", "/root", "/root"])
        # The root is the image's: the host's python3 (the test runs on it) is not there.
        self.assertEqual(sh("command -v python3 || echo none").strip(), "none")
        self.assertEqual(sh("echo hi > /etc/written; cat /etc/written; ls -ld /workspace | cut -c1-10").split(),
                         ["hi", "drwxr-xr-x"])
        info = json.loads(self.sandbox("info", sandbox_id).stdout)
        self.assertEqual(info["imageDigest"], self.digest)
        self.assertTrue(info["protections"]["userNamespace"])
        self.assertTrue(info["protections"]["networkNamespace"])
        self.assertEqual(info["home"], "/root")
        # Outside, the write is the sandbox's pool uid's, in its own upper layer (a 1 GiB tmpfs by default, seen
        # through one of its processes: it is in no host mount), and the image's layer is untouched.
        self.assertEqual(int(info["protections"]["diskQuotaBytes"]), 1 << 30)
        self.assertEqual(os.listdir(os.path.join(self.root, "homes", sandbox_id, "rw")), [])
        sh("setsid sleep 60 </dev/null >/dev/null 2>&1 &")
        sleeper = ds.wait_until("the sandbox's sleep", lambda: subprocess.run(
            ["pgrep", "-u", str(info["uid"]), "-x", "sleep"], capture_output=True, text=True).stdout.split(),
            timeout=10, interval=0.05)
        self.assertEqual(len(sleeper), 1)
        self.assertEqual(os.stat(f"/proc/{sleeper[0]}/root/etc/written").st_uid, info["uid"])
        layer = os.path.join(self.root, "images", "layers", self.layers()[0])
        self.assertFalse(os.path.exists(os.path.join(layer, "etc", "written")))
        # The files API sees the same root: an image file (root's inside) read, a file written and run.
        local = os.path.join(self.dir, "os-release")
        self.sandbox("cp", f"{sandbox_id}:/usr/lib/os-release", local)  # /etc/os-release links to it
        with open(local) as f:
            self.assertIn("bookworm", f.read())
        script = os.path.join(self.dir, "run.sh")
        with open(script, "w") as f:
            f.write("echo from-the-api\n")
        self.sandbox("cp", script, f"{sandbox_id}:/workspace/run.sh")
        self.assertEqual(sh("sh /workspace/run.sh").strip(), "from-the-api")
        # An image in use cannot be removed.
        done = self.corral("rm", "localhost/debian:bookworm", check=False)
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("in use by 1 sandbox", done.stderr)
        self.sandbox("rm", sandbox_id)
        self.assertFalse(os.path.exists(os.path.join(self.root, "homes", sandbox_id)))

    @staticmethod
    def running_as(uid):
        """pids of `uid` that still run (a killed process whose new parent has not reaped it yet is a zombie: it
        runs nothing)."""
        pids = subprocess.run(["pgrep", "-u", uid], capture_output=True, text=True).stdout.split()
        running = []
        for pid in pids:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                        running.append(pid)
            except FileNotFoundError:
                pass
        return running

    def test_2c_a_host_killed_with_an_image_sandbox_leaves_nothing_once_restarted(self):
        sandbox_id = self.sandbox("create", "--image", "localhost/debian:bookworm", "--network", "none",
                                  "--task-path", "/workspace").stdout.split()[0]
        info = json.loads(self.sandbox("info", sandbox_id).stdout)
        uid = str(info["uid"])
        # An escaped process and a write in its upper layer; then the host dies without tearing anything down.
        self.sandbox("exec", sandbox_id, "--", "sh", "-c", "echo x > /etc/left; setsid sleep 300 </dev/null >/dev/null 2>&1 &")
        ds.wait_until("the sandbox's sleep", lambda: subprocess.run(["pgrep", "-u", uid, "-x", "sleep"],
                                                                    capture_output=True, text=True).stdout.split(),
                      timeout=10, interval=0.05)
        self.services.kill("sandbox-host")
        self.assertTrue(os.path.exists(os.path.join(self.root, "homes", sandbox_id)))
        self.start_host()
        self.assertIn("removed what a previous run left of 1 sandbox(es)", self.services.log("sandbox-host"))
        self.assertEqual(self.running_as(uid), [])
        self.assertEqual(os.listdir(os.path.join(self.root, "homes")), [])
        self.assertNotIn(sandbox_id, self.sandbox("ls").stdout)
        # The image is kept (its layers are the store's, not the sandbox's) and runs again.
        again = self.sandbox("create", "--image", "localhost/debian:bookworm", "--network", "none").stdout.split()[0]
        self.sandbox("rm", again)

    def test_2d_an_image_sandbox_forks_into_children_that_keep_the_images_view(self):
        parent = self.sandbox("create", "--image", "localhost/debian:bookworm", "--network", "none").stdout.split()[0]

        def sh(sandbox_id, script):
            return self.sandbox("exec", sandbox_id, "--", "sh", "-c", script).stdout

        sh(parent, "echo parent > /etc/forked; rm /etc/issue; echo t > /tmp/ptmp; mkdir -p /srv/data; "
                   "head -c 1048576 /dev/urandom > /srv/data/blob; chmod 600 /srv/data/blob")
        parent_uid = json.loads(self.sandbox("info", parent).stdout)["uid"]
        start = time.time()
        children = [line.split()[0] for line in self.sandbox("fork", parent, "--count", "2").stdout.splitlines()]
        ds.log(f"2 children of an image sandbox forked in {time.time() - start:.2f}s")
        self.assertEqual(len(children), 2)
        blob = sh(parent, "md5sum < /srv/data/blob | cut -c1-32").split()[0]
        for child in children:
            info = json.loads(self.sandbox("info", child).stdout)
            self.assertEqual(info["forkedFrom"], parent)
            self.assertEqual(info["imageDigest"], self.digest)
            self.assertNotEqual(info["uid"], parent_uid)
            # The image's files and the parent's writes (a removal included), root inside, its own pool uid
            # outside; a copy of the parent's /tmp; the 0600 file is its own.
            self.assertEqual(sh(child, "cat /etc/forked; cat /etc/debian_version | cut -c1-3; "
                                       "test -e /etc/issue || echo no-issue; cat /tmp/ptmp; "
                                       "id -u; md5sum < /srv/data/blob | cut -c1-32").split(),
                             ["parent", "12.", "no-issue", "t", "0", blob])
            sh(child, f"echo {child} >> /etc/forked; echo mine > /srv/data/{child}")
        # Neither sees the other's writes, nor the parent theirs; the parent keeps its /tmp.
        self.assertEqual(sh(children[0], "cat /etc/forked; ls /srv/data").split(), ["parent", children[0], "blob",
                                                                                     children[0]])
        self.assertEqual(sh(parent, "cat /etc/forked; cat /tmp/ptmp; ls /srv/data").split(), ["parent", "t", "blob"])
        self.assertEqual(len(os.listdir(os.path.join(self.root, "forks"))), 1)
        # The parent goes first; the children stay whole; the layer goes with the last of them.
        self.sandbox("rm", parent)
        self.assertEqual(sh(children[1], "cat /etc/forked").split(), ["parent", children[1]])
        for child in children:
            self.sandbox("rm", child)
        self.assertEqual(os.listdir(os.path.join(self.root, "forks")), [])
        self.assertEqual(os.listdir(os.path.join(self.root, "homes")), [])
        with open("/proc/self/mountinfo") as f:
            self.assertNotIn(self.root, f.read())

    def test_2e_a_host_killed_with_forked_image_sandboxes_leaves_nothing_once_restarted(self):
        parent = self.sandbox("create", "--image", "localhost/debian:bookworm", "--network", "none").stdout.split()[0]
        self.sandbox("exec", parent, "--", "sh", "-c", "echo x > /etc/frozen")
        children = [line.split()[0] for line in self.sandbox("fork", parent, "--count", "3").stdout.splitlines()]
        self.assertEqual(len(children), 3)
        uids = [str(json.loads(self.sandbox("info", sb).stdout)["uid"]) for sb in [parent] + children]
        self.sandbox("exec", children[0], "--", "sh", "-c", "setsid sleep 300 </dev/null >/dev/null 2>&1 &")
        self.assertEqual(len(os.listdir(os.path.join(self.root, "forks"))), 1)
        self.services.kill("sandbox-host")  # the holder namespace dies with it
        self.start_host()
        for uid in uids:
            self.assertEqual(self.running_as(uid), [], uid)
        self.assertEqual(os.listdir(os.path.join(self.root, "forks")), [])
        self.assertEqual(os.listdir(os.path.join(self.root, "homes")), [])
        for pid in os.listdir("/proc"):  # no namespace left holds a mount of the host's root
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/mountinfo") as f:
                    self.assertNotIn(os.path.join(self.root, "forks"), f.read(), pid)
            except OSError:  # gone, or going, meanwhile
                pass
        # It forks again.
        again = self.sandbox("create", "--image", "localhost/debian:bookworm", "--network", "none").stdout.split()[0]
        child = self.sandbox("fork", again).stdout.split()[0]
        for sb in (child, again):
            self.sandbox("rm", sb)

    def test_3_removing_the_image_removes_its_layers(self):
        self.corral("rm", "localhost/debian:bookworm")  # by either name: the image goes
        self.assertNotIn(self.digest[:19], self.corral("ls").stdout)
        self.assertEqual(self.layers(), [])
        done = self.corral("rm", "localhost/debian:12", check=False)
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("NOT_FOUND", done.stderr)


def main():
    image_test_main()


if __name__ == "__main__":
    main()
