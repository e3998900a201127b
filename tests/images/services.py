"""Corral's binaries as processes for the image tests: each started with a ready file, waited on (never slept
on), stopped with SIGTERM; logs kept in the test's directory."""
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest


def scratch(prefix):
    """A directory for one test class (under /var/tmp, searchable by the sandboxes' uids: the host refuses a
    root below /tmp) holding a new cluster secret. Returns (directory, secret file)."""
    work_dir = tempfile.mkdtemp(prefix=prefix, dir="/var/tmp")
    os.chmod(work_dir, 0o711)
    secret = os.path.join(work_dir, "secret")
    with open(secret, "w") as f:
        f.write(os.urandom(32).hex() + "\n")
    os.chmod(secret, 0o600)
    return work_dir, secret


class UidBlock:
    """A block of uids for one test's sandbox host, reserved the way tests/support/uid_range.h does (an flock on
    /var/tmp/corral-test-uids-FIRST.lock; range 29000-29999 in blocks of 100): sandbox hosts kill every process of
    their uids, so two tests running at once must never share one."""

    def __init__(self, first=29000, last=29999, size=100):
        for base in range(first, last + 1 - size + 1, size):
            fd = os.open(f"/var/tmp/corral-test-uids-{base}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            self.fd, self.first, self.last = fd, base, base + size - 1
            return
        raise AssertionError(f"no free block of {size} uids in [{first}, {last}]")

    def flags(self):
        return [f"--uid-first={self.first}", f"--uid-last={self.last}"]


class Services:
    def __init__(self, bin_dir, work_dir, secret_file):
        self.bin_dir, self.dir, self.secret = os.path.abspath(bin_dir), work_dir, secret_file
        self.procs, self.logs = {}, {}
        self.uids = UidBlock()  # held as long as these services live

    def start(self, name, argv, secret=True, timeout=60, env=None):
        """Starts BIN/argv[0] with `argv[1:]`, a ready file and (with `secret`) the cluster secret, in `env` (default:
        this process's); returns the ready file's content (its listen addresses) once it is written."""
        ready = os.path.join(self.dir, name + ".ready.json")
        if os.path.exists(ready):
            os.unlink(ready)
        argv = [os.path.join(self.bin_dir, argv[0])] + argv[1:] + [f"--ready-file={ready}"]
        if argv[0].endswith("corral-sandbox-host"):
            argv += self.uids.flags()
        if secret:
            argv.append(f"--secret-file={self.secret}")
        log_path = os.path.join(self.dir, name + ".log")
        self.logs[name] = open(log_path, "a")
        proc = subprocess.Popen(argv, stdout=self.logs[name], stderr=subprocess.STDOUT, env=env, cwd=self.dir)
        self.procs[name] = proc
        deadline = time.time() + timeout
        while not (os.path.exists(ready) and os.path.getsize(ready) > 0):
            if proc.poll() is not None or time.time() > deadline:
                with open(log_path) as f:
                    raise AssertionError(f"{name} did not start ({proc.returncode}):\n{f.read()[-3000:]}")
            time.sleep(0.05)
        with open(ready) as f:
            return json.load(f)

    def stop(self, name):
        proc = self.procs.pop(name, None)
        if proc is None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        self.logs.pop(name).close()

    def kill(self, name):
        """SIGKILLs a service (a crash: nothing of its shutdown runs)."""
        proc = self.procs.pop(name)
        proc.kill()
        proc.wait()
        self.logs.pop(name).close()

    def log(self, name):
        with open(os.path.join(self.dir, name + ".log")) as f:
            return f.read()

    def stop_all(self):
        for name in reversed(list(self.procs)):
            self.stop(name)


class ClusterTestCase(unittest.TestCase):
    """A test class with a scratch directory, a cluster secret and Services, torn down however setUp ends. Set
    `bin_dir` before unittest runs; subclasses set `prefix` and start what they need in `set_up_cluster`."""
    bin_dir = None
    prefix = "corral-test-"

    @classmethod
    def setUpClass(cls):
        cls.dir, cls.secret = scratch(cls.prefix)
        cls.services = Services(cls.bin_dir, cls.dir, cls.secret)
        try:
            cls.set_up_cluster()
        except BaseException:
            cls.tearDownClass()  # unittest does not call it when setUpClass fails
            raise

    @classmethod
    def set_up_cluster(cls):
        pass

    @classmethod
    def host_with_base_image(cls, ref, *host_flags):
        """A corral-sandbox-host (root in the scratch directory, `host_flags` added) holding the debootstrap base
        image podman-ready made, imported as `ref`; returns the host's gRPC address."""
        import deploy_support as ds
        archive = os.path.join(cls.dir, "debian.oci.tar")
        ds.run(["podman", "save", "--format", "oci-archive", "-o", archive, ds.BASE_IMAGE], timeout=600)
        host = cls.services.start("sandbox-host", [
            "corral-sandbox-host", "--grpc-listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0",
            f"--root={cls.dir}/sandboxes", *host_flags])["grpc"]
        ds.run([os.path.join(cls.bin_dir, "corral"), "image", "import", archive, "--ref", ref, "--host", host,
                "--secret-file", cls.secret], timeout=300)
        return host

    @classmethod
    def tearDownClass(cls):
        cls.services.stop_all()
        shutil.rmtree(cls.dir, ignore_errors=True)


def image_test_main(failfast=True):
    """The main of an image test script: --bin and --repo parsed (skipping, exit 77, where containers or image
    layers cannot be), the script's ARGS set, then its tests run."""
    import __main__
    import deploy_support as ds  # the scripts put tests/deploy on sys.path before importing this module
    args, rest = ds.args_or_skip(needs_layer_store=True)
    __main__.ARGS = args
    ClusterTestCase.bin_dir = args.bin
    unittest.main(argv=[sys.argv[0], "-v"] + (["-f"] if failfast else []) + rest)
