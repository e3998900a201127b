#!/usr/bin/env python3
"""Where Corral plugs into a ROLL-style trainer: an environment manager that feeds rollouts to the trainer
through a queue, asynchronously (ROLL Flash's idea: the next step's rollouts run while the trainer trains).

In ROLL an env manager steps environments, formats each finished episode for training and puts it on an output
queue that the trainer drains group by group. With Corral, the environments, the agent loop and the sandboxes
are Corral's; the manager only submits and formats. Plain Python with numpy, no trainer installed: `train_step`
is where your trainer's update goes.

    python3 examples/trainers/roll_style_env_manager.py               # against the `corral up` cluster
    python3 examples/trainers/roll_style_env_manager.py --scheduler HOST:PORT --secret-file SECRET
"""
import argparse
import os
import queue
import threading

import numpy as np

import corral

HERE = os.path.dirname(os.path.abspath(__file__))


class CorralEnvManager:
    """Runs one batch of groups per training step on Corral and puts each finished group on `output_queue`."""

    def __init__(self, client, tasks, group_size, output_queue):
        self.client, self.tasks, self.group_size, self.output = client, tasks, group_size, output_queue

    def run_rollout_loop(self, step):
        batch = self.client.submit(self.tasks, group_size=self.group_size, seed=step, labels={"step": str(step)})
        for group in batch.groups():
            self.output.put((step, self.formulate_rollouts(group)))
        self.output.put((step, None))  # the step's rollouts are complete

    @staticmethod
    def formulate_rollouts(group):
        advantages = corral.rl.group_advantages(group)
        rollouts = []
        for result in group:
            sample = corral.rl.to_training_sample(result)
            if sample is None or result.ids.episode_id not in advantages:
                continue  # failed episodes are infrastructure noise, not zero-reward samples
            rollouts.append({"input_ids": np.asarray(sample.input_ids), "response_mask": np.asarray(sample.loss_mask),
                             "old_log_probs": np.asarray(sample.logprobs), "score": sample.reward,
                             "advantage": advantages[result.ids.episode_id], "episode_id": sample.episode_id})
        return rollouts


def train_step(rollouts):
    """Stand-in for the trainer's update: returns the advantage-weighted token count it would train on."""
    return sum(r["advantage"] * r["response_mask"].sum() for r in rollouts)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default=os.path.join(HERE, "..", "datasets", "word_problems.jsonl"))
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--scheduler", help="HOST:PORT (default: the local `corral up` cluster)")
    parser.add_argument("--secret-file")
    args = parser.parse_args()

    client = corral.Client(args.scheduler, secret_file=args.secret_file)
    rollouts_queue = queue.Queue()
    manager = CorralEnvManager(client, corral.load_jsonl(args.dataset), args.group_size, rollouts_queue)
    # One step ahead: step N+1's rollouts start while step N trains.
    threads = [threading.Thread(target=manager.run_rollout_loop, args=(0,))]
    threads[0].start()
    for step in range(args.steps):
        if step + 1 < args.steps:
            threads.append(threading.Thread(target=manager.run_rollout_loop, args=(step + 1,)))
            threads[-1].start()
        rollouts, groups = [], 0
        while True:
            got_step, group = rollouts_queue.get()
            if group is None and got_step == step:
                break
            if group is None or got_step != step:
                rollouts_queue.put((got_step, group))  # the next step's: leave it for later
                continue
            rollouts.extend(group)
            groups += 1
        weight = train_step(rollouts)
        print(f"step {step}: {groups} groups, {len(rollouts)} rollouts, "
              f"mean score {np.mean([r['score'] for r in rollouts]):.3f}, weighted tokens {weight:+.2f}")
    for t in threads:
        t.join()


if __name__ == "__main__":
    main()
