#!/usr/bin/env python3
"""The SDK against a whole `corral up` cluster (sandboxes included). Trainer-driven environments, as a trainer
whose own loop calls env.step drives them: the example arithmetic drill (examples/environments/arithmetic_drill)
runs in a sandbox, and the test plays it step by step through the SDK's EnvEpisode (its model calls going through
the episode's proxy session), through the asyncio twin (two episodes at once), and through the Gymnasium-compatible
adapter. Branching rollouts: a dataset whose tasks branch runs through `corral run` and the example trainer that
computes advantages per branch point.

Needs the sandbox host (`corral up` runs one only as root); skipped without it.

    BUILD/sdk-venv/bin/python env_sdk_test.py --bin BUILD/bin --repo REPO
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

ARGS = None


def asked(observation):
    """The sum the drill asks for: {"prompt": "Question 1 of 3: What is A + B?", ...}."""
    a, b = re.search(r"What is (\d+) \+ (\d+)\?", observation["prompt"]).groups()
    return int(a) + int(b)


def say(n):
    return {"message": f"The answer is {n}."}


class UpCluster(unittest.TestCase):
    """A `corral up --any-port` cluster for the class's tests (its sandbox host needs root)."""

    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("no sandbox host (corral up runs one only as root)")
        cls.dir = tempfile.mkdtemp(prefix="corral-env-sdk-")
        cls.up_log = open(os.path.join(cls.dir, "up.log"), "w+")
        cls.up = subprocess.Popen([os.path.join(ARGS.bin, "corral"), "up", "--any-port"], cwd=cls.dir,
                                  stdout=cls.up_log, stderr=subprocess.STDOUT)
        deadline = time.time() + 120
        while "Ctrl-C stops the cluster." not in cls.log():
            if cls.up.poll() is not None or time.time() > deadline:
                raise RuntimeError("corral up did not come up:\n" + cls.log())
            time.sleep(0.1)
        cls.cluster_dir = os.path.join(cls.dir, ".corral")
        cls.client = corral.Client(cluster_dir=cls.cluster_dir)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.up.send_signal(signal.SIGINT)
        code = cls.up.wait(timeout=60)
        log = cls.log()
        cls.up_log.close()
        shutil.rmtree(cls.dir, ignore_errors=True)
        assert code == 0, log

    @classmethod
    def log(cls):
        cls.up_log.flush()
        with open(cls.up_log.name) as f:
            return f.read()



class TrainerDrivenEnvironments(UpCluster):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        dataset = os.path.join(ARGS.repo, "examples", "environments", "arithmetic_drill", "dataset.jsonl")
        cls.task = corral.load_jsonl(dataset)[0]  # three questions, by port, max_turns 5

    def test_a_trainer_plays_the_drill_with_its_model_through_the_episodes_session(self):
        env = self.client.environment(self.task, batch_id="py-sync", labels={"trainer": "sdk-test"})
        observation = env.reset(seed=11)
        self.assertIn("Question 1 of 3", observation["prompt"])
        self.assertTrue(env.api_key and env.base_url.startswith("http://"))
        rewards, expected, conversation = [], [], []
        while True:  # one conversation: each observation is the next user message
            conversation.append({"role": "user", "content": observation["prompt"]})
            reply = env.chat(conversation)
            text = reply["choices"][0]["message"]["content"]
            conversation.append({"role": "assistant", "content": text})
            numbers = re.findall(r"-?\d+", text)
            expected.append(1.0 if numbers and int(numbers[-1]) == asked(observation) else 0.0)
            step = env.step({"message": text})
            rewards.append(step.reward)
            observation = step.observation
            if step.done:
                break
        self.assertEqual(step.turn, 3)
        self.assertFalse(step.truncated)
        self.assertEqual(rewards, expected, "each step's reward is the environment's verdict on the model's answer")
        self.assertEqual(step.info["done"], True)

        result = env.close()
        self.assertEqual(result.status, s.EPISODE_STATUS_FINISHED, result.failure_message)
        self.assertEqual(result.reward, sum(expected))
        self.assertEqual(list(result.step_rewards), expected)
        self.assertIs(env.close(), result, "closing again returns the same result")
        # The trainer's three model calls are the episode's trajectory (one branch: each call extends the last),
        # with token ids.
        self.assertEqual(len(result.trajectory.branches), 1)
        messages = [m.message for m in result.trajectory.branches[0].messages]
        self.assertEqual(sum(1 for m in messages if m.role == "assistant"), 3)
        self.assertIn("Question 3 of 3", " ".join(m.content for m in messages))
        self.assertTrue(len(result.trajectory.branches[0].token_ids) > 0)
        # Acknowledged by close(): the batch has its one result, delivered and taken.
        progress = self.client.batch("py-sync").refresh()
        self.assertEqual((progress.finished, progress.acked), (1, 1))
        with self.assertRaises(corral.CorralError) as e:
            env.step(say(1))
        self.assertEqual(e.exception.code, grpc.StatusCode.NOT_FOUND)

    def test_a_stock_openenv_server_is_driven_in_its_websocket_session_with_no_transport_named(self):
        # The drill as a stock OpenEnv server: its state lives only in /ws sessions (its HTTP /step acts on a
        # fresh drill, which would earn nothing). The task names no transport: the session is found.
        task = s.Task()
        task.CopyFrom(self.task)
        task.env_server.command.argv.extend(["--sessions", "openenv"])
        self.assertEqual(task.env_server.transport, s.ENV_TRANSPORT_UNSPECIFIED)
        env = self.client.environment(task, batch_id="py-openenv")
        observation = env.reset(seed=5)
        rewards = []
        while True:
            step = env.step(say(asked(observation)))
            rewards.append(step.reward)
            observation = step.observation
            if step.done:
                break
        self.assertEqual(rewards, [1.0, 1.0, 1.0])
        result = env.close()
        self.assertEqual(result.status, s.EPISODE_STATUS_FINISHED, result.failure_message)
        self.assertEqual(result.reward, 3.0)

    def test_the_asyncio_twin_drives_two_episodes_at_once(self):
        async def play(seed):
            async with self.client.aenvironment(self.task) as env:
                observation = await env.reset(seed=seed)
                first = asked(observation)
                step = await env.step(say(first))
                while not step.done:
                    step = await env.step(say(asked(step.observation)))
                return first, await env.close()

        async def both():
            return await asyncio.gather(play(21), play(22))

        (first_a, a), (first_b, b) = asyncio.run(both())
        for r in (a, b):
            self.assertEqual(r.status, s.EPISODE_STATUS_FINISHED, r.failure_message)
            self.assertEqual(r.reward, 3.0, "the optimal play")
            self.assertEqual(list(r.step_rewards), [1.0, 1.0, 1.0])
        self.assertNotEqual(a.ids.episode_id, b.ids.episode_id)
        self.assertNotEqual(first_a, first_b, "each seed asks its own questions")

    def test_the_gymnasium_adapter_resets_steps_truncates_and_closes(self):
        task = s.Task()
        task.CopyFrom(self.task)
        task.env_server.max_turns = 2  # fewer steps than questions: truncated, not terminated
        env = corral.gym.CorralEnv(self.client, task)
        observation, info = env.reset(seed=5)
        first = asked(observation)
        self.assertTrue(info["episode_id"] and info["api_key"])
        observation, reward, terminated, truncated, info = env.step(say(first))
        self.assertEqual((reward, terminated, truncated, info["turn"]), (1.0, False, False, 1))
        observation, reward, terminated, truncated, info = env.step(say(asked(observation) + 1))
        self.assertEqual((reward, terminated, truncated), (0.0, False, True))
        with self.assertRaises(corral.CorralError) as e:
            env.step(say(0))
        self.assertEqual(e.exception.code, grpc.StatusCode.FAILED_PRECONDITION)
        self.assertIn("max_turns (2)", e.exception.message)

        observation, info = env.reset(seed=5)  # a new episode; the last one's result is kept
        self.assertEqual(asked(observation), first, "the same seed asks the same questions")
        self.assertEqual(env.last_result.reward, 1.0)
        self.assertEqual(list(env.last_result.step_rewards), [1.0, 0.0])
        env.close()
        self.assertEqual(env.last_result.status, s.EPISODE_STATUS_FINISHED)
        self.assertEqual(len(env.last_result.step_rewards), 0)

    def test_bad_input_is_refused_before_anything_opens(self):
        env = self.client.environment(self.task)
        with self.assertRaises(RuntimeError):
            env.step(say(1))  # not open yet
        with self.assertRaises(corral.CorralError) as e:
            self.client.environment({"id": "no-server", "prompt": "hi"}).reset()
        self.assertEqual(e.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("task.env_server is required", e.exception.message)
        with self.assertRaises(ValueError):
            self.client.environment(self.task, trajectory_format="pictures")



class BranchingRollouts(UpCluster):
    """Task.branch through `corral run` and the example trainer (docs/branching.md)."""

    def test_a_branching_dataset_runs_through_corral_run_and_the_trainer_example(self):
        out_file = os.path.join(self.dir, "branching.jsonl")
        run = subprocess.run([os.path.join(ARGS.bin, "corral"), "run",
                              os.path.join(ARGS.repo, "examples/datasets/branching.jsonl"), "--group-size", "4",
                              "--out", out_file, "--progress-every", "0"], cwd=self.dir,
                             capture_output=True, text=True, timeout=180)
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertIn("4 task(s) x 4 = 16 episode(s)", run.stderr)
        with open(out_file) as f:
            results = [json.loads(line) for line in f]
        self.assertEqual(len(results), 16)
        trees = {}
        for r in results:
            self.assertEqual(r["status"], "EPISODE_STATUS_FINISHED", r.get("failure_message", r))
            trees.setdefault(r["ids"]["group_id"], []).append(r["branch"])
        for group, leaves in trees.items():
            paths = sorted(tuple(b.get("path", [])) for b in leaves)
            self.assertEqual(paths, [(0, 0), (0, 1), (1, 0), (1, 1)], group)
            for b in leaves:
                self.assertEqual(b["root_episode_id"], group + ":e0")
                self.assertEqual(b["turns"], [0, 1])
        example = os.path.join(ARGS.repo, "examples", "trainers", "branching_advantages.py")
        trainer = subprocess.run([sys.executable, example], cwd=self.dir, capture_output=True, text=True,
                                 timeout=180)
        self.assertEqual(trainer.returncode, 0, trainer.stderr)
        self.assertRegex(trainer.stdout, r"step 0: 4 trees, 16 leaves from batch \S+, trained tokens [1-9]\d*, loss")
        self.assertRegex(trainer.stdout, r"leaf 1/1  split at turns \[0, 1\]  reward [01]\.0  advantages [-+]")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True)
    parser.add_argument("--repo", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
