"""Tasks for the three runners, as dataclasses, and the JSONL dataset shape `corral batch submit` reads.

Every builder has `to_proto()` returning a `corral.v1.scheduler_pb2.Task`; `Client.submit` accepts builders,
Task messages and dataset dicts alike. A dataset dict is the Task message as JSON with the conveniences of the
CLI's datasets: enum values by short name ("runner": "tool_loop", "function": "numeric", "kind": "bash",
"network_policy": "proxy_only"), "*_json" fields as JSON values, file contents as text ("content"; "content_base64" for binary; "content_file"
for a file's path, relative to the dataset), a numeric
"answer", and any other key kept as the task's metadata.
"""
from __future__ import annotations

import base64
import dataclasses
import json
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from google.protobuf import json_format

from corral.v1 import common_pb2, scheduler_pb2

_TASK_KEYS = {"id", "prompt", "messages", "answer", "runner", "llm", "reward", "tool_loop", "agent", "verifier",
              "environment", "timeouts", "metadata_json", "env_server", "mcp_servers", "branch"}
_ENUM_PREFIX = {"runner": "RUNNER_", "function": "REWARD_FUNCTION_", "kind": "TOOL_KIND_",
                "network_policy": "NETWORK_POLICY_", "setup_network_policy": "NETWORK_POLICY_",
                "observation_format": "OBSERVATION_FORMAT_", "action_format": "ACTION_FORMAT_",
                "reward_mode": "ENV_REWARD_MODE_"}


def _normalize(value: Any, base_dir: Optional[str] = None) -> Any:
    """The dataset conveniences rewritten into proto JSON ("content_file" read relative to base_dir)."""
    if isinstance(value, list):
        return [_normalize(v, base_dir) for v in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for key, v in value.items():
        prefix = _ENUM_PREFIX.get(key)
        if prefix is not None and isinstance(v, str):
            out[key] = v if v.startswith(prefix) else prefix + v.upper()
            continue
        if key.endswith("_json") and not isinstance(v, str):  # params_json, reset_json, ... may hold the JSON
            out[key] = json.dumps(v)
            continue
        if key in ("files", "setup_files") and isinstance(v, list):
            files = []
            for f in v:
                if isinstance(f, dict):
                    f = dict(f)
                    if isinstance(f.get("content"), str):
                        f["content"] = base64.b64encode(f["content"].encode()).decode()
                    if "content_base64" in f:
                        f["content"] = f.pop("content_base64")
                    if isinstance(f.get("content_file"), str):
                        path = os.path.join(base_dir or ".", f.pop("content_file"))
                        try:
                            with open(path, "rb") as data:
                                f["content"] = base64.b64encode(data.read()).decode()
                        except OSError as e:
                            raise ValueError(f"content_file: cannot read {path}: {e.strerror}") from None
                files.append(f)
            out[key] = files
            continue
        out[key] = _normalize(v, base_dir)
    return out


def task_from_dict(d: Mapping[str, Any], base_dir: Optional[str] = None) -> scheduler_pb2.Task:
    """A dataset dict (one JSONL line) as a Task; ValueError saying what is wrong otherwise. Relative
    "content_file" paths are under base_dir (the dataset's directory; default: the working directory)."""
    if not isinstance(d, Mapping):
        raise ValueError("a task must be a JSON object")
    task: Dict[str, Any] = {}
    metadata: Dict[str, Any] = {}
    for key, value in d.items():
        (task if key in _TASK_KEYS else metadata)[key] = value
    if "answer" in task and not isinstance(task["answer"], str):
        task["answer"] = json.dumps(task["answer"])
    if isinstance(task.get("id"), (int, float)):
        task["id"] = json.dumps(task["id"])
    if metadata and "metadata_json" not in task:
        task["metadata_json"] = json.dumps(metadata)
    try:
        return json_format.ParseDict(_normalize(task, base_dir), scheduler_pb2.Task())
    except json_format.ParseError as e:
        raise ValueError(str(e)) from None


# ---------------------------------------------------------------------------------------------- building blocks

def _duration(seconds: Optional[float], out) -> None:
    if seconds is not None:
        out.FromNanoseconds(int(seconds * 1e9))


@dataclasses.dataclass
class File:
    """A file placed in the sandbox (`path` relative to the home, or under a task path such as /workspace)."""
    path: str
    content: Union[str, bytes]
    permissions: int = 0  # 0: 0644

    def to_proto(self) -> common_pb2.InlineFile:
        data = self.content.encode() if isinstance(self.content, str) else self.content
        return common_pb2.InlineFile(path=self.path, content=data, permissions=self.permissions)


@dataclasses.dataclass
class Command:
    """A command run in the sandbox; `argv` may be a shell string (run with bash -c)."""
    argv: Union[str, Sequence[str]]
    env: Dict[str, str] = dataclasses.field(default_factory=dict)
    cwd: str = ""
    timeout_s: Optional[float] = None

    def to_proto(self) -> common_pb2.Command:
        argv = ["bash", "-c", self.argv] if isinstance(self.argv, str) else list(self.argv)
        c = common_pb2.Command(argv=argv, env=self.env, cwd=self.cwd)
        _duration(self.timeout_s, c.timeout)
        return c


def _command(c: Union[str, Sequence[str], Command]) -> common_pb2.Command:
    return (c if isinstance(c, Command) else Command(c)).to_proto()


@dataclasses.dataclass
class Tool:
    """A tool offered to the model in tool_loop: kind "code_interpreter", "bash", "read_file", "write_file" or
    "command" (then `command`, `description` and `parameters` are required)."""
    name: str
    kind: str
    description: str = ""
    parameters: Optional[Dict[str, Any]] = None  # JSON Schema of the arguments
    language: str = ""                            # code_interpreter: python by default
    command: Optional[Union[str, Sequence[str], Command]] = None
    persistent: bool = False                      # bash / python: one process serves every call

    def to_proto(self) -> scheduler_pb2.ToolSpec:
        t = scheduler_pb2.ToolSpec(name=self.name, kind=_enum(scheduler_pb2.ToolKind, "TOOL_KIND_", self.kind),
                                   description=self.description, language=self.language, persistent=self.persistent)
        if self.parameters is not None:
            t.parameters_json = json.dumps(self.parameters)
        if self.command is not None:
            t.command.CopyFrom(_command(self.command))
        return t


@dataclasses.dataclass
class Environment:
    """The sandbox of an episode: an OCI image to run in (a name or digest the sandbox hosts hold or pull; empty:
    the host's filesystem), a template (setup files and commands, built once — on the image, when there is one —
    and cloned per episode), the task's files, network policy ("open", "proxy_only", "none"), limits, env and
    working directory."""
    image: str = ""
    setup_files: List[File] = dataclasses.field(default_factory=list)
    setup_commands: List[Union[str, Sequence[str], Command]] = dataclasses.field(default_factory=list)
    files: List[File] = dataclasses.field(default_factory=list)
    network_policy: Optional[str] = None
    setup_network_policy: Optional[str] = None
    env: Dict[str, str] = dataclasses.field(default_factory=dict)
    workdir: str = ""
    task_paths: List[str] = dataclasses.field(default_factory=list)  # empty: /workspace and /logs
    memory_bytes: int = 0
    max_pids: int = 0

    def to_proto(self) -> scheduler_pb2.EnvironmentSpec:
        e = scheduler_pb2.EnvironmentSpec(env=self.env, workdir=self.workdir, image=self.image)
        if self.task_paths:
            e.task_paths.extend(["/workspace", "/logs"] + [p for p in self.task_paths if p not in ("/workspace", "/logs")])
        e.setup_files.extend(f.to_proto() for f in self.setup_files)
        e.setup_commands.extend(_command(c) for c in self.setup_commands)
        e.files.extend(f.to_proto() for f in self.files)
        if self.network_policy:
            e.network_policy = _enum(common_pb2.NetworkPolicy, "NETWORK_POLICY_", self.network_policy)
        if self.setup_network_policy:
            e.setup_network_policy = _enum(common_pb2.NetworkPolicy, "NETWORK_POLICY_", self.setup_network_policy)
        if self.memory_bytes:
            e.limits.memory_bytes = self.memory_bytes
        if self.max_pids:
            e.limits.max_pids = self.max_pids
        return e


@dataclasses.dataclass
class Timeouts:
    """Per-phase timeouts in seconds; None: the scheduler's defaults."""
    acquire: Optional[float] = None
    setup: Optional[float] = None
    agent: Optional[float] = None
    tool: Optional[float] = None
    verifier: Optional[float] = None
    episode: Optional[float] = None

    def to_proto(self) -> scheduler_pb2.PhaseTimeouts:
        t = scheduler_pb2.PhaseTimeouts()
        for field in ("acquire", "setup", "agent", "tool", "verifier", "episode"):
            _duration(getattr(self, field), getattr(t, field))
        return t


def _enum(enum_type, prefix: str, name: str) -> int:
    full = name if name.startswith(prefix) else prefix + name.upper()
    try:
        return enum_type.Value(full)
    except ValueError:
        names = [n[len(prefix):].lower() for n in enum_type.keys() if not n.endswith("UNSPECIFIED")]
        raise ValueError(f"unknown {prefix.rstrip('_').lower()} {name!r}; one of {', '.join(names)}") from None


# ---------------------------------------------------------------------------------------------- the three runners

@dataclasses.dataclass
class _Common:
    id: str
    prompt: Optional[str] = None
    messages: Optional[List[Dict[str, Any]]] = None  # OpenAI-style chat messages instead of one prompt
    answer: Optional[Any] = None
    model: str = ""
    params: Optional[Dict[str, Any]] = None  # OpenAI request parameters of the scheduler's calls
    seed_sampling: bool = False
    timeouts: Optional[Timeouts] = None
    metadata: Optional[Dict[str, Any]] = None

    def _base(self, runner: int) -> scheduler_pb2.Task:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError(f"task {self.id!r}: give exactly one of prompt and messages")
        t = scheduler_pb2.Task(id=self.id, runner=runner)
        if self.prompt is not None:
            t.prompt = self.prompt
        for m in self.messages or []:
            json_format.ParseDict(m, t.messages.add(), ignore_unknown_fields=True)
        if self.answer is not None:
            t.answer = self.answer if isinstance(self.answer, str) else json.dumps(self.answer)
        t.llm.model = self.model
        t.llm.seed_sampling = self.seed_sampling
        if self.params:
            t.llm.params_json = json.dumps(self.params)
        if self.timeouts is not None:
            t.timeouts.CopyFrom(self.timeouts.to_proto())
        if self.metadata:
            t.metadata_json = json.dumps(self.metadata)
        return t


def _reward(t: scheduler_pb2.Task, function: str, pattern: str, tolerance: float) -> None:
    t.reward.function = _enum(scheduler_pb2.RewardFunction, "REWARD_FUNCTION_", function)
    t.reward.pattern = pattern
    t.reward.tolerance = tolerance


@dataclasses.dataclass
class SingleTurnTask(_Common):
    """One LLM call, then a reward function on the answer: "exact", "numeric", "regex" (with `pattern`),
    "gsm8k", or "verifier" (then `verifier` and usually `environment`)."""
    reward: str = "exact"
    pattern: str = ""
    tolerance: float = 0.0
    verifier: Optional["Verifier"] = None
    environment: Optional[Environment] = None

    def to_proto(self) -> scheduler_pb2.Task:
        t = self._base(scheduler_pb2.RUNNER_SINGLE_TURN)
        _reward(t, self.reward, self.pattern, self.tolerance)
        if self.verifier is not None:
            t.verifier.CopyFrom(self.verifier.to_proto())
        if self.environment is not None:
            t.environment.CopyFrom(self.environment.to_proto())
        return t


@dataclasses.dataclass
class ToolLoopTask(_Common):
    """The scheduler drives the conversation: LLM call, tool calls executed in the sandbox, repeat (at most
    `max_turns` calls), then the reward function."""
    tools: List[Tool] = dataclasses.field(default_factory=list)
    max_turns: int = 0
    max_tool_output_bytes: int = 0
    reward: str = "exact"
    pattern: str = ""
    tolerance: float = 0.0
    environment: Optional[Environment] = None

    def to_proto(self) -> scheduler_pb2.Task:
        if not self.tools:
            raise ValueError(f"task {self.id!r}: a tool_loop task needs at least one tool")
        t = self._base(scheduler_pb2.RUNNER_TOOL_LOOP)
        _reward(t, self.reward, self.pattern, self.tolerance)
        t.tool_loop.tools.extend(tool.to_proto() for tool in self.tools)
        t.tool_loop.max_turns = self.max_turns
        t.tool_loop.max_tool_output_bytes = self.max_tool_output_bytes
        if self.environment is not None:
            t.environment.CopyFrom(self.environment.to_proto())
        return t


@dataclasses.dataclass
class Verifier:
    """Decides an agent episode's reward: `command` (default bash tests/test.sh) run after the agent, with
    `files` (the tests) uploaded only then. Every process of the agent phase is killed first and
    /logs/verifier made anew; `replace_paths` (e.g. the tests/ directory) are removed before `files` go in, so
    nothing the agent planted beside them counts. `reward_source`: "file" (reward.txt, reward.json, then the exit
    code), "stdout" (the last line the verifier prints) or "exit_code". `isolation` (docs/reward-integrity.md):
    "default" (a fork of the sandbox as another uid where the host can fork, else "clean_env"), "separate_uid",
    "clean_env" (the agent's sandbox, a clean environment) or "shared" (as the agent left it)."""
    command: Optional[Union[str, Sequence[str], Command]] = None
    files: List[File] = dataclasses.field(default_factory=list)
    replace_paths: List[str] = dataclasses.field(default_factory=list)
    reward_source: str = "file"
    isolation: str = "default"

    def to_proto(self) -> scheduler_pb2.VerifierSpec:
        v = scheduler_pb2.VerifierSpec()
        if self.command is not None:
            v.command.CopyFrom(_command(self.command))
        v.files.extend(f.to_proto() for f in self.files)
        v.replace_paths.extend(self.replace_paths)
        sources = {"file": scheduler_pb2.REWARD_SOURCE_UNSPECIFIED, "stdout": scheduler_pb2.REWARD_SOURCE_STDOUT,
                   "exit_code": scheduler_pb2.REWARD_SOURCE_EXIT_CODE}
        if self.reward_source not in sources:
            raise ValueError(f"reward_source must be one of {', '.join(sources)}, not {self.reward_source!r}")
        v.reward_source = sources[self.reward_source]
        isolations = {"default": scheduler_pb2.VERIFIER_ISOLATION_UNSPECIFIED,
                      "separate_uid": scheduler_pb2.VERIFIER_ISOLATION_SEPARATE_UID,
                      "clean_env": scheduler_pb2.VERIFIER_ISOLATION_CLEAN_ENV,
                      "shared": scheduler_pb2.VERIFIER_ISOLATION_SHARED}
        if self.isolation not in isolations:
            raise ValueError(f"isolation must be one of {', '.join(isolations)}, not {self.isolation!r}")
        v.isolation = isolations[self.isolation]
        return v


@dataclasses.dataclass
class AgentTask(_Common):
    """Push mode (Harbor / Terminal-Bench): the task's `prompt` is written to the sandbox, `agent` runs there
    against the proxy (OPENAI_BASE_URL, OPENAI_API_KEY, OPENAI_MODEL in its environment), then the verifier.
    `harness` names an installed agent harness instead ("claude-code", "codex", "opencode", "gemini-cli", …,
    optionally "@version"), run non-interactively and pointed at the episode's proxy session; `harness_env` adds variables."""
    agent: Optional[Union[str, Sequence[str], Command]] = None
    verifier: Verifier = dataclasses.field(default_factory=Verifier)
    environment: Optional[Environment] = None
    instruction_path: str = ""
    harness: str = ""
    harness_env: Optional[Mapping[str, str]] = None

    def to_proto(self) -> scheduler_pb2.Task:
        if (self.agent is None) == (not self.harness):
            raise ValueError(f"task {self.id!r}: an agent task needs the agent command or a harness (one of them)")
        t = self._base(scheduler_pb2.RUNNER_AGENT)
        if self.harness:
            t.agent.harness = self.harness
            t.agent.command.env.update(self.harness_env or {})
        else:
            t.agent.command.CopyFrom(_command(self.agent))
        t.agent.instruction_path = self.instruction_path
        t.verifier.CopyFrom(self.verifier.to_proto())
        if self.environment is not None:
            t.environment.CopyFrom(self.environment.to_proto())
        return t


TaskLike = Union[scheduler_pb2.Task, Mapping[str, Any], SingleTurnTask, ToolLoopTask, AgentTask]


def to_task(task: TaskLike) -> scheduler_pb2.Task:
    """Any accepted task form as a Task message."""
    if isinstance(task, scheduler_pb2.Task):
        return task
    if isinstance(task, Mapping):
        return task_from_dict(task)
    if hasattr(task, "to_proto"):
        return task.to_proto()
    raise TypeError(f"not a task: {type(task).__name__}")
