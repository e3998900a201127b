#!/usr/bin/env python3
"""Sandbox leases and calls with deadlines across steps of the wall clock, with the real binaries (a sandbox host, a
scheduler and a sandbox-api replica as root on loopback, all under libfaketime so their wall clock can be stepped
while their monotonic clock runs on, as an NTP step leaves it). Found by the sandbox API's fault run
(sandbox_faults.py): a scheduler restarted after steps expired the restored leases by the size of the steps.

    BUILD/sdk-venv/bin/python tests/faults/clock_step_test.py --bin BUILD/bin
"""
import argparse
import json
import os
import shutil
import sys
import time
import unittest
import urllib.error
import urllib.request

import grpc

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "tests", "images"))
from nemesis import SteppedClock, free_port  # noqa: E402
from services import Services, scratch  # noqa: E402

import corral  # noqa: E402
from corral.v1 import scheduler_pb2, scheduler_pb2_grpc  # noqa: E402
from google.protobuf import duration_pb2  # noqa: E402

BIN = None



class ClockStepTest(unittest.TestCase):
    def setUp(self):
        if os.geteuid() != 0:
            self.skipTest("the sandbox host needs root")
        self.dir, self.secret = scratch("corral-clock-step-")
        self.clock = SteppedClock(os.path.join(self.dir, "faketime"))
        if not self.clock.available:
            self.skipTest("needs Debian's faketime (scripts/bootstrap installs it)")
        self.services = Services(BIN, self.dir, self.secret)
        self.env = dict(os.environ, **self.clock.env())
        host = self.services.start("sandbox-host", [
            "corral-sandbox-host", "--grpc-listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0",
            f"--root={self.dir}/sandboxes", "--capacity=8"], env=self.env)["grpc"]
        self.address = free_port()
        self.scheduler_argv = ["corral-scheduler", f"--grpc-listen={self.address}", "--metrics-listen=127.0.0.1:0",
                               f"--journal={self.dir}/scheduler.db", "--proxy=127.0.0.1:1", f"--host={host}",
                               "--http-listen=127.0.0.1:0",
                               "--host-poll-interval=200ms"]
        self.start_scheduler()
        self.metadata = (("authorization", "Bearer " + corral.cluster_token(self.secret)),)
        self.api = self.services.start("sandbox-api", [
            "corral-sandbox-api", "--grpc-listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0",
            "--http-listen=127.0.0.1:0", f"--scheduler={self.address}", "--wait=10s"], env=self.env)["http"]

    def tearDown(self):
        self.services.stop_all()
        if not os.environ.get("KEEP"):
            shutil.rmtree(self.dir, ignore_errors=True)

    def start_scheduler(self):
        self.services.start("scheduler", self.scheduler_argv, env=self.env)
        self.stub = scheduler_pb2_grpc.SchedulerStub(grpc.insecure_channel(self.address))  # no connection of the last
        # Until its first poll of the host, a scheduler refuses to place (it does not know the host's features).
        deadline = time.monotonic() + 30
        while not any(h.state == scheduler_pb2.HOST_STATE_HEALTHY for h in self.stub.ListHosts(
                scheduler_pb2.ListHostsRequest(), timeout=10, wait_for_ready=True,
                metadata=(("authorization", "Bearer " + corral.cluster_token(self.secret)),)).hosts):
            self.assertLess(time.monotonic(), deadline, "the scheduler never found its host healthy")
            time.sleep(0.05)

    def lease(self, ttl_s):
        request = scheduler_pb2.LeaseSandboxRequest(owner="tester", environment=scheduler_pb2.EnvironmentSpec(),
                                                    ttl=duration_pb2.Duration(seconds=ttl_s))
        return self.stub.LeaseSandbox(request, timeout=60, metadata=self.metadata, wait_for_ready=True)

    def leases(self):
        answer = self.stub.ListLeases(scheduler_pb2.ListLeasesRequest(owner="tester"), timeout=30, wait_for_ready=True,
                                      metadata=self.metadata)
        return sorted(l.lease_id for l in answer.leases)

    def restart_scheduler(self):
        self.services.kill("scheduler")
        self.start_scheduler()

    def run_code(self):
        """/run_code answers within its replica's wait (10 s) and the run's timeout (5 s), with the right output."""
        started = time.monotonic()
        body = json.dumps({"code": "print(6 * 7)", "language": "python", "run_timeout": 5}).encode()
        try:
            with urllib.request.urlopen(urllib.request.Request(f"http://{self.api}/run_code", body), timeout=120) as r:
                answer = json.loads(r.read())
        except urllib.error.HTTPError as e:
            answer = {"status": f"HTTP {e.code}"}
        took = time.monotonic() - started
        self.assertEqual((answer["status"], answer.get("run_result", {}).get("stdout")), ("Success", "42\n"),
                         f"after {took:.1f}s")
        self.assertLess(took, 10 + 5 + 5)

    def expire_a_short_lease(self):
        """Leases a sandbox for 1 s and waits until the scheduler's expiry sweep has ended it: the sweep has run on
        this process's clock since."""
        short = self.lease(1).lease_id
        deadline = time.monotonic() + 30
        while short in self.leases():
            self.assertLess(time.monotonic(), deadline, "a 1 s lease did not expire")
            time.sleep(0.1)

    def test_steps_of_the_wall_clock_end_no_lease_early_and_fail_no_call(self):
        first = self.lease(300)
        self.clock.step(+3600)  # an hour forward: the calls between the services carry deadlines
        second = self.lease(300)
        self.run_code()
        both = sorted([first.lease_id, second.lease_id])
        self.expire_a_short_lease()
        self.assertEqual(self.leases(), both)
        # Restarted an hour "later": the journaled expiries are read on the new process's clock, exactly.
        self.restart_scheduler()
        self.expire_a_short_lease()
        self.assertEqual(self.leases(), both)
        self.clock.step(-7200)  # and an hour back from where it was at the start
        self.run_code()
        self.restart_scheduler()
        self.expire_a_short_lease()
        self.assertEqual(self.leases(), both)
        self.run_code()


def main():
    global BIN
    p = argparse.ArgumentParser()
    p.add_argument("--bin", required=True)
    args, rest = p.parse_known_args()
    BIN = args.bin
    unittest.main(argv=[sys.argv[0], "-v"] + rest)


if __name__ == "__main__":
    main()
