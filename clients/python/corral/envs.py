"""Trainer-driven environments: the scheduler runs an environment server (OpenEnv's HTTP shape) in a sandbox of its
cluster, and the trainer's own loop sends the actions — as SkyRL-gym and verifiers environments are driven.

    env = client.environment(task)               # a task with env_server (a dataset dict or a Task message)
    observation = env.reset(seed=7)              # the episode opens: sandbox placed, server started, POST /reset
    reply = env.chat([{"role": "user", "content": str(observation)}])   # through the episode's proxy session
    step = env.step({"message": reply["choices"][0]["message"]["content"]})
    ...                                          # step.observation, step.reward, step.done, step.truncated
    result = env.close()                         # the EpisodeResult: reward, step_rewards, trajectory

`AsyncEnvEpisode` (client.aenvironment(task)) is the asyncio twin; corral.gym.CorralEnv wraps either API as a
Gymnasium environment. The model's calls go through `env.base_url` with `env.api_key` (any OpenAI client), so
the episode's trajectory records them with their token ids.
"""
from __future__ import annotations

import asyncio
import dataclasses
import json
import urllib.request
from typing import Any, Dict, List, Optional

import grpc

from corral._rpc import TRAJECTORY_FORMATS as _TRAJECTORY_FORMATS
from corral._rpc import raise_rpc_error as _raise
from corral.tasks import TaskLike, to_task
from corral.v1 import scheduler_pb2, scheduler_pb2_grpc


@dataclasses.dataclass
class Step:
    """One answer of the environment."""
    observation: Any          # the answer's "observation", parsed from JSON
    reward: Optional[float]   # None when the environment gave none
    done: bool
    truncated: bool           # the episode took its max_turns steps without the environment saying done
    turn: int                 # steps taken so far (0 after the reset)
    info: Dict[str, Any]      # the whole answer as the environment sent it


def _step_of(m: scheduler_pb2.EnvironmentStep) -> Step:
    return Step(observation=json.loads(m.observation_json) if m.observation_json else None,
                reward=m.reward if m.HasField("reward") else None, done=m.done, truncated=m.truncated,
                turn=m.turn, info=json.loads(m.answer_json) if m.answer_json else {})


def _chat(base_url: str, api_key: str, body: Dict[str, Any], timeout: float) -> Dict[str, Any]:
    request = urllib.request.Request(base_url.rstrip("/") + "/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Authorization": "Bearer " + api_key,
                                              "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


class _Episode:
    """What the sync and the asyncio episode share: the requests they send and the state they keep."""

    def __init__(self, task: TaskLike, *, batch_id: str = "", priority: int = 0, max_attempts: int = 0,
                 labels: Optional[Dict[str, str]] = None, idle_timeout_s: Optional[float] = None,
                 open_timeout_s: float = 600.0, trajectory_format: str = "trajectory", ack: bool = True):
        if trajectory_format not in _TRAJECTORY_FORMATS:
            raise ValueError(f"trajectory_format must be one of {sorted(_TRAJECTORY_FORMATS)}")
        self._task = to_task(task)  # fail on a bad task before anything is sent
        self._batch_id = batch_id
        self._spec = dict(priority=priority, max_attempts=max_attempts, labels=labels or {})
        self._idle_timeout_s = idle_timeout_s
        self._open_timeout_s = open_timeout_s
        self._format = _TRAJECTORY_FORMATS[trajectory_format]
        self._ack = ack
        self._resets = 0
        self.opened: Optional[scheduler_pb2.OpenEnvironmentResponse] = None
        self.last: Optional[Step] = None
        self.result: Optional[scheduler_pb2.EpisodeResult] = None

    # The episode's proxy session, for the trainer's model calls (any OpenAI-compatible client).
    @property
    def episode_id(self) -> str:
        return self._require_open().ids.episode_id

    @property
    def base_url(self) -> str:
        return self._require_open().base_url

    @property
    def api_key(self) -> str:
        return self._require_open().api_key

    @property
    def model(self) -> str:
        return self._require_open().model

    def _require_open(self) -> scheduler_pb2.OpenEnvironmentResponse:
        if self.opened is None:
            raise RuntimeError("the environment is not open: call reset() first")
        return self.opened

    def _open_request(self, seed: Optional[int], reset_args: Optional[Dict[str, Any]]):
        spec = scheduler_pb2.BatchSpec(**self._spec)
        if self._batch_id:  # one batch per reset: the first gets the id, the next ones a numbered one
            spec.batch_id = self._batch_id if self._resets == 0 else f"{self._batch_id}-{self._resets}"
        self._resets += 1
        request = scheduler_pb2.OpenEnvironmentRequest(task=self._task, spec=spec,
                                                       reset_json=json.dumps(reset_args) if reset_args else "")
        if seed is not None:
            request.seed = seed
        if self._idle_timeout_s is not None:
            request.idle_timeout.FromNanoseconds(int(self._idle_timeout_s * 1e9))
        return request

    def _opened(self, response: scheduler_pb2.OpenEnvironmentResponse) -> Any:
        self.opened = response
        self.result = None
        self.last = _step_of(response.reset)
        return self.last.observation

    def _step_request(self, action: Any) -> scheduler_pb2.StepEnvironmentRequest:
        return scheduler_pb2.StepEnvironmentRequest(episode_id=self.episode_id, action_json=json.dumps(action))

    def _close_request(self, final_message: str) -> scheduler_pb2.CloseEnvironmentRequest:
        return scheduler_pb2.CloseEnvironmentRequest(episode_id=self.episode_id, final_message=final_message,
                                                     trajectory_format=self._format)

    def _chat_body(self, messages: List[Dict[str, Any]], params: Dict[str, Any]) -> Dict[str, Any]:
        body = dict(params)
        body["messages"] = messages
        if self.model and "model" not in body:
            body["model"] = self.model
        return body


class EnvEpisode(_Episode):
    """A trainer-driven environment episode (Client.environment). Each reset() opens a new episode (closing the
    one before); step(action) sends one action; close() ends it and returns its EpisodeResult (acknowledged,
    unless ack=False: then it is also delivered on the batch's results())."""

    def __init__(self, client, task: TaskLike, **kwargs):
        super().__init__(task, **kwargs)
        self._client = client

    def reset(self, seed: Optional[int] = None, reset_args: Optional[Dict[str, Any]] = None) -> Any:
        """Opens the episode and returns the reset's observation. `seed` is the reset's seed (default: the
        episode's), `reset_args` more arguments of POST /reset. CorralError when the episode could not open."""
        if self.opened is not None and self.result is None:
            self.close()
        request = self._open_request(seed, reset_args)
        return self._opened(self._client._call("OpenEnvironment", request, timeout=self._open_timeout_s))

    def step(self, action: Any) -> Step:
        """POST /step {"action": action}. CorralError when the step ended the episode (the message says why)."""
        self.last = _step_of(self._client._call("StepEnvironment", self._step_request(action)).step)
        return self.last

    def chat(self, messages: List[Dict[str, Any]], timeout: float = 600.0, **params) -> Dict[str, Any]:
        """One chat completion through the episode's proxy session (recorded in its trajectory)."""
        return _chat(self.base_url, self.api_key, self._chat_body(messages, params), timeout)

    def close(self, final_message: str = "") -> scheduler_pb2.EpisodeResult:
        """Ends the episode: its reward, step rewards and trajectory. Closing again returns the same result."""
        if self.result is not None:
            return self.result
        self.result = self._client._call("CloseEnvironment", self._close_request(final_message))
        if self._ack:
            self._client.ack([self.result.ids.episode_id])
        return self.result

    def __enter__(self) -> "EnvEpisode":
        return self

    def __exit__(self, *exc) -> None:
        if self.opened is not None and self.result is None:
            self.close()


class AsyncEnvEpisode(_Episode):
    """EnvEpisode for asyncio (Client.aenvironment): `await env.reset()`, `await env.step(action)`, `await
    env.close()`, on a grpc.aio channel of its own; `async with` closes it."""

    def __init__(self, client, task: TaskLike, **kwargs):
        super().__init__(task, **kwargs)
        self._client = client
        self._channel = None
        self._stub = None

    async def _call(self, method: str, request, timeout: Optional[float] = None):
        if self._stub is None:
            self._channel = self._client._aio_channel()
            self._stub = scheduler_pb2_grpc.SchedulerStub(self._channel)
        try:
            return await getattr(self._stub, method)(request, timeout=timeout or self._client.timeout,
                                                     metadata=self._client._metadata)
        except grpc.RpcError as e:
            _raise(e)

    async def reset(self, seed: Optional[int] = None, reset_args: Optional[Dict[str, Any]] = None) -> Any:
        if self.opened is not None and self.result is None:
            await self.close()
        request = self._open_request(seed, reset_args)
        return self._opened(await self._call("OpenEnvironment", request, timeout=self._open_timeout_s))

    async def step(self, action: Any) -> Step:
        self.last = _step_of((await self._call("StepEnvironment", self._step_request(action))).step)
        return self.last

    async def chat(self, messages: List[Dict[str, Any]], timeout: float = 600.0, **params) -> Dict[str, Any]:
        body = self._chat_body(messages, params)
        return await asyncio.to_thread(_chat, self.base_url, self.api_key, body, timeout)

    async def close(self, final_message: str = "") -> scheduler_pb2.EpisodeResult:
        if self.result is not None:
            return self.result
        self.result = await self._call("CloseEnvironment", self._close_request(final_message))
        if self._ack:
            await self._call("Ack", scheduler_pb2.AckRequest(episode_ids=[self.result.ids.episode_id]))
        return self.result

    async def aclose_channel(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = self._stub = None

    async def __aenter__(self) -> "AsyncEnvEpisode":
        return self

    async def __aexit__(self, *exc) -> None:
        try:
            if self.opened is not None and self.result is None:
                await self.close()
        finally:
            await self.aclose_channel()
