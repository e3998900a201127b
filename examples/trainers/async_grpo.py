#!/usr/bin/env python3
"""An asynchronous GRPO loop, one policy version off (k = 1), with dynamic sampling on the server.

One long batch feeds every step. The scheduler keeps at most (k + 1 + steps trained) x N groups in flight
(admission by staleness), filters out groups whose rewards are all equal (DAPO: no advantage, no signal),
over-samples tasks until enough groups passed, and delivers the oldest policy version first. Between steps the
trainer pauses generation, "loads new weights" and resumes at the next version; the episodes in flight are cut
and continued after the resume, invisibly to the agents, and each token records which version produced it.

Per step it prints the groups accepted and filtered, the staleness of what it trained on (versions behind the
version being trained), and the episodes the scheduler had to run again because their result went stale
(wasted work). numpy stands in for torch; replace `policy_update` and `load_weights` with your trainer's.

    python3 examples/trainers/async_grpo.py                      # against the `corral up` cluster
    python3 examples/trainers/async_grpo.py --scheduler HOST:PORT --secret-file SECRET --steps 3
"""
import argparse
import collections
import os
import time

import numpy as np

import corral
from corral.v1 import scheduler_pb2

HERE = os.path.dirname(os.path.abspath(__file__))
FILTERED = scheduler_pb2.EPISODE_STATUS_FILTERED


def policy_update(samples, advantages):
    """Stand-in for the actor step: the policy-gradient loss at ratio 1, a token mean over the generated tokens."""
    num = sum(advantages[s.episode_id] * sum(s.loss_mask) for s in samples)
    den = sum(sum(s.loss_mask) for s in samples)
    return float(-num / max(den, 1))


def load_weights(version):
    """Stand-in for pushing the new weights to the inference servers (vLLM/SGLang weight sync)."""
    time.sleep(0.1)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default=os.path.join(HERE, "..", "datasets", "word_problems.jsonl"))
    parser.add_argument("--epochs", type=int, default=3, help="passes over the dataset the batch may sample from")
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--groups-per-step", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--max-staleness", type=int, default=1)
    parser.add_argument("--scheduler", help="HOST:PORT (default: the local `corral up` cluster)")
    parser.add_argument("--secret-file")
    args = parser.parse_args()

    client = corral.Client(args.scheduler, secret_file=args.secret_file)
    dataset = corral.load_jsonl(args.dataset)
    tasks = []
    for epoch in range(args.epochs):
        for task in dataset:
            t = scheduler_pb2.Task()
            t.CopyFrom(task)
            t.id = f"{task.id}-{epoch}"
            tasks.append(t)
    n = args.groups_per_step
    batch = client.submit(tasks, group_size=args.group_size, seed=int(time.time()),
                          max_staleness=args.max_staleness, step_groups=n,
                          group_filter={"drop_equal_rewards": True}, target_groups=n * args.steps,
                          group_failure_policy="replace")
    version = batch.info.spec.base_policy_version
    print(f"batch {batch.id}: {len(tasks)} tasks x {args.group_size}, {n} groups per step, k = {args.max_staleness}, "
          f"starting at policy version {version}")

    groups = batch.groups()  # whole groups, oldest policy version first; acknowledged as consumed
    wasted_before = 0
    for step in range(args.steps):
        accepted, filtered = [], 0
        while len(accepted) < n:
            group = next(groups)
            if any(r.status == FILTERED for r in group):
                filtered += 1
            else:
                accepted.append(group)
        results = [r for g in accepted for r in g]
        advantages = corral.rl.group_advantages(results)
        samples = [s for r in results if r.ids.episode_id in advantages for s in corral.rl.to_training_samples(r)]
        staleness = collections.Counter(version - r.first_policy_version for r in results)
        loss = policy_update(samples, advantages)
        # The weight update: nothing goes upstream while the weights load; calls in flight continue afterwards.
        with client.weight_update(version + 1, mode="abort") as paused:
            load_weights(version + 1)
        version += 1
        progress = batch.refresh()
        wasted, wasted_before = progress.stale_reruns - wasted_before, progress.stale_reruns
        hist = " ".join(f"{k}:{staleness[k]}" for k in sorted(staleness))
        print(f"step {step}: accepted {len(accepted)} groups, filtered {filtered}, staleness {{{hist}}}, "
              f"wasted {wasted}, samples {len(samples)}, mean reward {np.mean([s.reward for s in samples]):.3f}, "
              f"loss {loss:+.4f}, paused calls {paused.aborted + paused.held} -> version {version}")
    groups.close()
    p = batch.refresh()
    print(f"done: {p.groups_passed} groups passed, {p.groups_filtered} filtered, {p.groups_surplus} surplus of "
          f"{p.groups_started} started; {p.stale_reruns} stale re-runs")


if __name__ == "__main__":
    main()
