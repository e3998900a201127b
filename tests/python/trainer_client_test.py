#!/usr/bin/env python3
"""A trainer's view of corral-scheduler, with Debian's python3-grpcio and the stubs generated from proto/:
submit a batch (client stream), stream results (whole groups), lose the connection and resume from the cursor,
acknowledge, cancel a batch mid-run, and read the counts. This is how verl or ROLL would call Corral.

Starts its own small cluster of real binaries on loopback (corral-fake-llm, corral-proxy, corral-scheduler; no
sandbox host: single_turn episodes), authenticated with a cluster secret like a deployment would be.

    trainer_client_test.py --bin BUILD/bin --stubs BUILD/python
"""
import argparse
import base64
import hashlib
import hmac
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

ARGS = None


def wait_ready(path, proc, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if os.path.exists(path):
            with open(path) as f:
                return json.loads(f.read())
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode}")
        time.sleep(0.05)
    raise RuntimeError(f"no ready file {path}")


class Cluster:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="corral-py-")
        self.secret_file = os.path.join(self.dir, "secret")
        with open(self.secret_file, "w") as f:
            f.write(os.urandom(32).hex() + "\n")
        os.chmod(self.secret_file, 0o600)
        self.procs = []
        llm = self.start("fake-llm", ["corral-fake-llm", "--listen=127.0.0.1:0", "--arithmetic"], secret=False)
        proxy = self.start("proxy", ["corral-proxy", "--grpc-listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0",
                                     "--http-listen=127.0.0.1:0", f"--journal={self.dir}/proxy.db",
                                     f"--upstream=http://{llm['http']}"])
        sched = self.start("scheduler", ["corral-scheduler", "--grpc-listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0",
                                         f"--journal={self.dir}/scheduler.db", f"--proxy={proxy['grpc']}",
                                         "--default-model=fake-model"])
        self.scheduler = sched["grpc"]

    def start(self, name, argv, secret=True):
        ready = os.path.join(self.dir, name + ".ready.json")
        argv = [os.path.join(ARGS.bin, argv[0])] + argv[1:] + [f"--ready-file={ready}"]
        if secret:
            argv.append(f"--secret-file={self.secret_file}")
        log = open(os.path.join(self.dir, name + ".log"), "w")
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(proc)
        return wait_ready(ready, proc)

    def token(self):
        key = open(self.secret_file, "rb").read().rstrip()
        mac = hmac.new(key, b"cluster\x00corral", hashlib.sha256).digest()
        return "corral." + base64.urlsafe_b64encode(mac).rstrip(b"=").decode()

    def stop(self):
        for p in reversed(self.procs):
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


class TrainerClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        sys.path.insert(0, ARGS.stubs)
        import grpc
        from corral.v1 import scheduler_pb2, scheduler_pb2_grpc
        cls.grpc, cls.s = grpc, scheduler_pb2
        cls.cluster = Cluster()
        cls.metadata = [("authorization", "Bearer " + cls.cluster.token())]
        cls.stub = scheduler_pb2_grpc.SchedulerStub(grpc.insecure_channel(cls.cluster.scheduler))

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop()

    def submit(self, batch_id, tasks, group_size=4, seed=7):
        s = self.s

        def parts():
            yield s.SubmitRequest(spec=s.BatchSpec(batch_id=batch_id, group_size=group_size, seed=seed))
            yield s.SubmitRequest(tasks=s.TaskList(tasks=tasks))
        return self.stub.Submit(parts(), metadata=self.metadata, timeout=30)

    def task(self, i, params_json=""):
        s = self.s
        return s.Task(id=f"q{i}", prompt=f"What is {i} + 10?", answer=str(i + 10), runner=s.RUNNER_SINGLE_TURN,
                      reward=s.RewardSpec(function=s.REWARD_FUNCTION_GSM8K),
                      llm=s.LlmSpec(seed_sampling=True, params_json=params_json))

    def test_unauthenticated_calls_are_refused(self):
        with self.assertRaises(self.grpc.RpcError) as e:
            self.stub.GetBatch(self.s.GetBatchRequest(batch_id="x"), timeout=10)
        self.assertEqual(e.exception.code(), self.grpc.StatusCode.UNAUTHENTICATED)

    def test_submit_stream_disconnect_resume_and_ack(self):
        s = self.s
        batch = self.submit("py-train", [self.task(i) for i in range(6)])
        self.assertEqual(batch.counts.total, 24)
        self.assertEqual(batch.spec.seed, 7)

        # First stream: take two whole groups, then drop the connection.
        first = []
        stream = self.stub.StreamResults(s.StreamResultsRequest(batch_id=batch.batch_id, whole_groups=True),
                                         metadata=self.metadata, timeout=60)
        for msg in stream:
            if msg.HasField("result"):
                first.append(msg.result)
                if len(first) == 8:
                    break
        stream.cancel()
        self.assertEqual(len({r.ids.group_id for r in first}), 2)
        for r in first:
            self.assertEqual(r.status, s.EPISODE_STATUS_FINISHED)
            self.assertGreater(len(r.trajectory.branches[0].token_ids), 0)  # the model's own token ids
        self.stub.Ack(s.AckRequest(episode_ids=[r.ids.episode_id for r in first]), metadata=self.metadata, timeout=10)

        # Resume after the last result received: the rest, each once, and the stream ends with the batch.
        rest = [m.result for m in self.stub.StreamResults(
            s.StreamResultsRequest(batch_id=batch.batch_id, whole_groups=True, cursor=first[-1].cursor),
            metadata=self.metadata, timeout=60) if m.HasField("result")]
        ids = [r.ids.episode_id for r in first + rest]
        self.assertEqual(len(ids), 24)
        self.assertEqual(len(set(ids)), 24)
        acked = self.stub.Ack(s.AckRequest(episode_ids=[r.ids.episode_id for r in rest]), metadata=self.metadata,
                              timeout=10)
        self.assertEqual(acked.acked, 16)

        # Everything acknowledged: a new stream has nothing to send and ends at once.
        again = [m for m in self.stub.StreamResults(s.StreamResultsRequest(batch_id=batch.batch_id),
                                                    metadata=self.metadata, timeout=30) if m.HasField("result")]
        self.assertEqual(again, [])
        got = self.stub.GetBatch(s.GetBatchRequest(batch_id=batch.batch_id), metadata=self.metadata, timeout=10)
        self.assertEqual(got.state, s.BATCH_STATE_COMPLETE)
        self.assertEqual(got.counts.finished, 24)
        self.assertEqual(got.counts.acked, 24)
        self.assertTrue(got.HasField("mean_reward"))

    def test_cancel_a_running_batch(self):
        s = self.s
        slow = json.dumps({"fake": {"ttft_ms": 20000}})  # the model takes 20 s to answer
        batch = self.submit("py-cancel", [self.task(i, slow) for i in range(3)], group_size=2)
        deadline = time.time() + 30
        while time.time() < deadline:
            b = self.stub.GetBatch(s.GetBatchRequest(batch_id=batch.batch_id), metadata=self.metadata, timeout=10)
            if b.counts.running == 6:
                break
            time.sleep(0.05)
        cancelled = self.stub.Cancel(s.CancelRequest(batch_id=batch.batch_id, reason="trainer stopped"),
                                     metadata=self.metadata, timeout=10)
        self.assertEqual(cancelled.cancelled, 6)
        started = time.time()
        results = [m.result for m in self.stub.StreamResults(s.StreamResultsRequest(batch_id=batch.batch_id),
                                                             metadata=self.metadata, timeout=30)
                   if m.HasField("result")]
        self.assertLess(time.time() - started, 10)  # not the 20 s the model would take
        self.assertEqual(len(results), 6)
        for r in results:
            self.assertEqual(r.status, s.EPISODE_STATUS_CANCELLED)
            self.assertIn("trainer stopped", r.failure_message)

    def test_bad_input_names_the_task_and_field(self):
        s = self.s
        bad = s.Task(id="no-prompt", answer="1")
        with self.assertRaises(self.grpc.RpcError) as e:
            self.submit("py-bad", [self.task(1), bad])
        self.assertEqual(e.exception.code(), self.grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("task 'no-prompt'", e.exception.details())
        self.assertIn("prompt and messages", e.exception.details())
        with self.assertRaises(self.grpc.RpcError) as e:
            self.stub.GetBatch(s.GetBatchRequest(batch_id="py-bad"), metadata=self.metadata, timeout=10)
        self.assertEqual(e.exception.code(), self.grpc.StatusCode.NOT_FOUND)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True)
    parser.add_argument("--stubs", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
