"""The scheduler client a trainer uses: submit a batch of tasks (GRPO groups), stream its results — acknowledged
as they are consumed, resumed from the last cursor after a disconnect — cancel it, wait for it."""
from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import random
import time
from contextlib import contextmanager
from typing import AsyncIterator, Callable, Dict, Iterable, Iterator, List, Optional, Union

import grpc
from google.protobuf import json_format

from corral import auth
from corral._rpc import TRAJECTORY_FORMATS, CorralError, raise_rpc_error  # noqa: F401 (CorralError: re-exported)
from corral.tasks import TaskLike, _normalize, to_task
from corral.v1 import common_pb2, scheduler_pb2, scheduler_pb2_grpc

log = logging.getLogger("corral")

EpisodeResult = scheduler_pb2.EpisodeResult

# gRPC codes after which a result stream is re-opened from its cursor: the connection or the scheduler went away.
_RETRYABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL,
              grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.ABORTED, grpc.StatusCode.CANCELLED}
_MAX_MESSAGE = 256 * 1024 * 1024  # a result carries its whole trajectory
# The calls that may be repeated safely are retried by gRPC itself when the scheduler is briefly unreachable (a
# restarted scheduler, a connection the channel has not yet noticed is dead). Submit is not: a repeated submit
# would be a second batch.
_SERVICE_CONFIG = json.dumps({"methodConfig": [{
    "name": [{"service": "corral.v1.Scheduler", "method": m}
             for m in ("GetBatch", "ListBatches", "ListHosts", "Ack", "Cancel", "Drain", "UpdatePolicy",
                       "PauseGeneration", "ResumeGeneration")],
    "retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.2s", "maxBackoff": "2s", "backoffMultiplier": 2,
                    "retryableStatusCodes": ["UNAVAILABLE"]}}]})
_CHUNK_BYTES = 2 * 1024 * 1024    # tasks per Submit message stay well under the 4 MiB limit
_PAUSE_MODES = {"drain": common_pb2.PAUSE_MODE_DRAIN, "abort": common_pb2.PAUSE_MODE_ABORT}
_GROUP_FAILURE_POLICIES = {"deliver": scheduler_pb2.GROUP_FAILURE_POLICY_DELIVER,
                           "drop": scheduler_pb2.GROUP_FAILURE_POLICY_DROP,
                           "replace": scheduler_pb2.GROUP_FAILURE_POLICY_REPLACE}
_TRAJECTORY_FORMATS = TRAJECTORY_FORMATS
_raise = raise_rpc_error


@dataclasses.dataclass
class Progress:
    """A batch's counts as the scheduler last reported them."""
    batch_id: str
    state: str  # "running", "complete", "cancelled"
    total: int
    queued: int
    running: int
    finished: int
    failed: int
    timeout: int
    cancelled: int
    no_data: int
    delivered: int
    acked: int
    retries: int
    fraction: float
    mean_reward: Optional[float]
    # Asynchronous RL (docs/async.md): FILTERED episodes, re-runs of too stale results, and groups by verdict.
    filtered: int = 0
    stale_reruns: int = 0
    groups_started: int = 0
    groups_passed: int = 0
    groups_filtered: int = 0
    groups_dropped: int = 0
    groups_surplus: int = 0

    @property
    def ended(self) -> int:
        return self.finished + self.failed + self.timeout + self.cancelled + self.no_data + self.filtered

    @property
    def done(self) -> bool:
        return self.state != "running"

    @classmethod
    def from_proto(cls, b: scheduler_pb2.Batch) -> "Progress":
        c, g = b.counts, b.groups
        return cls(batch_id=b.batch_id, state=scheduler_pb2.BatchState.Name(b.state)[len("BATCH_STATE_"):].lower(),
                   total=c.total, queued=c.queued, running=c.running, finished=c.finished, failed=c.failed,
                   timeout=c.timeout, cancelled=c.cancelled, no_data=c.no_data, delivered=c.delivered,
                   acked=c.acked, retries=c.retries, fraction=b.progress,
                   mean_reward=b.mean_reward if b.HasField("mean_reward") else None, filtered=c.filtered,
                   stale_reruns=c.stale_reruns, groups_started=g.started, groups_passed=g.passed,
                   groups_filtered=g.filtered, groups_dropped=g.dropped, groups_surplus=g.surplus)


def _chunks(tasks: List[scheduler_pb2.Task]) -> Iterator[List[scheduler_pb2.Task]]:
    """The tasks in runs that each stay well under gRPC's 4 MiB message limit."""
    chunk, size = [], 0
    for task in tasks:
        n = task.ByteSize()
        if chunk and size + n > _CHUNK_BYTES:
            yield chunk
            chunk, size = [], 0
        chunk.append(task)
        size += n
    if chunk:
        yield chunk


def _overrides(runner: Optional[str], model: Optional[str], overrides) -> scheduler_pb2.TaskOverrides:
    o = scheduler_pb2.TaskOverrides()
    if isinstance(overrides, scheduler_pb2.TaskOverrides):
        o.CopyFrom(overrides)
    elif overrides:
        # The same conveniences as a dataset line (enum short names, text file contents).
        json_format.ParseDict(_normalize(dict(overrides)), o)
    if runner:
        o.runner = scheduler_pb2.Runner.Value("RUNNER_" + runner.upper()) if not runner.startswith("RUNNER_") \
            else scheduler_pb2.Runner.Value(runner)
    if model:
        o.llm.model = model
    return o


class Client:
    """A connection to corral-scheduler.

    `address` is HOST:PORT; None means the local `corral up` cluster (read from `cluster_dir`/cluster.json,
    its secret file included). Authenticate with `secret_file` (the cluster secret: a token is minted from it)
    or a ready `token`; `tls` (an auth.Tls, or True for the system's CAs) encrypts the channel."""

    def __init__(self, address: Optional[str] = None, *, secret_file: Optional[str] = None,
                 token: Optional[str] = None, tls: Union[None, bool, auth.Tls] = None,
                 cluster_dir: str = ".corral", timeout: float = 30.0):
        self._options = [("grpc.max_receive_message_length", _MAX_MESSAGE),
                         ("grpc.max_send_message_length", _MAX_MESSAGE),
                         ("grpc.service_config", _SERVICE_CONFIG), ("grpc.enable_retries", 1)]
        connection = auth.connect("scheduler", address, secret_file=secret_file, token=token, tls=tls,
                                  cluster_dir=cluster_dir, options=self._options)
        self.address = connection.address
        self.timeout = timeout
        self._metadata = connection.metadata
        self._credentials = connection.credentials
        self._channel = connection.channel
        self._stub = scheduler_pb2_grpc.SchedulerStub(self._channel)

    # ---- plumbing

    def _call(self, method: str, request, timeout: Optional[float] = None):
        try:
            return getattr(self._stub, method)(request, timeout=timeout or self.timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            _raise(e)

    def _aio_channel(self):
        from grpc import aio
        return (aio.secure_channel(self.address, self._credentials, self._options) if self._credentials
                else aio.insecure_channel(self.address, self._options))

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- batches

    def submit(self, tasks: Iterable[TaskLike], *, group_size: int = 1, redundancy: int = 0,
               seed: Optional[int] = None, batch_id: str = "", priority: int = 0, max_attempts: int = 0,
               deadline_s: Optional[float] = None, labels: Optional[Dict[str, str]] = None,
               runner: Optional[str] = None, model: Optional[str] = None, overrides=None,
               max_staleness: Optional[int] = None, step_groups: int = 0, base_policy_version: Optional[int] = None,
               group_filter=None, target_groups: int = 0, max_groups: int = 0,
               group_failure_policy: str = "deliver", groups_in_flight: int = 0, tenant: str = "") -> "Batch":
        """Submits `tasks` (builders from corral.tasks, dataset dicts, or Task messages) as one batch of
        `group_size` episodes per task (plus `redundancy` extras, cancelled once group_size have ended).
        `runner`, `model` and `overrides` (a TaskOverrides message or a dataset-shaped dict) replace the tasks'
        fields batch-wide. Idempotent with a `batch_id`. CorralError when the scheduler refuses the batch (the
        message names the task and field).

        Asynchronous RL (docs/async.md): `max_staleness` k bounds how many policy versions behind a delivered
        result may be, `step_groups` (groups trained per version) admits only what can be trained within k
        versions. Dynamic sampling: `group_filter` (a GroupFilter or a dict such as {"drop_equal_rewards": True})
        makes groups outside it FILTERED; with `target_groups` N groups are started from the task list until N
        pass (at most `max_groups`). `group_failure_policy`: "deliver", "drop" (the whole group) or "replace"
        (re-run the failed episode).

        Streaming mode: with `groups_in_flight` K the batch is a long-lived stream that keeps K groups in flight
        over its task list; add tasks with `batch.append(tasks)`, end it with `batch.close_input()` (it may start
        with no tasks).

        `tenant` says whose batch it is, for the usage metrics per tenant (docs/usage.md)."""
        if group_failure_policy not in _GROUP_FAILURE_POLICIES:
            raise ValueError(f"group_failure_policy must be one of {sorted(_GROUP_FAILURE_POLICIES)}, "
                             f"not {group_failure_policy!r}")
        spec = scheduler_pb2.BatchSpec(batch_id=batch_id, group_size=group_size, redundancy=redundancy,
                                       priority=priority, max_attempts=max_attempts, labels=labels or {},
                                       step_groups=step_groups, target_groups=target_groups, max_groups=max_groups,
                                       group_failure_policy=_GROUP_FAILURE_POLICIES[group_failure_policy],
                                       groups_in_flight=groups_in_flight, tenant=tenant)
        if seed is not None:
            spec.seed = seed
        if max_staleness is not None:
            spec.max_staleness = max_staleness
        if base_policy_version is not None:
            spec.base_policy_version = base_policy_version
        if isinstance(group_filter, scheduler_pb2.GroupFilter):
            spec.group_filter.CopyFrom(group_filter)
        elif group_filter:
            json_format.ParseDict(dict(group_filter), spec.group_filter)
        if deadline_s is not None:
            spec.deadline.FromNanoseconds(time.time_ns() + int(deadline_s * 1e9))
        spec.overrides.CopyFrom(_overrides(runner, model, overrides))
        converted = [to_task(t) for t in tasks]  # fail on a bad task before anything is sent
        if not converted and not groups_in_flight:
            raise ValueError("a batch needs at least one task")

        def requests():
            yield scheduler_pb2.SubmitRequest(spec=spec)
            for chunk in _chunks(converted):
                yield scheduler_pb2.SubmitRequest(tasks=scheduler_pb2.TaskList(tasks=chunk))

        try:
            batch = self._stub.Submit(requests(), timeout=max(self.timeout, 120), metadata=self._metadata)
        except grpc.RpcError as e:
            _raise(e)
        return Batch(self, batch)

    def batch(self, batch_id: str) -> "Batch":
        """A batch submitted earlier (by this process or another)."""
        return Batch(self, self._call("GetBatch", scheduler_pb2.GetBatchRequest(batch_id=batch_id)))

    def list_batches(self, *, state: Optional[str] = None, labels: Optional[Dict[str, str]] = None
                     ) -> Iterator[scheduler_pb2.Batch]:
        """Every batch, newest first (filtered by state "running"/"complete"/"cancelled" and labels)."""
        request = scheduler_pb2.ListBatchesRequest(page_size=100, label_selector=labels or {})
        if state:
            request.state = scheduler_pb2.BatchState.Value("BATCH_STATE_" + state.upper())
        while True:
            page = self._call("ListBatches", request)
            yield from page.batches
            if not page.next_page_token:
                return
            request.page_token = page.next_page_token

    # ---- trainer-driven environments (corral.envs)

    def environment(self, task: TaskLike, **kwargs) -> "EnvEpisode":
        """A trainer-driven environment episode of `task` (one with env_server): reset() opens it, step(action)
        sends an action, close() returns its result. kwargs: batch_id, priority, max_attempts, labels,
        idle_timeout_s, open_timeout_s, trajectory_format, ack."""
        from corral.envs import EnvEpisode
        return EnvEpisode(self, task, **kwargs)

    def aenvironment(self, task: TaskLike, **kwargs) -> "AsyncEnvEpisode":
        """environment() for asyncio."""
        from corral.envs import AsyncEnvEpisode
        return AsyncEnvEpisode(self, task, **kwargs)

    def hosts(self) -> List[scheduler_pb2.Host]:
        """The sandbox hosts the scheduler knows, with health and load."""
        out, token = [], ""
        while True:
            page = self._call("ListHosts", scheduler_pb2.ListHostsRequest(page_size=100, page_token=token))
            out.extend(page.hosts)
            token = page.next_page_token
            if not token:
                return out

    def ack(self, episode_ids: List[str]) -> int:
        """Acknowledges results (the scheduler may forget them); returns how many were newly acknowledged."""
        if not episode_ids:
            return 0
        return self._call("Ack", scheduler_pb2.AckRequest(episode_ids=episode_ids)).acked

    def cancel(self, *, batch_id: str = "", group_id: str = "", episode_id: str = "", reason: str = "") -> int:
        """Cancels a batch, a group or an episode; returns how many queued or running episodes it stopped."""
        request = scheduler_pb2.CancelRequest(reason=reason)
        if batch_id:
            request.batch_id = batch_id
        elif group_id:
            request.group_id = group_id
        elif episode_id:
            request.episode_id = episode_id
        else:
            raise ValueError("name what to cancel: batch_id, group_id or episode_id")
        return self._call("Cancel", request).cancelled

    # ---- asynchronous RL (docs/async.md)

    def update_policy(self, version: int) -> int:
        """Tells Corral that the inference servers now serve policy `version`: every LLM call from now on is recorded
        with it. Versions only move forward (the current one again is a no-op). Returns the previous version."""
        return self._call("UpdatePolicy", common_pb2.UpdatePolicyRequest(version=version)).previous_version

    def pause_generation(self, mode: str = "abort", *, abort_after: Optional[float] = None,
                         timeout: Optional[float] = None) -> common_pb2.PauseGenerationResponse:
        """Stops every proxy replica from sending calls upstream, for a weight update; returns once nothing is
        upstream. `mode` "abort" cuts the calls in flight (they continue after the resume, invisibly to the agents);
        "drain" lets them finish (cut after `abort_after` seconds when given). New calls wait meanwhile."""
        if mode not in _PAUSE_MODES:
            raise ValueError(f"mode must be one of {sorted(_PAUSE_MODES)}, not {mode!r}")
        request = common_pb2.PauseGenerationRequest(mode=_PAUSE_MODES[mode])
        if abort_after is not None:
            request.abort_after.FromNanoseconds(int(abort_after * 1e9))
        return self._call("PauseGeneration", request, timeout=timeout or max(self.timeout or 0, 600))

    def resume_generation(self, version: Optional[int] = None) -> common_pb2.ResumeGenerationResponse:
        """Ends a pause, at policy `version` when given: the held calls go upstream, the cut ones continue."""
        request = common_pb2.ResumeGenerationRequest()
        if version is not None:
            request.version = version
        return self._call("ResumeGeneration", request)

    @contextmanager
    def weight_update(self, version: int, mode: str = "abort", **pause_kwargs):
        """`with client.weight_update(step + 1): load_new_weights()` — generation is paused around the block and
        resumed at `version` after it (also when the block raises, then at the old version)."""
        paused = self.pause_generation(mode, **pause_kwargs)
        try:
            yield paused
        except BaseException:
            self.resume_generation()
            raise
        self.resume_generation(version)


class _Reconnect:
    """When a broken result stream is re-opened: only after codes that mean the connection or the scheduler went
    away, for at most `window_s` seconds of failing in a row, after a jittered exponential back-off."""

    def __init__(self, window_s: float):
        self.window_s = window_s
        self.failing_since: Optional[float] = None
        self.backoff = 0.1

    def succeeded(self) -> None:
        self.failing_since, self.backoff = None, 0.1

    def delay(self, e: grpc.RpcError, batch_id: str, cursor: str) -> float:
        """Seconds to wait before re-opening; raises CorralError when the stream must not be re-opened."""
        if e.code() not in _RETRYABLE:
            _raise(e)
        now = time.monotonic()
        self.failing_since = self.failing_since or now
        if now - self.failing_since > self.window_s:
            _raise(e)
        log.warning("corral: result stream of %s broke (%s); resuming from cursor %r", batch_id, e.code().name, cursor)
        wait = self.backoff * (1 + random.random())
        self.backoff = min(self.backoff * 2, 5.0)
        return wait


class _ResultLoop:
    """The one result-stream loop behind results() and aresults(): what each item of the stream means, when the
    results delivered are acknowledged, and what a broken stream costs. The two callers only do the I/O, one
    blocking and one with asyncio, so they cannot drift apart."""

    def __init__(self, batch: "Batch", *, ack: bool, ack_every: int, reconnect_for_s: float, whole_groups: bool,
                 trajectory_format: str, exclude_trajectories: bool):
        self.batch = batch
        self.ack = ack
        self.ack_every = ack_every
        self.reconnect = _Reconnect(reconnect_for_s)
        self.request_args = (whole_groups, trajectory_format, exclude_trajectories)
        self.pending: List[str] = []

    def request(self) -> scheduler_pb2.StreamResultsRequest:
        """The request that (re-)opens the stream, from the last delivered result's cursor."""
        return self.batch._request(*self.request_args)

    def result_of(self, item: scheduler_pb2.StreamResultsResponse) -> Optional[EpisodeResult]:
        """The result an item carries, or None for a progress update (applied here)."""
        self.reconnect.succeeded()
        if item.HasField("progress"):
            self.batch._progress(item.progress)
            return None
        return item.result

    def delivered(self, result: EpisodeResult) -> bool:
        """The consumer asked for the next result after `result`: it is acknowledged with the next flush.
        True when a flush is due."""
        self.batch.cursor = result.cursor
        if self.ack:
            self.pending.append(result.ids.episode_id)
        return len(self.pending) >= self.ack_every

    def to_ack(self) -> List[str]:
        return list(self.pending)

    def acked(self, ids: List[str]) -> None:
        del self.pending[:len(ids)]

    def broken(self, e: grpc.RpcError) -> float:
        """Seconds to wait before re-opening a broken stream (after a flush: acknowledgements first, so the
        re-opened stream does not send those results again); raises CorralError when it must not be re-opened."""
        return self.reconnect.delay(e, self.batch.id, self.batch.cursor)

    def unacknowledged(self, e: Exception) -> None:
        log.warning("corral: could not acknowledge %d results of %s: %s", len(self.pending), self.batch.id, e)


class Batch:
    """A submitted batch. `results()` is the way to consume it."""

    def __init__(self, client: Client, batch: scheduler_pb2.Batch):
        self.client = client
        self.id = batch.batch_id
        self.info = batch
        self.cursor = ""  # of the last result consumed: a new stream resumes after it
        self.on_progress: Optional[Callable[[Progress], None]] = None

    def __repr__(self) -> str:
        return f"Batch({self.id!r}, {self.info.task_count} tasks x {self.info.spec.group_size})"

    @property
    def group_size(self) -> int:
        return self.info.spec.group_size or 1

    @property
    def seed(self) -> int:
        return self.info.spec.seed

    def refresh(self) -> Progress:
        self.info = self.client._call("GetBatch", scheduler_pb2.GetBatchRequest(batch_id=self.id))
        return Progress.from_proto(self.info)

    @property
    def progress(self) -> Progress:
        """The batch's counts, fetched now."""
        return self.refresh()

    def task_stats(self) -> List[scheduler_pb2.TaskStats]:
        """Per started task: episodes, finished, mean reward, pass rate and whether its group passed the filter
        (for curricula)."""
        self.info = self.client._call("GetBatch", scheduler_pb2.GetBatchRequest(batch_id=self.id, task_stats=True))
        return list(self.info.task_stats)

    def append(self, tasks: Iterable[TaskLike], *, close: bool = False) -> int:
        """Streaming mode: adds `tasks` to the end of the stream's task list (and closes its input with `close`);
        returns the stream's task count. Not retried on a broken connection (an append that landed would be
        refused as ALREADY_EXISTS): check `progress` or `info.task_count` before appending again."""
        converted = [to_task(t) for t in tasks]
        chunks = list(_chunks(converted)) or [[]]
        for k, chunk in enumerate(chunks):
            last = k == len(chunks) - 1
            self.info = self.client._call("AppendTasks", scheduler_pb2.AppendTasksRequest(
                batch_id=self.id, tasks=chunk, close_input=close and last))
        return self.info.task_count

    def close_input(self) -> None:
        """Streaming mode: no task will follow; the stream completes once its started groups have ended."""
        self.info = self.client._call("AppendTasks", scheduler_pb2.AppendTasksRequest(batch_id=self.id,
                                                                                      close_input=True))

    def cancel(self, reason: str = "") -> int:
        """Cancels every queued and running episode; each still yields a CANCELLED result."""
        return self.client.cancel(batch_id=self.id, reason=reason)

    def wait(self, timeout: Optional[float] = None, poll_s: float = 1.0) -> Progress:
        """Blocks until every episode has ended (results may still await delivery); TimeoutError otherwise."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            p = self.refresh()
            if p.done:
                return p
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"batch {self.id} still running after {timeout} s: {p.ended}/{p.total} ended")
            time.sleep(poll_s)

    def _request(self, whole_groups: bool, trajectory_format: str, exclude_trajectories: bool):
        try:
            fmt = _TRAJECTORY_FORMATS[trajectory_format]
        except KeyError:
            raise ValueError(f"trajectory_format must be one of {', '.join(_TRAJECTORY_FORMATS)}") from None
        return scheduler_pb2.StreamResultsRequest(batch_id=self.id, cursor=self.cursor, trajectory_format=fmt,
                                                  exclude_trajectories=exclude_trajectories,
                                                  whole_groups=whole_groups)

    def _progress(self, batch: scheduler_pb2.Batch) -> None:
        self.info.counts.CopyFrom(batch.counts)
        self.info.groups.CopyFrom(batch.groups)
        self.info.state = batch.state
        self.info.progress = batch.progress
        if batch.HasField("mean_reward"):
            self.info.mean_reward = batch.mean_reward
        if self.on_progress is not None:
            self.on_progress(Progress.from_proto(self.info))

    def results(self, *, ack: bool = True, whole_groups: bool = False, trajectory_format: str = "trajectory",
                exclude_trajectories: bool = False, reconnect_for_s: float = 300.0,
                ack_every: int = 64) -> Iterator[EpisodeResult]:
        """Every result of the batch, each once, until the batch has ended and all were delivered.

        A result is acknowledged once the loop asks for the next one (so a crash mid-step leaves it to be
        delivered again; acks go out in groups of `ack_every` and when the iterator ends). A broken stream — the
        network, or the scheduler restarting — is re-opened from the last result's cursor for up to
        `reconnect_for_s` seconds of trying. `whole_groups` holds results until their whole group has ended and
        yields its results consecutively."""
        loop = _ResultLoop(self, ack=ack, ack_every=ack_every, reconnect_for_s=reconnect_for_s,
                           whole_groups=whole_groups, trajectory_format=trajectory_format,
                           exclude_trajectories=exclude_trajectories)

        def flush():
            ids = loop.to_ack()
            if ids:
                self.client.ack(ids)
                loop.acked(ids)

        try:
            while True:
                call = self.client._stub.StreamResults(loop.request(), metadata=self.client._metadata)
                try:
                    for item in call:
                        result = loop.result_of(item)
                        if result is None:
                            continue
                        yield result
                        if loop.delivered(result):
                            flush()
                    flush()
                    return  # the batch ended and everything was sent
                except grpc.RpcError as e:
                    wait = loop.broken(e)
                    try:
                        flush()
                    except CorralError:
                        pass  # the scheduler is away: these results come again and are acknowledged then
                    time.sleep(wait)
                finally:
                    call.cancel()
        finally:
            try:
                flush()
            except CorralError as e:
                loop.unacknowledged(e)

    def groups(self, **kwargs) -> Iterator[List[EpisodeResult]]:
        """Whole GRPO groups: lists of the group's results (group_size of them), as each group ends."""
        group: List[EpisodeResult] = []
        for result in self.results(whole_groups=True, **kwargs):
            if group and result.ids.group_id != group[0].ids.group_id:
                yield group
                group = []
            group.append(result)
            if len(group) == self.group_size:
                yield group
                group = []
        if group:
            yield group

    async def aresults(self, *, ack: bool = True, whole_groups: bool = False, trajectory_format: str = "trajectory",
                       exclude_trajectories: bool = False, reconnect_for_s: float = 300.0,
                       ack_every: int = 64) -> AsyncIterator[EpisodeResult]:
        """results() for asyncio (`async for result in batch.aresults()`), on a grpc.aio channel."""
        channel = self.client._aio_channel()
        stub = scheduler_pb2_grpc.SchedulerStub(channel)
        metadata = self.client._metadata
        loop = _ResultLoop(self, ack=ack, ack_every=ack_every, reconnect_for_s=reconnect_for_s,
                           whole_groups=whole_groups, trajectory_format=trajectory_format,
                           exclude_trajectories=exclude_trajectories)

        async def flush():
            ids = loop.to_ack()
            if ids:
                try:
                    await stub.Ack(scheduler_pb2.AckRequest(episode_ids=ids), metadata=metadata,
                                   timeout=self.client.timeout)
                except grpc.RpcError as e:
                    _raise(e)
                loop.acked(ids)

        try:
            while True:
                call = stub.StreamResults(loop.request(), metadata=metadata)
                try:
                    async for item in call:
                        result = loop.result_of(item)
                        if result is None:
                            continue
                        yield result
                        if loop.delivered(result):
                            await flush()
                    await flush()
                    return  # the batch ended and everything was sent
                except grpc.RpcError as e:
                    wait = loop.broken(e)
                    try:
                        await flush()
                    except CorralError:
                        pass  # the scheduler is away: these results come again and are acknowledged then
                    await asyncio.sleep(wait)
                finally:
                    call.cancel()
        finally:
            try:
                await flush()
            except CorralError as e:
                loop.unacknowledged(e)
            await channel.close()
