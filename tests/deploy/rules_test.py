#!/usr/bin/env python3
"""deploy/observability checked with Prometheus's own promtool (from the compose stack's Prometheus image, Debian's
package): the scrape config and the rules are valid, and the alerts' unit tests pass — each alert fires on the
series that should raise it, after its `for`, and stays silent on healthy ones. The dashboard is well-formed.
(compose_test.py evaluates every expression against a live Prometheus.)

    python3 rules_test.py --repo REPO
"""
import argparse
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploy_support as ds  # noqa: E402

ARGS = None


def promtool(*args, extra_volume=None):
    observability = os.path.join(ARGS.repo, "deploy", "observability")
    volumes = ["-v", f"{observability}:/obs:ro"] + (["-v", extra_volume] if extra_volume else [])
    return ds.run(["podman", "run", "--rm", "--network", "none", *volumes, "-w", "/obs/prometheus",
                   "--entrypoint", "promtool", ds.PROMETHEUS_IMAGE, *args], check=False, timeout=120)


class PrometheusRules(unittest.TestCase):
    def test_the_rules_are_valid(self):
        done = promtool("check", "rules", "rules/corral.rules.yml")
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        self.assertIn("SUCCESS: 20 rules found", done.stdout)

    def test_the_scrape_config_is_valid(self):
        done = promtool("check", "config", "--syntax-only", "prometheus.yml")
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)

    def test_the_alerts_unit_tests_pass(self):
        done = promtool("test", "rules", "tests/corral.rules.test.yml")
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        self.assertIn("SUCCESS", done.stdout)

    def test_a_wrong_expectation_fails_the_unit_tests(self):
        # So the pass above means something: an alert expected where none fires is reported.
        with open(os.path.join(ARGS.repo, "deploy", "observability", "prometheus", "tests",
                               "corral.rules.test.yml")) as f:
            tests = f.read()
        broken = tests.replace("      - eval_time: 1m30s\n        alertname: CorralServiceDown\n        exp_alerts: []",
                               "      - eval_time: 1m30s\n        alertname: CorralServiceDown\n        exp_alerts:\n"
                               "          - exp_labels: {severity: critical, job: corral-proxy, instance: \"proxy:9600\"}",
                               1)
        self.assertNotEqual(broken, tests)
        broken = broken.replace("../rules/corral.rules.yml", "/obs/prometheus/rules/corral.rules.yml")
        with tempfile.TemporaryDirectory() as scratch:
            os.chmod(scratch, 0o755)  # promtool runs as the image's unprivileged user
            with open(os.path.join(scratch, "broken.test.yml"), "w") as f:
                f.write(broken)
            os.chmod(os.path.join(scratch, "broken.test.yml"), 0o644)
            done = promtool("test", "rules", "/scratch/broken.test.yml", extra_volume=f"{scratch}:/scratch:ro")
        self.assertEqual(done.returncode, 1, done.stdout)
        self.assertIn("FAILED", done.stdout + done.stderr)

    def test_the_dashboard_is_well_formed(self):
        with open(os.path.join(ARGS.repo, "deploy", "observability", "grafana", "corral-dashboard.json")) as f:
            dashboard = json.load(f)
        ids = [p["id"] for p in dashboard["panels"]]
        self.assertEqual(len(ids), len(set(ids)), "panel ids must be unique")
        rows = [p["title"] for p in dashboard["panels"] if p["type"] == "row"]
        self.assertEqual(rows, ["Episodes", "Phase latencies", "Queue and warm pool", "Sandbox hosts",
                                "Ratelimiter", "Proxy", "Tokens", "Asynchronous RL", "Quotas", "Processes", "Usage"])
        for p in dashboard["panels"]:
            if p["type"] == "row":
                continue
            with self.subTest(panel=p["title"]):
                self.assertEqual(p["datasource"]["uid"], "${datasource}")
                self.assertTrue(p["targets"])
                self.assertTrue(all(t["expr"].strip() for t in p["targets"]))


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--repo", required=True)
    ARGS, rest = parser.parse_known_args()
    ARGS.repo = os.path.abspath(ARGS.repo)
    ds.ready_podman_or_skip(ARGS.repo)
    ds.require_images()
    unittest.main(argv=[sys.argv[0], "-v"] + rest)


if __name__ == "__main__":
    main()
