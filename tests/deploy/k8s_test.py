#!/usr/bin/env python3
"""deploy/k8s checked as far as a machine without a Kubernetes cluster can: the example overlay rendered with
`kubectl kustomize`, every object validated against the Kubernetes API schemas (kubernetes-models from npm,
pinned by tests/deploy/k8s-schema/package-lock.json; the ServiceMonitor against the Prometheus Operator's CRD),
the manifests' promises checked object by object, and the sandbox host's pod spec — its securityContext exactly
as rendered — run with `podman kube play` to prove it is enough for the host to start and create a sandbox.

    python3 k8s_test.py --repo REPO
"""
import argparse
import base64
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploy_support as ds  # noqa: E402

ARGS = None


def kubectl():
    """kubectl from PATH, or Debian's kubernetes-client installed when there is none."""
    if shutil.which("kubectl") is None:
        ds.run(["apt-get", "install", "-y", "-q", "--no-install-recommends", "kubernetes-client"], timeout=600,
               env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    return "kubectl"


class Kubernetes(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="corral-k8s-")
        overlay = os.path.join(ARGS.repo, "deploy", "k8s", "overlays", "example")
        secret = os.path.join(overlay, "secret")
        made_secret = not os.path.exists(secret)
        if made_secret:  # what a user makes once (docs/deploy.md); gitignored
            with open(secret, "w") as f:
                f.write(os.urandom(32).hex() + "\n")
            os.chmod(secret, 0o600)
        try:
            cls.rendered = ds.run([kubectl(), "kustomize", overlay]).stdout
        finally:
            if made_secret:
                os.remove(secret)
        cls.yaml_path = os.path.join(cls.dir, "rendered.yaml")
        with open(cls.yaml_path, "w") as f:
            f.write(cls.rendered)
        schema_dir = os.path.join(ARGS.repo, "tests", "deploy", "k8s-schema")
        if not os.path.isdir(os.path.join(schema_dir, "node_modules", "kubernetes-models")):
            ds.run(["npm", "ci", "--prefix", schema_dir, "--no-audit", "--no-fund", "--loglevel=error"], timeout=600)
        cls.validator = ["node", os.path.join(schema_dir, "validate.mjs")]
        json_path = os.path.join(cls.dir, "rendered.json")
        cls.validation = subprocess.run(cls.validator + ["--json", json_path, cls.yaml_path], capture_output=True,
                                        text=True, timeout=120)
        with open(json_path) as f:
            cls.objects = json.load(f)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def find(self, kind, name):
        for o in self.objects:
            if o["kind"] == kind and o["metadata"]["name"] == name:
                return o
        self.fail(f"no {kind}/{name} in the rendered manifests")

    def test_every_object_is_valid_against_the_api_schemas(self):
        ds.log(self.validation.stdout)
        self.assertEqual(self.validation.returncode, 0, self.validation.stdout + self.validation.stderr)
        kinds = sorted({o["kind"] for o in self.objects})
        self.assertEqual(kinds, ["ConfigMap", "DaemonSet", "Deployment", "Namespace", "NetworkPolicy",
                                 "PersistentVolumeClaim", "PodDisruptionBudget", "Secret", "Service",
                                 "ServiceMonitor", "StatefulSet"])

    def test_the_validator_refuses_a_broken_manifest(self):
        # So a pass above means something: a wrong type and an unknown field are caught.
        broken = copy.deepcopy(self.find("Deployment", "corral-scheduler"))
        broken["spec"]["replicas"] = "one"
        broken["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = "Sometimes"
        path = os.path.join(self.dir, "broken.json")
        with open(path, "w") as f:
            json.dump(broken, f)  # JSON is YAML
        done = subprocess.run(self.validator + [path], capture_output=True, text=True, timeout=60)
        self.assertEqual(done.returncode, 1, done.stdout)
        self.assertIn("replicas must be integer", done.stdout)

    def test_workloads_have_probes_resources_and_the_least_privilege(self):
        for kind, name in (("Deployment", "corral-scheduler"), ("Deployment", "corral-ratelimiter"),
                           ("StatefulSet", "corral-proxy"), ("DaemonSet", "corral-sandbox-host"),
                           ("Deployment", "corral-sandbox-api")):
            with self.subTest(workload=name):
                pod = self.find(kind, name)["spec"]["template"]["spec"]
                [c] = pod["containers"]
                self.assertIn("grpc", c["readinessProbe"])
                self.assertIn("grpc", c["livenessProbe"])
                self.assertIn("cpu", c["resources"]["requests"])
                self.assertIn("memory", c["resources"]["limits"])
                self.assertTrue(c["image"].startswith("registry.example.com/"), c["image"])
                mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
                self.assertIn("/etc/corral/secret", mounts)
                secret_volume = next(v for v in pod["volumes"] if v["name"] == mounts["/etc/corral/secret"])
                self.assertTrue(secret_volume["secret"]["secretName"].startswith("corral-secret-"))
                if name == "corral-sandbox-host":
                    self.assertEqual(c["securityContext"]["capabilities"]["drop"], ["ALL"])
                    self.assertNotIn("privileged", c["securityContext"])
                    continue
                self.assertEqual(pod["securityContext"]["runAsUser"], 10001)
                self.assertTrue(pod["securityContext"]["runAsNonRoot"])
                self.assertEqual(c["securityContext"]["capabilities"]["drop"], ["ALL"])
                self.assertTrue(c["securityContext"]["readOnlyRootFilesystem"])
        journal = next(v for v in self.find("Deployment", "corral-scheduler")["spec"]["template"]["spec"]["volumes"]
                       if v["name"] == "journal")
        self.assertEqual(journal["persistentVolumeClaim"]["claimName"], "corral-scheduler-journal")
        self.assertEqual(self.find("Service", "corral-sandbox-host")["spec"]["clusterIP"], "None")
        config = self.find("ConfigMap", next(o["metadata"]["name"] for o in self.objects if o["kind"] == "ConfigMap"))
        self.assertIn("hosts_dns: corral-sandbox-host:7500", config["data"]["scheduler.yaml"])
        proxy_args = self.find("StatefulSet", "corral-proxy")["spec"]["template"]["spec"]["containers"][0]["args"]
        self.assertIn("--upstream=http://vllm.inference.svc.cluster.local:8000", proxy_args)

    def test_sandboxes_reach_only_the_proxy_and_dns(self):
        policy = self.find("NetworkPolicy", "corral-sandbox-host")["spec"]
        self.assertEqual(sorted(policy["policyTypes"]), ["Egress", "Ingress"])
        destinations = []
        for rule in policy["egress"]:
            for peer in rule["to"]:
                destinations.append((json.dumps(peer["podSelector"]["matchLabels"], sort_keys=True),
                                     sorted(p["port"] for p in rule["ports"])))
        self.assertEqual(sorted(destinations), [('{"app.kubernetes.io/name": "corral-proxy"}', [8080]),
                                                ('{"k8s-app": "kube-dns"}', [53, 53])])

    def test_the_sandbox_host_pod_spec_runs_with_podman_kube_play_and_creates_a_sandbox(self):
        reason = ds.podman_ready(ARGS.repo)
        if reason:
            self.skipTest(reason)
        ds.require_images()
        daemonset = self.find("DaemonSet", "corral-sandbox-host")
        template = copy.deepcopy(daemonset["spec"]["template"])
        spec = template["spec"]
        spec.pop("nodeSelector", None)
        spec["containers"][0]["image"] = ds.SANDBOX_HOST_IMAGE  # the image built here instead of the registry's
        # emptyDir is not played by this podman: the homes go to a fresh directory instead (hostPath), as a node's
        # disk would hold them.
        homes = os.path.join(self.dir, "sandboxes")
        os.makedirs(homes)
        # Nor are Secret volumes (podman 4.3 looks them up in its own secret store and crashes): the Secret's
        # keys are written to a directory with the volume's defaultMode, as the kubelet would, and mounted from there.
        for v in spec["volumes"]:
            if "emptyDir" in v:
                del v["emptyDir"]
                v["hostPath"] = {"path": homes, "type": "Directory"}
            elif "secret" in v:
                source = v.pop("secret")
                found = next(o for o in self.objects if o["kind"] == "Secret" and
                             o["metadata"]["name"] == source["secretName"])
                keys = os.path.join(self.dir, "secret-" + v["name"])
                os.makedirs(keys)
                for key, value in found["data"].items():
                    path = os.path.join(keys, key)
                    with open(path, "wb") as f:
                        f.write(base64.b64decode(value))
                    os.chmod(path, source.get("defaultMode", 0o644))
                v["hostPath"] = {"path": keys, "type": "Directory"}
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "corral-sandbox-host-play", "labels": template["metadata"]["labels"],
                            "annotations": template["metadata"].get("annotations", {})},
               "spec": spec}
        objects = [o for o in self.objects if o["kind"] == "ConfigMap"] + [pod]
        play = os.path.join(self.dir, "play.yaml")
        with open(play, "w") as f:
            f.write("\n---\n".join(json.dumps(o) for o in objects))
        container = "corral-sandbox-host-play-sandbox-host"
        try:
            ds.run(["podman", "kube", "play", play], timeout=300)
            secret = "/etc/corral/secret/secret"

            def in_pod(*cmd, check=True):
                return ds.run(["podman", "exec", container, *cmd], check=check, timeout=120)
            ds.wait_until("the sandbox host in the played pod to serve",
                          lambda: in_pod("corral", "health", "127.0.0.1:7500", check=False).returncode == 0, 120)
            info = in_pod("corral", "sandbox", "info", "--host", "127.0.0.1:7500", "--secret-file", secret).stdout
            ds.log("the played pod's sandbox host reports:\n" + info)
            # The pod's securityContext is enough for every protection, not only for starting.
            self.assertRegex(info, r'"landlockAbi": [1-9]')
            self.assertRegex(info, r'"mountNamespaces": true')
            self.assertRegex(info, r'"networkNamespaces": true')
            created = in_pod("corral", "sandbox", "create", "--host", "127.0.0.1:7500", "--secret-file", secret,
                             "--count", "1").stdout
            sandbox = next(w for w in created.split() if w.startswith("sb-"))
            out = in_pod("corral", "sandbox", "exec", "--host", "127.0.0.1:7500", "--secret-file", secret, sandbox,
                         "--", "sh", "-c", "id -u; echo written > f; cat f").stdout.split()
            self.assertGreaterEqual(int(out[0]), 20000)  # the sandbox's own uid from the pool, not root
            self.assertEqual(out[1], "written")
        finally:
            subprocess.run(["podman", "kube", "down", play], capture_output=True, timeout=120)
            subprocess.run(["podman", "pod", "rm", "-f", "corral-sandbox-host-play"], capture_output=True, timeout=120)


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--repo", required=True)
    ARGS, rest = parser.parse_known_args()
    ARGS.repo = os.path.abspath(ARGS.repo)
    unittest.main(argv=[sys.argv[0], "-v"] + rest)


if __name__ == "__main__":
    main()
