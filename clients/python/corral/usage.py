"""What episodes cost (docs/usage.md): each result's usage as plain numbers, and a summary over many results.

    summary = corral.usage.summarize(results)
    print(summary)                        # totals, then the most expensive tasks
    summary.by_task["add-17-25"]["cpu_seconds"]

A sandbox figure the host could not measure (no cgroup) is None, never 0. A branch of a branching task counts
its own calls; the calls it shares with its ancestors are `shared_*` and are not summed again.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Dict, Iterable, List, Optional

from corral.v1 import scheduler_pb2

ROLES = ("agent", "auxiliary", "retry", "compaction", "subagent")

# The figures summarize() adds up.
SUMMED = ("cpu_seconds", "memory_gib_seconds", "sandbox_seconds", "llm_calls", "prompt_tokens", "completion_tokens",
          "cached_prompt_tokens", "tool_calls", "cost")


def _seconds(d) -> float:
    return d.seconds + d.nanos / 1e9


def usage_of(result: scheduler_pb2.EpisodeResult) -> Dict[str, Any]:
    """One result's usage (EpisodeResult.usage) as a flat dict of numbers."""
    u = result.usage
    sb = u.sandbox
    has = u.HasField("sandbox")
    verifier_cpu = _seconds(u.verifier.cpu_time) if u.verifier.HasField("cpu_time") else None
    own_verifier_cpu = verifier_cpu if verifier_cpu is not None and not u.verifier.in_episode_sandbox else 0.0
    cpu = _seconds(sb.cpu_time) + own_verifier_cpu if has and sb.HasField("cpu_time") else None
    by_role = {}
    for r in u.model.by_role:
        name = ROLES[r.role - 1] if 1 <= r.role <= len(ROLES) else "agent"
        by_role[name] = {"calls": r.calls, "prompt_tokens": r.prompt_tokens, "completion_tokens": r.completion_tokens,
                         "cached_prompt_tokens": r.cached_prompt_tokens}
    return {
        "episode_id": result.ids.episode_id,
        "task_id": result.ids.task_id,
        "cpu_seconds": cpu,
        "cpu_user_seconds": _seconds(sb.cpu_user_time) if has and sb.HasField("cpu_user_time") else None,
        "cpu_system_seconds": _seconds(sb.cpu_system_time) if has and sb.HasField("cpu_system_time") else None,
        "memory_peak_bytes": sb.memory_peak_bytes if has and sb.HasField("memory_peak_bytes") else None,
        "memory_gib_seconds": sb.memory_gib_seconds if has and sb.HasField("memory_gib_seconds") else None,
        "disk_written_bytes": sb.disk_written_bytes if has and sb.HasField("disk_written_bytes") else None,
        "disk_bytes": sb.own_disk_bytes if has and sb.HasField("own_disk_bytes") else None,
        "shared_disk_bytes": sb.shared_disk_bytes if has and sb.HasField("shared_disk_bytes") else None,
        "sandbox_seconds": _seconds(sb.wall_time) if has and sb.HasField("wall_time") else None,
        "busy_seconds": _seconds(sb.busy_time) if has and sb.HasField("busy_time") else None,
        "processes": sb.processes_started if has else None,
        "llm_calls": u.model.calls,
        "prompt_tokens": u.model.prompt_tokens,
        "completion_tokens": u.model.completion_tokens,
        "cached_prompt_tokens": u.model.cached_prompt_tokens,
        "model_seconds": _seconds(u.model.wait_time),
        "by_role": by_role,
        "shared_llm_calls": u.shared_model.calls,
        "shared_prompt_tokens": u.shared_model.prompt_tokens,
        "shared_completion_tokens": u.shared_model.completion_tokens,
        "tool_calls": u.tools.calls,
        "tool_seconds": _seconds(u.tools.time),
        "tools": {t.name: {"calls": t.calls, "seconds": _seconds(t.time)} for t in u.tools.by_tool},
        "verifier_seconds": _seconds(u.verifier.wall_time) if u.verifier.HasField("wall_time") else None,
        "verifier_cpu_seconds": verifier_cpu,
        "cost": u.cost if u.HasField("cost") else None,
    }


@dataclasses.dataclass
class UsageSummary:
    """Usage summed over results: `totals` and `by_task` hold the SUMMED figures (None where nothing was measured),
    plus "episodes" and "measured" (episodes whose sandbox was measured)."""
    totals: Dict[str, Any]
    by_task: Dict[str, Dict[str, Any]]

    def most_expensive(self, n: int = 5) -> List[str]:
        """Task ids, the costliest first: by cost when there is one, else by CPU time."""
        key = "cost" if self.totals.get("cost") is not None else "cpu_seconds"
        return sorted(self.by_task, key=lambda t: self.by_task[t].get(key) or 0.0, reverse=True)[:n]

    def table(self) -> str:
        t = self.totals
        lines = [f"{t['episodes']} episode(s), {t['measured']} with a measured sandbox"]
        if t["cpu_seconds"] is not None:
            lines.append(f"cpu {t['cpu_seconds'] / 3600:.3f} h  memory {t['memory_gib_seconds'] / 3600:.3f} GiB·h  "
                         f"sandboxes {t['sandbox_seconds'] / 3600:.3f} h")
        lines.append(f"tokens {t['prompt_tokens']:,} prompt ({t['cached_prompt_tokens']:,} cached) + "
                     f"{t['completion_tokens']:,} completion in {t['llm_calls']:,} call(s); "
                     f"{t['tool_calls']:,} tool call(s)")
        if t["cost"] is not None:
            lines.append(f"cost {t['cost']:.4f}")
        lines.append(f"{'task':<28} {'n':>4} {'cpu s':>9} {'tokens':>11} {'cost':>9}")
        for task in self.most_expensive():
            row = self.by_task[task]
            cost = "" if row["cost"] is None else f"{row['cost']:.4f}"
            cpu = "-" if row["cpu_seconds"] is None else f"{row['cpu_seconds']:.1f}"
            lines.append(f"{task[:28]:<28} {row['episodes']:>4} {cpu:>9} "
                         f"{row['prompt_tokens'] + row['completion_tokens']:>11,} {cost:>9}")
        return "\n".join(lines)

    __str__ = table


def _add(into: Dict[str, Any], u: Dict[str, Any]) -> None:
    into["episodes"] += 1
    if u["cpu_seconds"] is not None:
        into["measured"] += 1
    for key in SUMMED:
        if u[key] is not None:
            into[key] = (into[key] or 0) + u[key]


def _empty() -> Dict[str, Any]:
    out: Dict[str, Any] = {key: None for key in SUMMED}
    for key in ("llm_calls", "prompt_tokens", "completion_tokens", "cached_prompt_tokens", "tool_calls"):
        out[key] = 0
    out.update(episodes=0, measured=0)
    return out


def summarize(results: Iterable[scheduler_pb2.EpisodeResult]) -> UsageSummary:
    """The usage of `results` summed, in all and per task."""
    totals = _empty()
    by_task: Dict[str, Dict[str, Any]] = {}
    for r in results:
        u = usage_of(r)
        _add(totals, u)
        _add(by_task.setdefault(r.ids.task_id, _empty()), u)
    return UsageSummary(totals=totals, by_task=by_task)


def cost_of(result: scheduler_pb2.EpisodeResult) -> Optional[float]:
    """The result's cost by the scheduler's price table; None without one."""
    return result.usage.cost if result.usage.HasField("cost") else None
