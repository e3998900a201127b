#!/usr/bin/env python3
"""Images pulled from a registry by a real corral-sandbox-host (`corral image pull`): Debian's docker-registry on
127.0.0.1 over HTTPS (a private CA) with bearer tokens from a token server (registry.py). An untrusted certificate,
a missing or wrong password, a layer or manifest whose content is not its digest are refused, with nothing kept;
with the CA and the credentials, an image built here with podman (a Python module the host's Python lacks) is
pulled by tag, again without fetching a blob twice, and by digest, and a sandbox runs the image's Python.

    python3 pull_test.py --bin BUILD/bin --repo REPO
"""
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "deploy"))
import deploy_support as ds  # noqa: E402
from registry import Registry, make_tiny_oci_archive, push_oci_archive  # noqa: E402
from services import ClusterTestCase, image_test_main  # noqa: E402

ARGS = None
USER, PASSWORD = "trainer", "s3cret"
# A module Debian packages that the host's Python does not have (checked below): importing it proves the
# sandbox runs the image's Python, not the host's.
MODULE, PACKAGE = "termcolor", "python3-termcolor"
PYTHON_IMAGE = "localhost/corral-pull-python:1"
CONTAINERFILE = (f"FROM {ds.BASE_IMAGE}\nRUN apt-get update -q && apt-get install -y -q --no-install-recommends "
                 f"python3 {PACKAGE} && rm -rf /var/lib/apt/lists/*\n")


class ImagePull(ClusterTestCase):
    prefix = "corral-pull-"

    @classmethod
    def set_up_cluster(cls):
        cls.registry = Registry(os.path.join(cls.dir, "registry"), users={USER: PASSWORD})
        cls.registry.start()
        tiny = os.path.join(cls.dir, "tiny.oci.tar")
        make_tiny_oci_archive(tiny, layers=[{"hello.txt": b"hello from the registry\n"}])
        cls.tiny_digest = push_oci_archive(cls.registry, tiny, "corral/tiny:1", USER, PASSWORD)
        cls.python_archive = cls.build_python_image()
        cls.python_digest = push_oci_archive(cls.registry, cls.python_archive, "corral/python:3", USER, PASSWORD)
        cls.root = os.path.join(cls.dir, "sandboxes")
        cls.auth_file = cls.write_auth(PASSWORD)

    @classmethod
    def tearDownClass(cls):
        if getattr(cls, "registry", None) is not None:
            cls.registry.stop()
        super().tearDownClass()

    @classmethod
    def build_python_image(cls):
        context = os.path.join(cls.dir, "context")
        os.makedirs(context)
        with open(os.path.join(context, "Containerfile"), "w") as f:
            f.write(CONTAINERFILE)
        ds.run(["podman", "build", "-q", "--network", "host", "-t", PYTHON_IMAGE, context], timeout=900)
        archive = os.path.join(cls.dir, "python.oci.tar")
        ds.run(["podman", "save", "--format", "oci-archive", "-o", archive, PYTHON_IMAGE], timeout=600)
        return archive

    @classmethod
    def write_auth(cls, password, name="auth.json"):
        """A podman/docker login auth file for the registry."""
        path = os.path.join(cls.dir, name)
        with open(path, "w") as f:
            json.dump({"auths": {cls.registry.address: {"username": USER, "password": password}}}, f)
        return path

    def start_host(self, *flags):
        self.services.stop("sandbox-host")
        self.host = self.services.start("sandbox-host", [
            "corral-sandbox-host", "--grpc-listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0", f"--root={self.root}",
            *flags])["grpc"]

    def corral(self, *args, check=True):
        args = list(args)
        at = args.index("--") if "--" in args else len(args)  # the connection flags go before a command's argv
        args[at:at] = ["--host", self.host, "--secret-file", self.secret]
        try:
            return ds.run([os.path.join(ARGS.bin, "corral"), *args], check=check, timeout=900)
        except AssertionError as e:  # with what the host said, and whether it is still running
            host = self.services.procs.get("sandbox-host")
            with open(os.path.join(self.services.dir, "sandbox-host.log")) as f:
                raise AssertionError(f"{e}\n--- sandbox host (exit code {host and host.poll()}), last lines\n"
                                     f"{f.read()[-3000:]}") from None

    def pull(self, ref, check=True):
        return self.corral("image", "pull", ref, check=check)

    def stored(self):
        """The layers and blobs in the host's store."""
        images = os.path.join(self.root, "images")
        return (sorted(n for n in os.listdir(os.path.join(images, "layers")) if not n.endswith(".size")),
                sorted(os.listdir(os.path.join(images, "blobs", "sha256"))))

    def refused(self, ref, code, message):
        before = self.stored() if os.path.isdir(os.path.join(self.root, "images", "layers")) else None
        done = self.pull(ref, check=False)
        self.assertNotEqual(done.returncode, 0, done.stdout)
        self.assertIn(code, done.stderr)
        self.assertIn(message, done.stderr)
        if before is not None:
            self.assertEqual(self.stored()[0], before[0])  # no layer was added
        self.assertNotIn(ref, self.corral("image", "ls").stdout)
        return done.stderr

    def test_1_what_cannot_be_trusted_or_authenticated_is_refused(self):
        tiny = f"{self.registry.address}/corral/tiny:1"
        self.start_host()  # no CA for the registry's certificate
        err = self.refused(tiny, "UNAVAILABLE", "certificate verify failed")
        self.assertIn("registry_ca_file", err)
        self.refused("Corral/UPPER:case", "INVALID_ARGUMENT", "not a repository name component")

        self.start_host(f"--registry-ca-file={self.registry.ca_file}")  # trusted, but no credentials
        self.registry.token_requests.clear()
        err = self.refused(tiny, "UNAUTHENTICATED", "no credentials")
        self.assertEqual(self.registry.token_requests[0]["user"], None)
        self.assertEqual(self.registry.token_requests[0]["scopes"], ["repository:corral/tiny:pull"])

        wrong = self.write_auth("wrong", "wrong-auth.json")
        self.start_host(f"--registry-ca-file={self.registry.ca_file}", f"--registry-auth-file={wrong}")
        self.refused(tiny, "UNAUTHENTICATED", "refused the credentials")

    def test_2_content_that_is_not_its_digest_is_refused(self):
        self.start_host(f"--registry-ca-file={self.registry.ca_file}", f"--registry-auth-file={self.auth_file}")
        status, _, body = self.registry.request("GET", f"/v2/corral/tiny/manifests/{self.tiny_digest}",
                                                token=self.registry.token("repository:corral/tiny:pull", USER,
                                                                          PASSWORD),
                                                headers={"Accept": "application/vnd.oci.image.manifest.v1+json"})
        self.assertEqual(status, 200)
        manifest = json.loads(body)
        layer = manifest["layers"][0]["digest"]
        # The registry serves what its disk holds: one bit of the layer flipped is served under the layer's digest.
        self.registry.corrupt_blob(layer)
        try:
            self.refused(f"{self.registry.address}/corral/tiny:1", "INVALID_ARGUMENT", f"blob {layer} has content")
            self.assertNotIn(layer.split(":")[1], self.stored()[1])
        finally:
            self.registry.corrupt_blob(layer)  # flipped back
        # A manifest whose bytes changed (still a valid manifest): asked for by digest, the content is not it.
        original = body
        self.registry.corrupt_blob(self.tiny_digest, data=original + b" ")
        try:
            self.refused(f"{self.registry.address}/corral/tiny@{self.tiny_digest}", "INVALID_ARGUMENT",
                         "not the " + self.tiny_digest + " asked for")
        finally:
            with open(self.registry.blob_path(self.tiny_digest), "wb") as f:
                f.write(original)

    def test_3_an_image_is_pulled_by_tag_and_digest_and_runs_its_own_python(self):
        host_python = subprocess.run(["/usr/bin/python3", "-c", f"import {MODULE}"], capture_output=True)
        self.assertNotEqual(host_python.returncode, 0, f"the host has {MODULE}: the test would prove nothing")
        self.start_host(f"--registry-ca-file={self.registry.ca_file}", f"--registry-auth-file={self.auth_file}")
        ref = f"{self.registry.address}/corral/python:3"
        self.registry.token_requests.clear()
        start = time.time()
        out = self.pull(ref).stdout
        ds.log(f"pulled in {time.time() - start:.1f}s: {out.strip()}")
        self.assertTrue(out.startswith(f"{self.python_digest} {ref} "), out)
        self.assertEqual(self.registry.token_requests[0]["user"], USER)
        self.assertEqual(self.registry.token_requests[0]["access"],
                         [{"type": "repository", "name": "corral/python", "actions": ["pull"]}])
        blobs = self.stored()[1]

        # Again, and by digest: the same image, no blob fetched twice (the host logs what it fetched).
        by_digest = f"{self.registry.address}/corral/python@{self.python_digest}"
        out = self.pull(by_digest).stdout
        self.assertTrue(out.startswith(f"{self.python_digest} "), out)
        self.assertIn(by_digest, out)
        self.assertEqual(self.stored()[1], blobs)
        with open(os.path.join(self.dir, "sandbox-host.log")) as f:
            self.assertIn(f"image {by_digest} pulled: {self.python_digest} (", f.read())

        sandbox_id = self.corral("sandbox", "create", "--image", ref, "--network", "none").stdout.split()[0]
        code = f"import sys, {MODULE}; print(sys.executable, {MODULE}.__file__)"
        got = self.corral("sandbox", "exec", sandbox_id, "--", "python3", "-c", code).stdout.split()
        self.assertEqual(got[0], "/usr/bin/python3")
        self.assertTrue(got[1].startswith("/usr/lib/python3/dist-packages/termcolor"), got)
        info = json.loads(self.corral("sandbox", "info", sandbox_id).stdout)
        self.assertEqual(info["imageDigest"], self.python_digest)
        self.corral("sandbox", "rm", sandbox_id)

    def test_4_the_scheduler_has_a_host_pull_the_image_an_episode_names(self):
        # A host with an empty store: the first episodes of the batch make it pull the image, once.
        root = os.path.join(self.dir, "sandboxes-scheduled")
        self.services.stop("sandbox-host")
        log_path = os.path.join(self.dir, "sandbox-host.log")
        earlier = os.path.getsize(log_path)  # the earlier tests' hosts wrote there too
        start = self.services.start
        host = start("sandbox-host", [
            "corral-sandbox-host", "--grpc-listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0", f"--root={root}",
            f"--registry-ca-file={self.registry.ca_file}", f"--registry-auth-file={self.auth_file}"])["grpc"]
        llm = start("fake-llm", ["corral-fake-llm", "--listen=127.0.0.1:0"], secret=False)["http"]
        proxy = start("proxy", ["corral-proxy", "--grpc-listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0",
                                "--http-listen=127.0.0.1:0", f"--journal={self.dir}/proxy.db",
                                f"--upstream=http://{llm}"])["grpc"]
        scheduler = start("scheduler", [
            "corral-scheduler", "--grpc-listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0",
            "--http-listen=127.0.0.1:0", f"--journal={self.dir}/scheduler.db", f"--proxy={proxy}",
            f"--host={host}", "--default-model=fake-model"])["grpc"]
        ref = f"{self.registry.address}/corral/python:3"
        task = {
            "id": "image-python",
            "prompt": "Run the image's Python.",
            "runner": "tool_loop",
            "tool_loop": {"tools": [{"name": "shell", "kind": "TOOL_KIND_BASH"}], "max_turns": 2},
            "llm": {"params_json": json.dumps({"fake": {"tool_script": [f"python3 -c 'import {MODULE}; print(1)'"]}})},
            "reward": {"function": "REWARD_FUNCTION_VERIFIER"},
            "environment": {"image": ref, "network_policy": "NETWORK_POLICY_NONE"},
            "verifier": {"command": {"argv": ["python3", "-c", f"import {MODULE}"]}},
        }
        dataset = os.path.join(self.dir, "pull.jsonl")
        with open(dataset, "w") as f:
            f.write(json.dumps(task) + "\n")
        out = os.path.join(self.dir, "results.jsonl")
        ds.run([os.path.join(ARGS.bin, "corral"), "run", dataset, "--scheduler", scheduler, "--secret-file",
                self.secret, "--group-size", "4", "--out", out, "--seed", "3"], timeout=600)
        with open(out) as f:
            results = [json.loads(line) for line in f if line.strip()]
        self.assertEqual(len(results), 4)
        for r in results:
            self.assertEqual(r.get("status"), "EPISODE_STATUS_FINISHED", r)
            self.assertEqual(r.get("reward", 0), 1, r)
        with open(log_path) as f:
            log = f.read()[earlier:]
        # The layers came once: a pull asked for while another of the name ran waited for it; one asked for
        # after it (before the scheduler knew) fetched only the manifest.
        fetched = re.findall(rf"image {re.escape(ref)} pulled: {self.python_digest} \(2 layers, (\d+) bytes", log)
        self.assertGreaterEqual(len(fetched), 1, log[-3000:])
        self.assertEqual(len([n for n in fetched if int(n) > 0]), 1, fetched)


def main():
    if not os.path.exists("/usr/bin/docker-registry"):
        print("pull test: /usr/bin/docker-registry is missing (scripts/bootstrap installs docker-registry)")
        sys.exit(ds.SKIP)
    image_test_main()


if __name__ == "__main__":
    main()
