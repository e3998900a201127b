"""Corral's Python SDK: submit agentic-RL rollouts to a Corral cluster and train on the results.

    import corral
    client = corral.Client()                       # the local `corral up` cluster, or Client("host:port", ...)
    batch = client.submit(corral.load_jsonl("examples/datasets/arithmetic.jsonl"), group_size=4)
    for group in batch.groups():                   # whole GRPO groups, acknowledged as you go
        advantages = corral.rl.group_advantages(group)
        samples = [corral.rl.to_training_sample(r) for r in group]
"""
from corral import gym, rl, usage
from corral._version import __version__
from corral.auth import Tls, cluster_token, local_cluster
from corral.client import Batch, Client, CorralError, EpisodeResult, Progress
from corral.datasets import iter_jsonl, load_harbor, load_harbor_dir, load_jsonl, skip_listed
from corral.envs import AsyncEnvEpisode, EnvEpisode, Step
from corral.limits import Lease, LeaseLost, Limiter
from corral.tasks import (AgentTask, Command, Environment, File, SingleTurnTask, Timeouts, Tool, ToolLoopTask,
                          Verifier, task_from_dict, to_task)

__all__ = [
    "AgentTask", "AsyncEnvEpisode", "Batch", "Client", "Command", "CorralError", "EnvEpisode", "Environment",
    "EpisodeResult", "File", "Lease", "LeaseLost", "Limiter", "Progress", "SingleTurnTask", "Step", "Timeouts", "Tls", "Tool", "ToolLoopTask",
    "Verifier", "__version__", "cluster_token", "gym", "iter_jsonl", "load_harbor", "load_harbor_dir", "load_jsonl",
    "local_cluster", "rl", "skip_listed", "task_from_dict", "to_task", "usage",
]
