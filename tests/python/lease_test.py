#!/usr/bin/env python3
"""The Python SDK's leases (corral.Limiter) against a real corral-ratelimiter: fencing tokens that only grow, a
holder paused past its TTL (SIGSTOP) that learns on resume that it lost the lease, a holder whose limiter falls
silent that learns it from its own monotonic clock, and bad input.

    BUILD/sdk-venv/bin/python lease_test.py --bin BUILD/bin
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import corral
import grpc
from corral.v1 import ratelimit_pb2, ratelimit_pb2_grpc

ARGS = None

# A holder in its own process, so that the test can pause it: it acquires, prints its token, and after a line on
# stdin says whether it still believes it holds the lease.
HOLDER = r"""
import sys, corral
lease = corral.Limiter(sys.argv[1], secret_file=sys.argv[2]).acquire("db_writer", ttl=1)
print("token", lease.fencing_token, flush=True)
sys.stdin.readline()
print("valid", lease.valid(), flush=True)
try:
    lease.check()
    print("acting", flush=True)
except corral.LeaseLost as e:
    print("lost:", e, flush=True)
"""


def wait_until(condition, timeout=20.0, what="the condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


class LeaseTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="corral-lease-")
        cls.secret = os.path.join(cls.dir, "secret")
        with open(cls.secret, "w") as f:
            f.write(os.urandom(32).hex() + "\n")
        os.chmod(cls.secret, 0o600)
        config = os.path.join(cls.dir, "limiter.yaml")
        with open(config, "w") as f:
            f.write("limits:\n  - {name: db_writer, kind: concurrency, permits: 1}\n"
                    "  - {name: tokens, kind: rate, rate_per_s: 100, burst: 100}\n")
        ready = os.path.join(cls.dir, "ready.json")
        cls.log = open(os.path.join(cls.dir, "limiter.log"), "w")
        cls.limiter_proc = subprocess.Popen(
            [os.path.join(ARGS.bin, "corral-ratelimiter"), f"--config={config}", f"--secret-file={cls.secret}",
             "--grpc-listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0", "--learning-mode=false",
             f"--state-path={cls.dir}/leases.db", f"--ready-file={ready}"], stdout=cls.log, stderr=subprocess.STDOUT)
        wait_until(lambda: os.path.exists(ready) and os.path.getsize(ready) > 0 or cls.limiter_proc.poll() is not None,
                   what="the limiter's ready file")
        if cls.limiter_proc.poll() is not None:
            raise RuntimeError(f"corral-ratelimiter exited with {cls.limiter_proc.returncode}")
        with open(ready) as f:
            cls.address = json.load(f)["grpc"]
        cls.limiter = corral.Limiter(cls.address, secret_file=cls.secret)
        cls.stub = ratelimit_pb2_grpc.RateLimiterStub(grpc.insecure_channel(cls.address))

    @classmethod
    def tearDownClass(cls):
        cls.limiter.close()
        cls.limiter_proc.send_signal(signal.SIGCONT)
        cls.limiter_proc.terminate()
        cls.limiter_proc.wait(timeout=30)
        cls.log.close()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def in_use(self, limit="db_writer"):
        status = self.stub.GetStatus(ratelimit_pb2.GetStatusRequest(limit=limit), timeout=10,
                                     metadata=self.limiter._metadata)
        return sum(l.in_use for l in status.limits)

    def test_tokens_only_grow_and_a_released_lease_is_no_longer_valid(self):
        with self.limiter.acquire("db_writer") as first:
            self.assertTrue(first.valid())
            first.check()
            self.assertGreater(first.fencing_token, 0)
        self.assertFalse(first.valid())
        with self.assertRaises(corral.LeaseLost):
            first.check()
        second = self.limiter.try_acquire("db_writer")
        self.assertGreater(second.fencing_token, first.fencing_token)
        with self.assertRaises(corral.CorralError) as busy:
            self.limiter.try_acquire("db_writer")
        self.assertEqual(busy.exception.code, grpc.StatusCode.RESOURCE_EXHAUSTED)
        second.release()
        second.release()  # twice is harmless
        self.assertEqual(self.in_use(), 0)

    def test_bad_input_is_a_clear_error_and_a_rate_limit_holds_nothing(self):
        with self.assertRaises(corral.CorralError) as unknown:
            self.limiter.acquire("no_such_limit", wait=1)
        self.assertEqual(unknown.exception.code, grpc.StatusCode.NOT_FOUND)
        with self.assertRaises(corral.CorralError) as bad:
            self.limiter.acquire("db_writer", permits=2, wait=1)
        self.assertEqual(bad.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIsNone(self.limiter.acquire("tokens", permits=5))
        self.assertEqual(self.in_use(), 0)

    def test_a_holder_paused_past_its_ttl_learns_on_resume_that_it_lost_the_lease(self):
        holder = subprocess.Popen([sys.executable, "-c", HOLDER, self.address, self.secret], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        try:
            word, token = holder.stdout.readline().split()
            self.assertEqual(word, "token")
            holder.send_signal(signal.SIGSTOP)
            wait_until(lambda: self.in_use() == 0, what="the paused holder's lease to expire")
            with self.limiter.acquire("db_writer", wait=10) as successor:
                self.assertGreater(successor.fencing_token, int(token))
                holder.send_signal(signal.SIGCONT)
                holder.stdin.write("\n")
                holder.stdin.flush()
                self.assertEqual(holder.stdout.readline().strip(), "valid False")
                self.assertTrue(holder.stdout.readline().startswith("lost:"))
                self.assertTrue(successor.valid())
            self.assertEqual(holder.wait(timeout=30), 0)
        finally:
            holder.send_signal(signal.SIGCONT)
            holder.kill()
            holder.wait()

    def test_a_holder_whose_limiter_falls_silent_sees_its_lease_invalid_from_its_own_clock(self):
        lease = self.limiter.acquire("db_writer", ttl=1)
        self.assertTrue(lease.valid())
        # A stopped limiter neither renews the lease nor says it ended; the renewal thread's call hangs meanwhile.
        self.limiter_proc.send_signal(signal.SIGSTOP)
        try:
            wait_until(lambda: not lease.valid(), what="the lease to turn invalid")
            with self.assertRaisesRegex(corral.LeaseLost, "past its TTL"):
                lease.check()
        finally:
            self.limiter_proc.send_signal(signal.SIGCONT)
        lease.release()  # whether the limiter expired it or a renewal queued during the pause kept it
        self.assertEqual(self.in_use(), 0)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
