#!/usr/bin/env python3
"""Where Corral plugs into a verl-style GRPO trainer: the rollout half of each step.

verl's agent loop yields, per trajectory, prompt_ids, response_ids, a response_mask (1 on the model's tokens, 0 on
tool output and other text the model did not write), the rollout logprobs and a reward; the trainer pads them
into one batch (its DataProto) and computes group-relative advantages. Here Corral is the rollout engine and numpy
stands in for torch — no trainer is installed. Replace `policy_update` with your actor's update.

    python3 examples/trainers/verl_style_grpo.py                      # against the `corral up` cluster
    python3 examples/trainers/verl_style_grpo.py --scheduler HOST:PORT --secret-file SECRET --steps 3
"""
import argparse
import os

import numpy as np

import corral

HERE = os.path.dirname(os.path.abspath(__file__))


def to_batch(samples, advantages, pad_id=0):
    """verl's layout: prompts left-padded, responses right-padded, the outcome reward on the last generated token."""
    n = len(samples)
    prompt_len = max(len(s.prompt_ids) for s in samples)
    response_len = max(len(s.response_ids) for s in samples)
    batch = {
        "prompts": np.full((n, prompt_len), pad_id, dtype=np.int64),
        "responses": np.full((n, response_len), pad_id, dtype=np.int64),
        "response_mask": np.zeros((n, response_len), dtype=np.float32),
        "old_log_probs": np.zeros((n, response_len), dtype=np.float32),
        "token_level_scores": np.zeros((n, response_len), dtype=np.float32),
        "advantages": np.zeros((n, response_len), dtype=np.float32),
    }
    for i, s in enumerate(samples):
        p, r = len(s.prompt_ids), len(s.response_ids)
        batch["prompts"][i, prompt_len - p:] = s.prompt_ids
        batch["responses"][i, :r] = s.response_ids
        batch["response_mask"][i, :r] = s.loss_mask
        batch["old_log_probs"][i, :r] = s.logprobs
        last = max(j for j, m in enumerate(s.loss_mask) if m)
        batch["token_level_scores"][i, last] = s.reward
        batch["advantages"][i, :r] = advantages[s.episode_id] * np.asarray(s.loss_mask, dtype=np.float32)
    return batch


def policy_update(batch):
    """Stand-in for the actor step: the PPO-clip loss at ratio 1 (new = old log-probs), a token-mean over the mask."""
    mask = batch["response_mask"]
    return float(-(batch["advantages"] * mask).sum() / max(mask.sum(), 1.0))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default=os.path.join(HERE, "..", "datasets", "word_problems.jsonl"))
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--scheduler", help="HOST:PORT (default: the local `corral up` cluster)")
    parser.add_argument("--secret-file")
    args = parser.parse_args()

    client = corral.Client(args.scheduler, secret_file=args.secret_file)
    tasks = corral.load_jsonl(args.dataset)
    for step in range(args.steps):
        batch = client.submit(tasks, group_size=args.group_size, seed=step)
        samples, advantages = [], {}
        for group in batch.groups():  # GRPO needs whole groups; they arrive as each one ends
            advantages.update(corral.rl.group_advantages(group))
            for result in group:
                sample = corral.rl.to_training_sample(result)
                if sample is not None and result.ids.episode_id in advantages:
                    samples.append(sample)
        data = to_batch(samples, advantages)
        loss = policy_update(data)
        rewards = [s.reward for s in samples]
        print(f"step {step}: {len(samples)} samples from batch {batch.id}, prompts {data['prompts'].shape}, "
              f"responses {data['responses'].shape}, trained tokens {int(data['response_mask'].sum())}, "
              f"mean reward {np.mean(rewards):.3f}, loss {loss:+.4f}")


if __name__ == "__main__":
    main()
