#!/usr/bin/env python3
"""Per-branch-point advantages from branching rollouts (Task.branch; docs/branching.md).

Each task of examples/datasets/branching.jsonl splits twice: at turn 0 into 2 branches (each forks the sandbox and
samples its own tool call), and at turn 1 each of those into 2 more (each samples its own answer). A group of 4 is
the 4 leaves of that tree. This script turns the leaves' rewards into segment advantages — for each branch point,
the mean reward under this branch minus the mean under its parent (TreeRL / SPO style) — puts them on the tokens
each segment generated, and takes a stand-in policy step (numpy instead of torch; replace `policy_update` with
your trainer's).

    python3 examples/trainers/branching_advantages.py                 # against the `corral up` cluster
    python3 examples/trainers/branching_advantages.py --scheduler HOST:PORT --secret-file SECRET --steps 2
"""
import argparse
import os

import numpy as np

import corral

HERE = os.path.dirname(os.path.abspath(__file__))


def policy_update(token_advantages, masks):
    """Stand-in for the actor step: the PPO-clip loss at ratio 1, a token-mean of -advantage over the mask."""
    total = sum(float(np.dot(a, m)) for a, m in zip(token_advantages, masks))
    return -total / max(sum(sum(m) for m in masks), 1)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default=os.path.join(HERE, "..", "datasets", "branching.jsonl"))
    parser.add_argument("--group-size", type=int, default=4, help="the leaves per tree (the counts' product)")
    parser.add_argument("--steps", type=int, default=1)
    parser.add_argument("--scheduler", help="HOST:PORT (default: the local `corral up` cluster)")
    parser.add_argument("--secret-file")
    args = parser.parse_args()

    client = corral.Client(args.scheduler, secret_file=args.secret_file)
    tasks = corral.load_jsonl(args.dataset)
    for step in range(args.steps):
        batch = client.submit(tasks, group_size=args.group_size, seed=step)
        token_advantages, masks, trees = [], [], 0
        for group in batch.groups():  # a tree's leaves arrive together
            advantages = corral.rl.branch_advantages(group)
            trees += 1
            for r in sorted(group, key=lambda r: list(r.branch.path)):
                path = "/".join(str(d) for d in r.branch.path)
                adv = advantages.get(r.ids.episode_id)
                shown = " ".join(f"{a:+.2f}" for a in adv) if adv is not None else "-"
                print(f"  {r.ids.task_id:<10} leaf {path}  split at turns {list(r.branch.turns)}  "
                      f"reward {r.reward:.1f}  advantages {shown}  shared calls {r.branch.prefix_calls}")
                if adv is None:
                    continue
                sample = corral.rl.to_training_sample(r)
                if sample is None:
                    continue
                token_advantages.append(np.asarray(corral.rl.branch_token_advantages(r, sample, adv)))
                masks.append(sample.loss_mask)
        loss = policy_update(token_advantages, masks)
        print(f"step {step}: {trees} trees, {len(masks)} leaves from batch {batch.id}, "
              f"trained tokens {sum(sum(m) for m in masks)}, loss {loss:+.4f}")


if __name__ == "__main__":
    main()
