"""A Gymnasium-compatible environment over a trainer-driven Corral episode (corral.envs): the environment server
runs in a sandbox of the cluster; this object has Gymnasium's API.

    env = corral.gym.CorralEnv(client, task)
    observation, info = env.reset(seed=7)          # info: episode_id, base_url, api_key, model (for the policy)
    observation, reward, terminated, truncated, info = env.step({"message": "The answer is 42."})
    env.close()                                     # env.last_result: the EpisodeResult (trajectory, rewards)

Each reset() opens a new episode and closes the one before (its result goes to `last_result`). When the
`gymnasium` package is installed the class is a gymnasium.Env; without it, it has the same methods.
Observations and actions are JSON values, so no space is declared (observation_space and action_space are None).
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

from corral.envs import EnvEpisode
from corral.tasks import TaskLike

try:  # optional: the API does not need it
    import gymnasium as _gymnasium
    _Base = _gymnasium.Env
except ImportError:  # pragma: no cover - depends on the machine
    _gymnasium = None
    _Base = object


class CorralEnv(_Base):
    metadata = {"render_modes": []}
    render_mode = None
    observation_space = None
    action_space = None

    def __init__(self, client, task: TaskLike, **episode_kwargs):
        """`episode_kwargs` as Client.environment (idle_timeout_s, labels, priority, ...)."""
        self._episode = EnvEpisode(client, task, **episode_kwargs)
        self.last_result = None

    def reset(self, *, seed: Optional[int] = None,
              options: Optional[Dict[str, Any]] = None) -> Tuple[Any, Dict[str, Any]]:
        """Opens a new episode; `options` are more arguments of the environment's POST /reset."""
        if _gymnasium is not None:
            super().reset(seed=seed)
        if self._episode.opened is not None and self._episode.result is None:
            self.last_result = self._episode.close()
        observation = self._episode.reset(seed=seed, reset_args=options)
        return observation, self._info()

    def step(self, action: Any) -> Tuple[Any, float, bool, bool, Dict[str, Any]]:
        step = self._episode.step(action)
        info = self._info()
        info["answer"] = step.info
        info["turn"] = step.turn
        return step.observation, float(step.reward or 0.0), step.done, step.truncated, info

    def close(self) -> None:
        if self._episode.opened is not None and self._episode.result is None:
            self.last_result = self._episode.close()

    @property
    def episode(self) -> EnvEpisode:
        return self._episode

    def _info(self) -> Dict[str, Any]:
        e = self._episode
        return {"episode_id": e.episode_id, "base_url": e.base_url, "api_key": e.api_key, "model": e.model}
