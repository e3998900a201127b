#!/usr/bin/env python3
"""The Python SDK (clients/python, installed with pip into a venv at build time) against a real cluster: a
trainer's view of Corral. Submit with the task builders, stream whole groups and turn them into training
samples, lose the scheduler mid-stream (kill -9 and restart) and resume from the cursor, consume results with
asyncio, cancel a batch, refuse bad input, load JSONL datasets and Harbor task directories.

Starts its own small cluster of real binaries on loopback (corral-fake-llm, corral-proxy, corral-scheduler; no
sandbox host: single_turn episodes), authenticated with a cluster secret like a deployment would be.

    BUILD/sdk-venv/bin/python sdk_test.py --bin BUILD/bin --repo REPO
"""
import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import corral
import grpc
from corral.v1 import scheduler_pb2 as s
from google.protobuf import json_format

ARGS = None


def wait_ready(path, proc, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if os.path.exists(path) and os.path.getsize(path) > 0:
            with open(path) as f:
                return json.loads(f.read())
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode}")
        time.sleep(0.05)
    raise RuntimeError(f"no ready file {path}")


class Cluster:
    """fake-llm + proxy + scheduler on loopback, with a cluster secret."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="corral-sdk-")
        self.secret_file = os.path.join(self.dir, "secret")
        with open(self.secret_file, "w") as f:
            f.write(os.urandom(32).hex() + "\n")
        os.chmod(self.secret_file, 0o600)
        self.procs = {}
        self.logs = []
        llm = self.start("fake-llm", ["corral-fake-llm", "--listen=127.0.0.1:0", "--arithmetic"], secret=False)
        proxy = self.start("proxy", ["corral-proxy", "--grpc-listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0",
                                     "--http-listen=127.0.0.1:0", f"--journal={self.dir}/proxy.db",
                                     f"--upstream=http://{llm['http']}"])
        self.proxy = proxy["grpc"]
        self.scheduler = self.start_scheduler("127.0.0.1:0")["grpc"]

    def start_scheduler(self, listen):
        return self.start("scheduler", ["corral-scheduler", f"--grpc-listen={listen}", "--metrics-listen=127.0.0.1:0",
                                        "--http-listen=127.0.0.1:0", f"--journal={self.dir}/scheduler.db", f"--proxy={self.proxy}",
                                        "--default-model=fake-model"])

    def start(self, name, argv, secret=True):
        ready = os.path.join(self.dir, name + ".ready.json")
        if os.path.exists(ready):
            os.unlink(ready)
        argv = [os.path.join(ARGS.bin, argv[0])] + argv[1:] + [f"--ready-file={ready}"]
        if secret:
            argv.append(f"--secret-file={self.secret_file}")
        log = open(os.path.join(self.dir, name + ".log"), "a")
        self.logs.append(log)
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        self.procs[name] = proc
        return wait_ready(ready, proc)

    def kill_and_restart_scheduler(self):
        proc = self.procs["scheduler"]
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        self.start_scheduler(self.scheduler)  # same port, same journal

    def stop(self):
        for p in reversed(list(self.procs.values())):
            p.terminate()
        for p in self.procs.values():
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        for log in self.logs:
            log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def question(i, **kwargs):
    return corral.SingleTurnTask(id=f"q{i}", prompt=f"What is {i} + 10?", answer=i + 10, reward="gsm8k",
                                 seed_sampling=True, **kwargs)


class SdkTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cluster = Cluster()
        cls.client = corral.Client(cls.cluster.scheduler, secret_file=cls.cluster.secret_file)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.cluster.stop()

    def test_a_weight_update_pauses_generation_and_its_version_reaches_the_results(self):
        with self.client.weight_update(5) as paused:
            self.assertEqual(paused.replicas, 1)
            self.assertEqual(paused.aborted, 0)
        batch = self.client.submit([question(1)], batch_id="sdk-policy")
        [r] = list(batch.results())
        self.assertEqual(r.status, s.EPISODE_STATUS_FINISHED, r.failure_message)
        self.assertEqual((r.first_policy_version, r.last_policy_version), (5, 5))
        with self.assertRaises(corral.CorralError) as e:
            self.client.update_policy(4)
        self.assertEqual(e.exception.code, grpc.StatusCode.FAILED_PRECONDITION)
        self.assertEqual(self.client.update_policy(6), 5)
        with self.assertRaises(ValueError):
            self.client.pause_generation("sometimes")

    def test_calls_without_the_cluster_secret_are_refused(self):
        with corral.Client(self.cluster.scheduler) as anonymous:
            with self.assertRaises(corral.CorralError) as e:
                anonymous.batch("anything")
        self.assertEqual(e.exception.code, grpc.StatusCode.UNAUTHENTICATED)

    def test_whole_groups_become_training_samples_and_are_acknowledged(self):
        batch = self.client.submit([question(i) for i in range(6)], group_size=4, seed=7, batch_id="sdk-groups")
        self.assertEqual(batch.group_size, 4)
        self.assertEqual(batch.seed, 7)
        groups = list(batch.groups())
        self.assertEqual(len(groups), 6)
        for group in groups:
            self.assertEqual(len(group), 4)
            self.assertEqual(len({r.ids.group_id for r in group}), 1)
            advantages = corral.rl.group_advantages(group)
            self.assertEqual(set(advantages), {r.ids.episode_id for r in group})
            for r in group:
                self.assertEqual(r.status, s.EPISODE_STATUS_FINISHED, r.failure_message)
                # The scripted model is wrong by one for one seed in four; the reward says which.
                answer = r.trajectory.branches[-1].messages[-1].message.content
                right = answer.endswith(f"#### {int(r.ids.task_id[1:]) + 10}")
                self.assertEqual(r.reward, 1.0 if right else 0.0, answer)
                sample = corral.rl.to_training_sample(r)
                self.assertEqual(sample.episode_id, r.ids.episode_id)
                self.assertGreater(len(sample.prompt_ids), 0)
                self.assertGreater(len(sample.response_ids), 0)
                self.assertEqual(sample.loss_mask, [1] * len(sample.response_ids))  # one call: all generated
                self.assertEqual(len(sample.logprobs), len(sample.response_ids))
                self.assertEqual(sample.reward, r.reward)
                self.assertTrue(sample.tokens_consistent)
            rewards = [r.reward for r in group]
            self.assertAlmostEqual(sum(advantages.values()), 0.0, places=6)
            for r in group:  # above the group's mean exactly when right
                self.assertEqual(advantages[r.ids.episode_id] > 0, r.reward > sum(rewards) / 4 and len(set(rewards)) > 1)
        progress = batch.progress
        self.assertEqual(progress.state, "complete")
        self.assertEqual((progress.finished, progress.acked), (24, 24))
        all_rewards = [r.reward for g in groups for r in g]
        self.assertAlmostEqual(progress.mean_reward, sum(all_rewards) / 24)
        # What they cost: one call each, its tokens the trajectory's; no sandbox, so nothing measured (None, not 0).
        results = [r for g in groups for r in g]
        for r in results:
            u = corral.usage.usage_of(r)
            self.assertEqual(u["llm_calls"], 1)
            self.assertEqual(u["prompt_tokens"], r.trajectory.usage.prompt_tokens)
            self.assertEqual(u["by_role"]["agent"]["completion_tokens"], r.trajectory.usage.completion_tokens)
            self.assertIsNone(u["cpu_seconds"])
            self.assertEqual(corral.rl.to_training_sample(r).usage, u)
        summary = corral.usage.summarize(results)
        self.assertEqual((summary.totals["episodes"], summary.totals["measured"], summary.totals["llm_calls"]),
                         (24, 0, 24))
        self.assertEqual(summary.totals["prompt_tokens"], sum(r.trajectory.usage.prompt_tokens for r in results))
        self.assertEqual(len(summary.by_task), 6)
        self.assertEqual(summary.by_task["q0"]["episodes"], 4)
        self.assertIn("24 episode(s), 0 with a measured sandbox", str(summary))
        # Everything acknowledged: a new iteration has nothing left to give.
        self.assertEqual(list(self.client.batch("sdk-groups").results()), [])

    def test_a_scheduler_killed_mid_stream_is_resumed_from_the_cursor(self):
        slow = {"fake": {"ttft_ms": 150}}  # so the batch is still running when the scheduler dies
        batch = self.client.submit([question(i, params=slow) for i in range(6)], group_size=4, batch_id="sdk-resume")
        seen = []
        for result in batch.results(exclude_trajectories=True, ack_every=1):
            seen.append(result.ids.episode_id)
            if len(seen) == 5:
                self.cluster.kill_and_restart_scheduler()
        self.assertEqual(len(seen), 24)
        self.assertEqual(len(set(seen)), 24)  # each once: the new stream starts after the cursor
        progress = batch.wait(timeout=60)
        self.assertEqual((progress.finished, progress.acked), (24, 24))

    def test_a_stream_takes_appended_tasks_across_a_scheduler_restart_and_ends_once_closed(self):
        stream = self.client.submit([question(i) for i in range(2)], group_size=2, groups_in_flight=2,
                                    batch_id="sdk-stream")
        self.assertTrue(stream.info.input_open)
        self.assertEqual(stream.append([question(i) for i in range(2, 4)]), 4)
        with self.assertRaises(corral.CorralError) as e:
            stream.append([question(3)])
        self.assertEqual(e.exception.code, grpc.StatusCode.ALREADY_EXISTS)
        with self.assertRaises(corral.CorralError) as e:
            self.client.batch("sdk-stream").append([{"id": "no-prompt", "answer": 1}])
        self.assertEqual(e.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        seen = []
        for result in stream.results(exclude_trajectories=True, ack_every=1):
            seen.append(result.ids.task_id)
            if len(seen) == 4:
                # The appended tasks are journaled: a restarted scheduler still has them, and takes more.
                self.cluster.kill_and_restart_scheduler()
                self.assertEqual(stream.append([question(i) for i in range(4, 6)], close=True), 6)
        self.assertEqual(sorted(seen), sorted(f"q{i}" for i in range(6) for _ in range(2)))
        progress = stream.wait(timeout=60)
        self.assertEqual((progress.state, progress.finished), ("complete", 12))
        self.assertFalse(stream.info.input_open)
        with self.assertRaises(corral.CorralError) as e:
            stream.append([question(9)])
        self.assertEqual(e.exception.code, grpc.StatusCode.FAILED_PRECONDITION)

    def test_batch_overrides_replace_the_tasks_fields(self):
        # The tasks ask for an exact match, which the scripted model's "... #### N" never is; the override asks
        # for GSM8K, which reads the number after ####.
        tasks = [corral.SingleTurnTask(id=f"o{i}", prompt=f"What is {i} + 10?", answer=i + 10, reward="exact")
                 for i in range(3)]
        batch = self.client.submit(tasks, group_size=2, batch_id="sdk-overrides", model="fake-model",
                                   overrides={"reward": {"function": "gsm8k"}})
        self.assertEqual(batch.info.spec.overrides.reward.function, s.REWARD_FUNCTION_GSM8K)
        self.assertEqual(batch.info.spec.overrides.llm.model, "fake-model")
        results = list(batch.results())
        self.assertEqual(len(results), 6)
        for r in results:
            answer = r.trajectory.branches[-1].messages[-1].message.content
            right = answer.endswith(f"#### {int(r.ids.task_id[1:]) + 10}")
            self.assertEqual(r.reward, 1.0 if right else 0.0, answer)  # exact matching would give 0.0 always

    def test_results_can_be_consumed_with_asyncio(self):
        batch = self.client.submit([question(i) for i in range(2)], group_size=4, batch_id="sdk-async")

        async def consume():
            return [r.ids.episode_id async for r in batch.aresults(exclude_trajectories=True)]
        ids = asyncio.run(consume())
        self.assertEqual(sorted(ids), sorted(f"sdk-async:g{g}:e{e}" for g in range(2) for e in range(4)))
        self.assertEqual(batch.progress.acked, 8)

    def test_cancel_ends_a_running_batch_with_cancelled_results(self):
        slow = {"fake": {"ttft_ms": 20000}}  # the model would take 20 s
        batch = self.client.submit([question(i, params=slow) for i in range(3)], group_size=2, batch_id="sdk-cancel")
        deadline = time.time() + 30
        while batch.progress.running < 6 and time.time() < deadline:
            time.sleep(0.05)
        self.assertEqual(batch.cancel("trainer stopped"), 6)
        started = time.time()
        results = list(batch.results(exclude_trajectories=True))
        self.assertLess(time.time() - started, 10)
        self.assertEqual(len(results), 6)
        for r in results:
            self.assertEqual(r.status, s.EPISODE_STATUS_CANCELLED)
            self.assertIn("trainer stopped", r.failure_message)
        self.assertEqual(batch.progress.state, "cancelled")

    def test_bad_tasks_are_refused_naming_the_task_and_nothing_is_submitted(self):
        with self.assertRaisesRegex(ValueError, "exactly one of prompt and messages"):
            self.client.submit([corral.SingleTurnTask(id="empty")])
        with self.assertRaises(corral.CorralError) as e:
            self.client.submit([question(1), {"id": "no-prompt", "answer": 1}], batch_id="sdk-bad")
        self.assertEqual(e.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("task 'no-prompt'", e.exception.message)
        with self.assertRaises(corral.CorralError) as e:
            self.client.batch("sdk-bad")
        self.assertEqual(e.exception.code, grpc.StatusCode.NOT_FOUND)

    def test_the_local_cluster_is_found_through_its_cluster_json(self):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "cluster.json"), "w") as f:
                json.dump({"secret_file": self.cluster.secret_file, "scheduler": {"grpc": self.cluster.scheduler}}, f)
            with corral.Client(cluster_dir=d) as local:
                batch = local.submit([question(3)], batch_id="sdk-local")
                self.assertEqual([r.status for r in batch.results()], [s.EPISODE_STATUS_FINISHED])
        with self.assertRaisesRegex(FileNotFoundError, "corral up"):
            corral.Client(cluster_dir="/nonexistent")


    def test_the_trainer_examples_run_a_step(self):
        for script in ("verl_style_grpo.py", "roll_style_env_manager.py"):
            out = subprocess.run([sys.executable, os.path.join(ARGS.repo, "examples", "trainers", script),
                                  "--scheduler", self.cluster.scheduler, "--secret-file", self.cluster.secret_file,
                                  "--group-size", "2", "--steps", "2"],
                                 capture_output=True, text=True, timeout=120)
            self.assertEqual(out.returncode, 0, out.stderr)
            lines = out.stdout.splitlines()
            self.assertEqual([line.split(":")[0] for line in lines], ["step 0", "step 1"], out.stdout)
            self.assertIn("24 ", lines[0])  # 12 tasks x group size 2 (no episode fails against the scripted model)

    def test_the_async_trainer_example_trains_k1_off_policy_with_dynamic_sampling(self):
        out = subprocess.run([sys.executable, os.path.join(ARGS.repo, "examples", "trainers", "async_grpo.py"),
                              "--scheduler", self.cluster.scheduler, "--secret-file", self.cluster.secret_file,
                              "--steps", "3"], capture_output=True, text=True, timeout=180)
        self.assertEqual(out.returncode, 0, out.stderr)
        lines = out.stdout.splitlines()
        self.assertEqual([line.split(":")[0] for line in lines[1:4]], ["step 0", "step 1", "step 2"], out.stdout)
        for line in lines[1:4]:
            self.assertRegex(line, r"accepted 2 groups, filtered \d+, staleness \{[0-9: ]+\}, wasted \d+, samples 8,")
        # Nothing trained on was more than one version behind (k = 1).
        for hist in re.findall(r"staleness \{([0-9: ]+)\}", out.stdout):
            self.assertTrue(all(int(k) <= 1 for k, _ in (kv.split(":") for kv in hist.split())), out.stdout)
        self.assertRegex(lines[-1], r"done: 6 groups passed, \d+ filtered, \d+ surplus of \d+ started")


    def corral_run(self, *args):
        return [os.path.join(ARGS.bin, "corral"), "run", *args, "--scheduler", self.cluster.scheduler,
                "--secret-file", self.cluster.secret_file]

    def test_corral_run_shows_progress_then_a_summary_and_writes_every_result(self):
        out_file = os.path.join(self.cluster.dir, "run.jsonl")
        run = subprocess.run(self.corral_run(os.path.join(ARGS.repo, "examples/datasets/word_problems.jsonl"),
                                             "--group-size", "2", "--out", out_file, "--progress-every", "0"),
                             capture_output=True, text=True, timeout=120)
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertIn("12 task(s) x 2 = 24 episode(s)", run.stderr)
        self.assertRegex(run.stderr, r"24/24 ended · 0 running · 0 queued · [0-9.]+ eps/s · reward")
        self.assertIn("24 episode(s) in", run.stdout)
        self.assertRegex(run.stdout, r"status\s+finished 24")
        self.assertRegex(run.stdout, r"crates\s+2\s+[01]\.\d{3}")  # a reward row per task
        self.assertRegex(run.stdout, r"total\s+24\s")                # phase percentiles
        self.assertIn("slowest episodes", run.stdout)
        with open(out_file) as f:
            results = [json.loads(line) for line in f]
        self.assertEqual(len(results), 24)
        self.assertTrue(all(r["trajectory"]["branches"] for r in results))
        self.assertEqual(len({r["ids"]["episode_id"] for r in results}), 24)

    def test_ctrl_c_during_corral_run_cancels_the_batch_and_still_summarizes(self):
        dataset = os.path.join(self.cluster.dir, "slow.jsonl")
        with open(dataset, "w") as f:
            for i in range(2):  # the model would take 20 s to answer
                f.write(json.dumps({"id": f"slow{i}", "prompt": f"What is {i} + 1?", "answer": i + 1,
                                    "llm": {"params_json": json.dumps({"fake": {"ttft_ms": 20000}})}}) + "\n")
        proc = subprocess.Popen(self.corral_run(dataset, "--group-size", "2", "--batch-id", "cli-ctrl-c"),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                if self.client.batch("cli-ctrl-c").progress.running == 4:
                    break
            except corral.CorralError:
                pass  # not submitted yet
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
        self.assertEqual(proc.returncode, 130, stderr)
        self.assertIn("cancelling batch cli-ctrl-c", stderr)
        self.assertRegex(stdout, r"status\s+cancelled 4")
        self.assertEqual(self.client.batch("cli-ctrl-c").progress.state, "cancelled")


    def test_corral_top_shows_the_running_batches_and_the_proxy(self):
        slow = {"fake": {"ttft_ms": 20000}}
        batch = self.client.submit([question(i, params=slow) for i in range(2)], group_size=2, batch_id="top-batch")
        deadline = time.time() + 30
        while batch.progress.running < 4 and time.time() < deadline:
            time.sleep(0.05)
        top = subprocess.run([os.path.join(ARGS.bin, "corral"), "top", "--once", "--scheduler", self.cluster.scheduler,
                              "--secret-file", self.cluster.secret_file, "--proxy", self.cluster.proxy],
                             capture_output=True, text=True, timeout=60)
        batch.cancel("seen")
        self.assertEqual(top.returncode, 0, top.stderr)
        self.assertIn("(no sandbox hosts: single_turn episodes only)", top.stdout)
        self.assertRegex(top.stdout, r"top-batch\s+4\s+0\s+4\s+0\s+0\s+-")
        self.assertRegex(top.stdout, r"proxy 127\.0\.0\.1:\d+: 4 open session\(s\)")
        list(batch.results(exclude_trajectories=True))


class FakeSchedulerTest(unittest.TestCase):
    """A test against a scheduler servicer of its own, served by real gRPC on loopback."""

    def serve(self, servicer):
        from concurrent import futures
        from corral.v1 import scheduler_pb2_grpc
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        scheduler_pb2_grpc.add_SchedulerServicer_to_server(servicer, self.server)
        port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()
        self.client = corral.Client(f"127.0.0.1:{port}", timeout=10)

    def tearDown(self):
        self.client.close()
        self.server.stop(None)


class RetryTest(FakeSchedulerTest):
    """A scheduler that is briefly unreachable (restarting, or a connection the channel has not yet seen die)
    costs an idempotent call a retry, not an error; Submit is never repeated."""

    def setUp(self):
        from corral.v1 import scheduler_pb2_grpc
        calls = self.calls = {"GetBatch": 0, "Submit": 0}

        class Flaky(scheduler_pb2_grpc.SchedulerServicer):
            def GetBatch(self, request, context):
                calls["GetBatch"] += 1
                if calls["GetBatch"] < 3:
                    context.abort(grpc.StatusCode.UNAVAILABLE, "restarting")
                return s.Batch(batch_id=request.batch_id)

            def Submit(self, request_iterator, context):
                calls["Submit"] += 1
                for _ in request_iterator:
                    pass
                context.abort(grpc.StatusCode.UNAVAILABLE, "restarting")

        self.serve(Flaky())

    def test_get_batch_is_retried_while_the_scheduler_is_unavailable(self):
        self.assertEqual(self.client.batch("b-1").id, "b-1")
        self.assertEqual(self.calls["GetBatch"], 3)

    def test_submit_is_not_repeated(self):
        with self.assertRaises(corral.CorralError) as raised:
            self.client.submit([question(1)], batch_id="b-2")
        self.assertIn("UNAVAILABLE", str(raised.exception))
        self.assertEqual(self.calls["Submit"], 1)


class ResultStreamTest(FakeSchedulerTest):
    """results() and aresults() are one loop: a stream that breaks mid-batch is re-opened from the last cursor, and
    what was delivered before the break is acknowledged before the stream is re-opened (else those results would
    come again)."""

    def setUp(self):
        from corral.v1 import common_pb2, scheduler_pb2_grpc
        events = self.events = []

        def result(k):
            return s.StreamResultsResponse(result=s.EpisodeResult(
                ids=common_pb2.EpisodeIds(batch_id="b", episode_id=f"b:g0:e{k}"), cursor=str(k + 1)))

        class Breaking(scheduler_pb2_grpc.SchedulerServicer):
            def StreamResults(self, request, context):
                events.append(("stream", request.cursor))
                if request.cursor == "":
                    yield result(0)
                    yield result(1)
                    context.abort(grpc.StatusCode.UNAVAILABLE, "restarting")
                for k in range(int(request.cursor), 3):
                    yield result(k)

            def Ack(self, request, context):
                events.append(("ack", list(request.episode_ids)))
                return s.AckResponse(acked=len(request.episode_ids))

            def GetBatch(self, request, context):
                return s.Batch(batch_id=request.batch_id)

        self.serve(Breaking())

    EXPECTED = [("stream", ""), ("ack", ["b:g0:e0", "b:g0:e1"]), ("stream", "2"), ("ack", ["b:g0:e2"])]

    def test_results_acknowledge_before_reopening_from_the_cursor(self):
        ids = [r.ids.episode_id for r in self.client.batch("b").results(reconnect_for_s=5)]
        self.assertEqual(ids, ["b:g0:e0", "b:g0:e1", "b:g0:e2"])
        self.assertEqual(self.events, self.EXPECTED)

    def test_aresults_do_exactly_the_same(self):
        async def consume():
            return [r.ids.episode_id async for r in self.client.batch("b").aresults(reconnect_for_s=5)]
        self.assertEqual(asyncio.run(consume()), ["b:g0:e0", "b:g0:e1", "b:g0:e2"])
        self.assertEqual(self.events, self.EXPECTED)


class DatasetTest(unittest.TestCase):
    def test_the_example_jsonl_dataset_loads_with_its_conveniences(self):
        tasks = corral.load_jsonl(os.path.join(ARGS.repo, "examples/datasets/arithmetic.jsonl"))
        self.assertGreater(len(tasks), 3)
        first = tasks[0]
        self.assertEqual((first.id, first.answer, first.runner), ("add-17-25", "42", s.RUNNER_TOOL_LOOP))
        self.assertEqual(first.reward.function, s.REWARD_FUNCTION_NUMERIC)
        self.assertEqual(first.tool_loop.tools[0].kind, s.TOOL_KIND_CODE_INTERPRETER)
        self.assertEqual(json.loads(first.metadata_json), {"level": "easy"})

    def test_the_example_environment_dataset_inlines_its_server_and_json_fields(self):
        tasks = corral.load_jsonl(os.path.join(ARGS.repo, "examples/environments/arithmetic_drill/dataset.jsonl"))
        first = tasks[0]
        self.assertEqual(first.runner, s.RUNNER_ENVIRONMENT)
        self.assertEqual((first.env_server.port, json.loads(first.env_server.reset_json)), (8000, {"questions": 3}))
        with open(os.path.join(ARGS.repo, "examples/environments/arithmetic_drill/server.py"), "rb") as f:
            self.assertEqual(first.environment.files[0].content, f.read())  # content_file, relative to the dataset
        self.assertEqual(tasks[2].env_server.unix_socket, "/workspace/env.sock")
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl") as f:
            f.write('{"id": "a", "prompt": "x", "environment": {"files": [{"path": "p", "content_file": "nope"}]}}\n')
            f.flush()
            with self.assertRaisesRegex(ValueError, r"line 1: content_file: cannot read .*nope"):
                corral.load_jsonl(f.name)

    def test_a_bad_line_is_named(self):
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl") as f:
            f.write('{"id": "a", "prompt": "x"}\n\n{"id": "b", "runner": "warp_drive", "prompt": "y"}\n')
            f.flush()
            with self.assertRaisesRegex(ValueError, r"line 3: .*RUNNER_WARP_DRIVE"):
                corral.load_jsonl(f.name)

    def test_a_harbor_task_directory_becomes_an_agent_task(self):
        with tempfile.TemporaryDirectory() as root:
            task = os.path.join(root, "fix-the-sum")
            os.makedirs(os.path.join(task, "environment", "src"))
            os.makedirs(os.path.join(task, "tests"))
            os.makedirs(os.path.join(task, "solution"))
            files = {
                "task.toml": '[metadata]\ndifficulty = "easy"\n[agent]\ntimeout_sec = 120.0\n'
                             '[verifier]\ntimeout_sec = 30.0\n[environment]\nmemory_mb = 512\n',
                "instruction.md": "Fix sum.py so that it prints 5.\n",
                "environment/Dockerfile": "FROM python:3.11-slim\nWORKDIR /app\nENV MODE=test LEVEL=1\n"
                                          "COPY src/ /app/\nRUN python3 -c 'print(1)' \\\n && true\n",
                "environment/src/sum.py": "print(2 + 2)\n",
                "tests/test.sh": "python3 /app/sum.py | grep -qx 5 && echo 1 > /logs/verifier/reward.txt\n",
                "solution/solve.sh": "sed -i 's/2 + 2/2 + 3/' /app/sum.py\n",
            }
            for path, content in files.items():
                with open(os.path.join(task, path), "w") as f:
                    f.write(content)
            t = corral.load_harbor(task, agent="my-agent --fast").to_proto()
            # The C++ loader's rule too: tests/ is emptied of what the agent left before the tests go in.
            self.assertEqual([f.path for f in t.verifier.files], ["/app/tests/test.sh"])
            self.assertEqual(list(t.verifier.replace_paths), ["/app/tests"])
            (other,) = corral.load_harbor_dir(root, agent=["a"])
            self.assertEqual(other.id, "fix-the-sum")
            # Or an installed harness by name, with variables of its own.
            (by_name,) = corral.load_harbor_dir(root, harness="codex")
            by_name.harness_env = {"CODEX_HOME": "/workspace/.codex"}
            as_proto = by_name.to_proto()
            self.assertEqual((as_proto.agent.harness, list(as_proto.agent.command.argv),
                              dict(as_proto.agent.command.env)), ("codex", [], {"CODEX_HOME": "/workspace/.codex"}))
            with self.assertRaisesRegex(ValueError, "the agent command or a harness"):
                corral.load_harbor(task, agent="a", harness="codex").to_proto()
            # With images, FROM is the image the template is built on; a prebuilt docker_image is used as is.
            in_image = corral.load_harbor(task, agent="a", use_image=True).to_proto().environment
            self.assertEqual(in_image.image, "python:3.11-slim")
            self.assertEqual(len(in_image.setup_commands), 1)
            with open(os.path.join(task, "task.toml"), "a") as f:
                f.write('docker_image = "registry.example/fix:1"\n')
            prebuilt = corral.load_harbor(task, agent="a", use_image=True).to_proto()
            self.assertEqual((prebuilt.environment.image, len(prebuilt.environment.setup_commands),
                              len(prebuilt.environment.setup_files), prebuilt.environment.workdir),
                             ("registry.example/fix:1", 0, 0, "/app"))
            self.assertEqual(json.loads(prebuilt.metadata_json)["image"], "registry.example/fix:1")
            # Nothing of an earlier stage carries into the last one; FROM an earlier stage is refused.
            staged = os.path.join(root, "staged")
            os.makedirs(os.path.join(staged, "environment"))
            with open(os.path.join(staged, "instruction.md"), "w") as f:
                f.write("x\n")
            with open(os.path.join(staged, "environment", "Dockerfile"), "w") as f:
                f.write("FROM golang AS build\nWORKDIR /src\nENV CGO_ENABLED=0\nFROM python\nRUN true\n")
            last = corral.load_harbor(staged, agent="a", use_image=True).to_proto().environment
            self.assertEqual((last.image, last.workdir, dict(last.env)), ("python", "", {}))
            self.assertNotIn("/src", last.task_paths)
            with open(os.path.join(staged, "environment", "Dockerfile"), "w") as f:
                f.write("FROM golang AS build\nFROM build\n")
            with self.assertRaisesRegex(ValueError, "FROM build builds on an earlier stage"):
                corral.load_harbor(staged, agent="a", use_image=True)
        self.assertEqual((t.id, t.runner, t.prompt), ("fix-the-sum", s.RUNNER_AGENT, "Fix sum.py so that it prints 5.\n"))
        self.assertEqual(list(t.agent.command.argv), ["bash", "-c", "my-agent --fast"])
        env = t.environment
        self.assertEqual(env.workdir, "/app")
        self.assertIn("/app", env.task_paths)
        self.assertEqual(dict(env.env), {"MODE": "test", "LEVEL": "1"})
        self.assertEqual([(f.path, f.content) for f in env.setup_files], [("/app/sum.py", b"print(2 + 2)\n")])
        self.assertEqual([list(c.argv) for c in env.setup_commands], [["bash", "-c", "python3 -c 'print(1)'   && true"]])
        self.assertEqual(env.limits.memory_bytes, 512 << 20)
        self.assertEqual([f.path for f in t.verifier.files], ["/app/tests/test.sh"])  # solution/ is never sent
        self.assertEqual((t.timeouts.agent.seconds, t.timeouts.verifier.seconds), (120, 30))
        self.assertEqual(json.loads(t.metadata_json), {"difficulty": "easy", "image": "python:3.11-slim"})


class HarborParityTest(unittest.TestCase):
    """One rule, two loaders: `corral run` reads Harbor task directories in C++, trainers with the Python SDK. On
    the same directories — the examples, and one with every task.toml and Dockerfile feature both read — the CLI's
    --dry-run tasks and the SDK's are the same protos, with and without images, for a command and a harness."""

    def cli_tasks(self, path, agent, use_image):
        cmd = [os.path.join(ARGS.bin, "corral"), "run", path, "--agent", agent, "--dry-run"]
        if use_image:
            cmd.append("--harbor-images")
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        self.assertEqual(done.returncode, 0, done.stderr)
        return [json_format.Parse(line, s.Task()) for line in done.stdout.splitlines()]

    def sdk_tasks(self, path, agent, use_image):
        kwargs = {"harness": agent} if agent in ("codex", "claude-code", "opencode") else {"agent": agent}
        return [t.to_proto() for t in corral.load_harbor_dir(path, use_image=use_image, **kwargs)]

    @staticmethod
    def strip_empty(msg):
        """Clears set-but-empty submessages: an empty `llm {}` or a zero timeout means the default, as an absent
        one does."""
        for field, value in msg.ListFields():
            if field.type != field.TYPE_MESSAGE:
                continue
            if field.label == field.LABEL_REPEATED:
                if not field.message_type.GetOptions().map_entry:
                    for item in value:
                        HarborParityTest.strip_empty(item)
            else:
                HarborParityTest.strip_empty(value)
                if value.ByteSize() == 0:  # empty, or made only of zero durations and empty parts
                    msg.ClearField(field.name)
        return msg

    def assert_same(self, path):
        for agent in ("python3 .corral/agent/run.py --fast", "codex"):
            for use_image in (False, True):
                cli, sdk = self.cli_tasks(path, agent, use_image), self.sdk_tasks(path, agent, use_image)
                self.assertEqual([t.id for t in cli], [t.id for t in sdk])
                for a, b in zip(cli, sdk):
                    # metadata_json is JSON text: equal as JSON, whatever the key order and spacing.
                    self.assertEqual(json.loads(a.metadata_json or "{}"), json.loads(b.metadata_json or "{}"), a.id)
                    a.metadata_json = b.metadata_json = ""
                    self.strip_empty(a)
                    self.strip_empty(b)
                    self.assertEqual(a, b, f"{a.id} (agent {agent!r}, images {use_image}):\n--- cli\n{a}\n--- sdk\n{b}")

    def test_the_example_tasks_load_the_same(self):
        self.assert_same(os.path.join(ARGS.repo, "examples", "tasks"))

    def test_every_feature_both_loaders_read_loads_the_same(self):
        with tempfile.TemporaryDirectory() as root:
            task = os.path.join(root, "all-features")
            for d in ("environment/src/pkg", "tests", "solution"):
                os.makedirs(os.path.join(task, d))
            files = {
                "task.toml": 'version = "1.0"\n[metadata]\ndifficulty = "hard"\ntags = ["a", "b"]\n'
                             'author.name = "Ada"\n[agent]\ntimeout_sec = 90.5\n[verifier]\ntimeout_sec = 20\n'
                             '[environment]\nmemory_mb = 1024\nbuild_timeout_sec = 300\n'
                             'docker_image = "registry.example/all:2"\n',
                "instruction.md": "Make it pass.\n\nEvery test.\n",
                "environment/Dockerfile": "FROM python:3.12-slim AS base\nWORKDIR /srv/app\n"
                                          "ENV A=1 B=two\nENV C 3\nCOPY src/ ./\n"
                                          "RUN pip --version \\\n && echo ok\n",
                "environment/src/main.py": "print('hi')\n",
                "environment/src/pkg/util.py": "X = 1\n",
                "tests/test.sh": "pytest -q /srv/app/tests\n",
                "tests/test_main.py": "def test_x():\n    assert True\n",
                "solution/solve.sh": "true\n",
            }
            for path, content in files.items():
                with open(os.path.join(task, path), "w") as f:
                    f.write(content)
            plain = os.path.join(root, "plain")
            os.makedirs(os.path.join(plain, "environment"))
            with open(os.path.join(plain, "instruction.md"), "w") as f:
                f.write("Read data.txt.\n")
            with open(os.path.join(plain, "environment", "data.txt"), "w") as f:
                f.write("42\n")
            self.assert_same(root)


class RlTest(unittest.TestCase):
    def test_a_multi_turn_token_view_splits_at_the_first_generated_token(self):
        r = s.EpisodeResult(status=s.EPISODE_STATUS_FINISHED, reward=0.5, step_rewards=[0.2, 0.3], llm_calls=2)
        r.ids.episode_id, r.ids.group_id = "b:g0:e1", "b:g0"
        branch = r.trajectory.branches.add(branch_id=0, tokens_consistent=True)
        branch.token_ids.extend([1, 2, 3, 10, 11, 4, 5, 12])
        branch.token_generated.extend([False, False, False, True, True, False, False, True])
        branch.token_logprobs.extend([0, 0, 0, -0.5, -0.25, 0, 0, -0.125])
        branch.token_versions.extend([-1, -1, -1, 6, 6, -1, -1, 7])  # an update between the two calls
        sample = corral.rl.to_training_sample(r)
        self.assertEqual(sample.versions, [6, 6, -1, -1, 7])
        self.assertEqual(sample.prompt_ids, [1, 2, 3])
        self.assertEqual(sample.response_ids, [10, 11, 4, 5, 12])
        self.assertEqual(sample.loss_mask, [1, 1, 0, 0, 1])
        self.assertEqual(sample.logprobs, [-0.5, -0.25, 0, 0, -0.125])
        self.assertEqual((sample.reward, sample.step_rewards, sample.status), (0.5, [0.2, 0.3], "finished"))

    def test_a_trajectory_without_token_ids_says_how_to_get_them(self):
        r = s.EpisodeResult(status=s.EPISODE_STATUS_FINISHED, reward=1.0, llm_calls=1)
        r.trajectory.branches.add(branch_id=0)
        with self.assertRaisesRegex(ValueError, "capture_token_ids"):
            corral.rl.to_training_sample(r)

    def test_samples_honour_roles_and_the_single_sample_is_the_agents_last_lineage(self):
        from corral.v1 import common_pb2 as c
        r = s.EpisodeResult(status=s.EPISODE_STATUS_FINISHED, reward=1.0, llm_calls=6)
        r.ids.episode_id = "b:g0:e0"
        counts = r.trajectory.calls_by_role
        counts.agent, counts.auxiliary, counts.retry, counts.compaction, counts.subagent = 2, 1, 1, 1, 1
        for i, role in enumerate([c.CALL_ROLE_AGENT, c.CALL_ROLE_AUXILIARY, c.CALL_ROLE_RETRY, c.CALL_ROLE_SUBAGENT,
                                  c.CALL_ROLE_COMPACTION, c.CALL_ROLE_AUXILIARY]):
            b = r.trajectory.branches.add(branch_id=i, role=role, tokens_consistent=True)
            if role in (c.CALL_ROLE_SUBAGENT, c.CALL_ROLE_COMPACTION):
                b.linked_branch = 0
            b.token_ids.extend([1, 100 + i])
            b.token_generated.extend([False, True])
        samples = corral.rl.to_training_samples(r)
        self.assertEqual([(x.branch_id, x.role) for x in samples], [(0, "agent"), (3, "subagent"), (4, "compaction")])
        self.assertEqual(samples[2].linked_branch, 0)
        self.assertIsNone(samples[0].linked_branch)
        self.assertEqual(samples[0].role_counts,
                         {"agent": 2, "auxiliary": 1, "retry": 1, "compaction": 1, "subagent": 1})
        every = corral.rl.to_training_samples(r, include=corral.rl.ROLES)
        self.assertEqual(len(every), 6)
        self.assertEqual([x.branch_id for x in corral.rl.to_training_samples(r, include=["auxiliary"])], [1, 5])
        # The agent's final conversation: its compaction continuation, not the side call recorded after it.
        self.assertEqual(corral.rl.to_training_sample(r).branch_id, 4)
        self.assertEqual(corral.rl.to_training_sample(r, branch=5).role, "auxiliary")
        with self.assertRaisesRegex(ValueError, "include takes roles"):
            corral.rl.to_training_samples(r, include=["titles"])
        # A trajectory of side calls only has no agent sample, and says nothing is wrong with its token ids.
        del r.trajectory.branches[0]
        del r.trajectory.branches[2:]
        self.assertIsNone(corral.rl.to_training_sample(r))

    def test_grpo_advantages_are_group_relative_and_skip_what_did_not_finish(self):
        self.assertEqual(corral.rl.grpo_advantages([1, 0, 1, 0], normalize_std=False), [0.5, -0.5, 0.5, -0.5])
        a = corral.rl.grpo_advantages([1, 0, 1, 0])
        self.assertAlmostEqual(a[0], 1.0, places=4)
        results = []
        for i, (status, reward) in enumerate([(s.EPISODE_STATUS_FINISHED, 1.0), (s.EPISODE_STATUS_FINISHED, 0.0),
                                              (s.EPISODE_STATUS_FAILED, None)]):
            r = s.EpisodeResult(status=status)
            if reward is not None:
                r.reward = reward
            r.ids.episode_id, r.ids.group_id = f"b:g0:e{i}", "b:g0"
            results.append(r)
        adv = corral.rl.group_advantages(results, normalize_std=False)
        self.assertEqual(adv, {"b:g0:e0": 0.5, "b:g0:e1": -0.5})

    def test_branch_advantages_compare_each_branch_with_its_siblings_at_each_point(self):
        # A 2 x 2 tree: leaves 0/0 and 0/1 under the first branch, 1/0 and 1/1 under the second; 1/1 failed.
        results = []
        for i, (path, status, reward) in enumerate([((0, 0), s.EPISODE_STATUS_FINISHED, 1.0),
                                                    ((0, 1), s.EPISODE_STATUS_FINISHED, 0.0),
                                                    ((1, 0), s.EPISODE_STATUS_FINISHED, 1.0),
                                                    ((1, 1), s.EPISODE_STATUS_FAILED, None)]):
            r = s.EpisodeResult(status=status)
            if reward is not None:
                r.reward = reward
            r.ids.episode_id, r.ids.group_id = f"b:g0:e{i}", "b:g0"
            r.branch.path.extend(path)
            r.branch.turns.extend([0, 1])
            results.append(r)
        adv = corral.rl.branch_advantages(results)
        # V() = 2/3; V(0) = 1/2, V(1) = 1; V(0,0) = 1, V(0,1) = 0, V(1,0) = 1.
        self.assertEqual(set(adv), {"b:g0:e0", "b:g0:e1", "b:g0:e2"})
        for got, want in [(adv["b:g0:e0"], [0.5 - 2 / 3, 0.5]), (adv["b:g0:e1"], [0.5 - 2 / 3, -0.5]),
                          (adv["b:g0:e2"], [1 - 2 / 3, 0.0])]:
            self.assertEqual(len(got), 2)
            for g, w in zip(got, want):
                self.assertAlmostEqual(g, w)
        # Tokens: turn 0's completion gets point 0's advantage, turn 1's point 1's, the rest 0.
        sample = corral.rl.TrainingSample(
            episode_id="b:g0:e1", group_id="b:g0", task_id="t", branch_id=0, prompt_ids=[1], response_ids=[2] * 6,
            loss_mask=[1, 1, 0, 0, 1, 1], logprobs=[0.0] * 6, reward=0.0, step_rewards=[], status="finished",
            tokens_consistent=True)
        tokens = corral.rl.branch_token_advantages(results[1], sample, adv["b:g0:e1"])
        self.assertEqual([round(t, 4) for t in tokens], [-0.1667, -0.1667, 0.0, 0.0, -0.5, -0.5])


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True)
    parser.add_argument("--repo", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
