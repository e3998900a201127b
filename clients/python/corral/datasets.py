"""Loading tasks: JSONL datasets (one task per line, the shape `corral batch submit` reads) and Harbor task
directories (task.toml, instruction.md, environment/, tests/)."""
from __future__ import annotations

import json
import os
import shlex
from typing import Iterator, List, Optional, Sequence, Union

from corral.tasks import AgentTask, Command, Environment, File, Timeouts, Verifier, task_from_dict
from corral.v1 import scheduler_pb2

try:  # Python 3.11+
    import tomllib as _toml
except ImportError:  # pragma: no cover - older Pythons
    _toml = None


def iter_jsonl(path: str) -> Iterator[scheduler_pb2.Task]:
    """The tasks of a JSONL dataset, one per non-empty line; ValueError naming the file and line otherwise."""
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield task_from_dict(json.loads(line), os.path.dirname(os.path.abspath(path)))
            except (ValueError, json.JSONDecodeError) as e:
                raise ValueError(f"{path}: line {n}: {e}") from None


def load_jsonl(path: str) -> List[scheduler_pb2.Task]:
    """Every task of a JSONL dataset (see iter_jsonl)."""
    return list(iter_jsonl(path))


def skip_listed(tasks, path: str) -> list:
    """`tasks` (Task messages or builders with an `id`) less those whose id is listed in `path`: one id per line,
    '#' starting a comment — what `corral audit --quarantine FILE` writes, as `corral run --skip FILE` reads it."""
    with open(path) as f:
        skip = {line.split("#", 1)[0].strip() for line in f} - {""}
    return [t for t in tasks if t.id not in skip]


def _read_tree(root: str, prefix: str) -> List[File]:
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root)
            with open(full, "rb") as f:
                content = f.read()
            mode = os.stat(full).st_mode & 0o777
            files.append(File(path=os.path.join(prefix, rel) if prefix else rel, content=content, permissions=mode))
    return files


def _dockerfile(env_dir: str, environment: Environment, metadata: dict, use_image: bool, prebuilt: bool) -> None:
    """A Harbor environment/Dockerfile as a template: RUN lines become setup commands, COPY/ADD of local files
    setup files, ENV the environment, WORKDIR the working directory. FROM is kept in the metadata; with
    `use_image` it is also the environment's image (each FROM starts over: the last stage is what runs). With
    `prebuilt` (task.toml's docker_image is the image) RUN, COPY and ADD are already in the image."""
    with open(os.path.join(env_dir, "Dockerfile")) as f:
        text = f.read().replace("\\\n", " ")
    stages = set()  # names given with FROM ... AS
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        op, _, rest = line.partition(" ")
        op, rest = op.upper(), rest.strip()
        if op == "FROM":
            words = [w for w in rest.split() if not w.startswith("--")]  # past --platform=...
            image = words[0] if words else ""
            metadata["image"] = image
            if use_image and not prebuilt:
                if image in stages:
                    raise ValueError(f"{env_dir}/Dockerfile: FROM {image} builds on an earlier stage, "
                                     "which is not supported")
                if len(words) == 3 and words[1].upper() == "AS":
                    stages.add(words[2])
                # A stage starts over: nothing of the one before carries into it.
                environment.image = image
                environment.setup_commands.clear()
                environment.setup_files.clear()
                environment.env.clear()
                environment.workdir = ""
                environment.task_paths.clear()
        elif prebuilt and op in ("RUN", "COPY", "ADD"):
            continue
        elif op == "RUN":
            environment.setup_commands.append(Command(rest, cwd=environment.workdir))
        elif op == "WORKDIR":
            environment.workdir = rest
            if rest.startswith("/") and rest not in environment.task_paths:
                environment.task_paths.append(rest)
        elif op == "ENV":
            if "=" in rest.split()[0]:
                for item in shlex.split(rest):
                    key, _, value = item.partition("=")
                    environment.env[key] = value
            else:
                key, _, value = rest.partition(" ")
                environment.env[key] = value.strip()
        elif op in ("COPY", "ADD"):
            if use_image and any(a.startswith("--from=") for a in shlex.split(rest)):
                raise ValueError(f"{env_dir}/Dockerfile: '{line}' copies from another build stage, which needs a build")
            args = [a for a in shlex.split(rest) if not a.startswith("--")]
            *sources, dest = args
            for src in sources:
                path = os.path.join(env_dir, src)
                if os.path.isdir(path):
                    environment.setup_files.extend(_read_tree(path, dest))
                elif os.path.isfile(path):
                    target = os.path.join(dest, os.path.basename(src)) if dest.endswith("/") else dest
                    with open(path, "rb") as f:
                        environment.setup_files.append(File(target, f.read(), os.stat(path).st_mode & 0o777))


def load_harbor(task_dir: str, *, agent: Optional[Union[str, Sequence[str], Command]] = None, harness: str = "",
                network_policy: Optional[str] = None, use_image: bool = False) -> AgentTask:
    """A Harbor task directory as an agent-runner task:

    - instruction.md → the prompt (written to .corral/instruction.md for the agent);
    - environment/Dockerfile → the template (RUN, COPY, ENV, WORKDIR; see _dockerfile); without one, every file
      of environment/ is uploaded to the working directory;
    - tests/ → the verifier's files (uploaded only after the agent ends, into a tests/ emptied of whatever the agent
      left there); the verifier runs `bash tests/test.sh`
      and reads /logs/verifier/reward.txt as Harbor's do;
    - task.toml → [agent].timeout_sec, [verifier].timeout_sec, [environment].build_timeout_sec and memory_mb, and
      [metadata] into the task's metadata.
    `agent` is the command that runs the agent in the sandbox (solution/ is never uploaded), or `harness` an
    installed agent harness by name ("claude-code", "codex", "opencode", "gemini-cli", …). With `use_image` the
    task runs in its image (the sandbox hosts pull it): the Dockerfile's FROM, the rest a template built on it — or
    task.toml's [environment].docker_image as is, the Dockerfile then giving only WORKDIR and ENV."""
    task_dir = os.path.abspath(task_dir)
    config = {}
    toml_path = os.path.join(task_dir, "task.toml")
    if os.path.exists(toml_path):
        if _toml is None:
            raise RuntimeError("reading task.toml needs Python 3.11 (tomllib)")
        with open(toml_path, "rb") as f:
            config = _toml.load(f)
    instruction_path = os.path.join(task_dir, "instruction.md")
    if not os.path.exists(instruction_path):
        raise ValueError(f"{task_dir}: no instruction.md (not a Harbor task directory)")
    with open(instruction_path) as f:
        instruction = f.read()
    metadata = dict(config.get("metadata", {}))
    environment = Environment(network_policy=network_policy)
    env_dir = os.path.join(task_dir, "environment")
    env_config = config.get("environment", {})
    prebuilt = use_image and "docker_image" in env_config
    if prebuilt:
        if not isinstance(env_config["docker_image"], str) or not env_config["docker_image"]:
            raise ValueError(f"{toml_path}: docker_image must be a name")
        environment.image = env_config["docker_image"]
    if os.path.exists(os.path.join(env_dir, "Dockerfile")):
        _dockerfile(env_dir, environment, metadata, use_image, prebuilt)
    # Where the agent and the verifier run (a relative upload would land in the sandbox home instead).
    workdir = environment.workdir or "/workspace"
    if not os.path.exists(os.path.join(env_dir, "Dockerfile")) and os.path.isdir(env_dir):
        environment.files.extend(_read_tree(env_dir, workdir))
    if "memory_mb" in env_config:
        environment.memory_bytes = int(env_config["memory_mb"]) * 1024 * 1024
    if "docker_image" in env_config:
        if prebuilt:
            metadata["image"] = env_config["docker_image"]
        else:
            metadata.setdefault("image", env_config["docker_image"])
    tests_dir = os.path.join(task_dir, "tests")
    # tests/ is the verifier's: whatever the agent left there is removed before the task's own files go in.
    has_tests = os.path.isdir(tests_dir)
    verifier = Verifier(files=_read_tree(tests_dir, workdir + "/tests") if has_tests else [],
                        replace_paths=[workdir + "/tests"] if has_tests else [])
    timeouts = Timeouts(agent=config.get("agent", {}).get("timeout_sec"),
                        verifier=config.get("verifier", {}).get("timeout_sec"),
                        setup=env_config.get("build_timeout_sec"))
    return AgentTask(id=os.path.basename(task_dir), prompt=instruction, agent=agent, harness=harness, verifier=verifier,
                     environment=environment, timeouts=timeouts, metadata=metadata or None)


def load_harbor_dir(root: str, **kwargs) -> List[AgentTask]:
    """Every Harbor task directory directly below `root` (those with an instruction.md), by name."""
    tasks = []
    for name in sorted(os.listdir(root)):
        if os.path.exists(os.path.join(root, name, "instruction.md")):
            tasks.append(load_harbor(os.path.join(root, name), **kwargs))
    return tasks
