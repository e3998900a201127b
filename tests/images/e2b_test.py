#!/usr/bin/env python3
"""The E2B SDK (tests/e2b, pinned) against sandboxes made from an OCI image, as the RL stacks that use E2B call
them: slime names the image in a metadata key and runs commands as root, adds a user and gives it files; Harbor
runs every command as root (background, cwd, envs, no timeout, then wait) and writes files in batches. Real
binaries on loopback: corral-sandbox-host holding the image (imported with `corral image import`), corral-scheduler
and corral-sandbox-api with `e2b_image_metadata_key: image`; the SDK runs tests/e2b/sdk_test.mjs's `root` step.

    python3 e2b_test.py --bin BUILD/bin --repo REPO
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "deploy"))
import deploy_support as ds  # noqa: E402
from services import ClusterTestCase, image_test_main  # noqa: E402

ARGS = None
IMAGE = "localhost/debian:e2b"


class E2bInAnImage(ClusterTestCase):
    prefix = "corral-e2b-image-"

    @classmethod
    def set_up_cluster(cls):
        host = cls.host_with_base_image(IMAGE)
        start = cls.services.start
        scheduler = start("scheduler", [
            "corral-scheduler", "--grpc-listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0",
            f"--journal={cls.dir}/scheduler.db", "--proxy=127.0.0.1:1", f"--host={host}",
            "--host-poll-interval=200ms"])["grpc"]
        cls.api = start("sandbox-api", [
            "corral-sandbox-api", "--grpc-listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0",
            "--http-listen=127.0.0.1:0", f"--scheduler={scheduler}", "--e2b-image-metadata-key=image"])["http"]
        cls.key = ds.run([cls.bin("corral"), "sandbox-api", "key", "e2b-image-test",
                          f"--secret-file={cls.secret}"]).stdout.strip()

    @classmethod
    def bin(cls, name):
        return os.path.join(ARGS.bin, name)

    def test_slime_and_harbor_run_as_root_and_as_a_user_root_added(self):
        url = f"http://{self.api}"
        env = dict(os.environ, E2B_API_KEY=self.key, E2B_API_URL=url, E2B_SANDBOX_URL=url, E2B_IMAGE=IMAGE,
                   E2B_USER_AGENT_SOURCE="ci")
        done = subprocess.run(["node", os.path.join(ARGS.repo, "tests", "e2b", "sdk_test.mjs"), "root"], env=env,
                              capture_output=True, text=True, timeout=240)
        ds.log(done.stdout + done.stderr[-3000:])
        self.assertEqual(done.returncode, 0, done.stderr[-3000:])
        self.assertIn("ok root", done.stdout)

    def test_harbor_builds_a_template_from_the_image_and_runs_sandboxes_of_it(self):
        url = f"http://{self.api}"
        env = dict(os.environ, E2B_API_KEY=self.key, E2B_API_URL=url, E2B_SANDBOX_URL=url, E2B_IMAGE=IMAGE)
        done = subprocess.run(["node", os.path.join(ARGS.repo, "tests", "e2b", "sdk_test.mjs"), "template"], env=env,
                              capture_output=True, text=True, timeout=300)
        ds.log(done.stdout + done.stderr[-3000:])
        self.assertEqual(done.returncode, 0, done.stderr[-3000:])
        self.assertIn("ok template", done.stdout)


def main():
    image_test_main()


if __name__ == "__main__":
    main()
