"""Histories of operations and the checker that judges them.

Every client records each operation it invokes with the monotonic time it invoked it, the time it completed and
the outcome. All processes of a run are on one machine, so their CLOCK_MONOTONIC readings compare. A history is
JSON lines, one operation each; the checker reads them back and judges properties of the model:

- `mutual-exclusion`: a concurrency limit is never held by more than its permits at once, counting a holder
  from its grant until it *knows* it may have lost the lease: its release, or the moment its lease's TTL ran out
  on its own clock since the last renewal the limiter confirmed (what `valid()` says), whichever comes first.
- `fencing-order`: of two grants on one limit where one completed before the other was invoked, the later has
  the larger fencing token (restarts included).
- `fenced-writes`: the guarded resource (a register that refuses tokens smaller than the largest it accepted)
  never accepted, after a newer holder's write, a write of an older holder.
- `bucket`: a token bucket never granted more than rate x time + burst in any window (counting only grants
  surely inside the window: invoked and completed within it).
- `no-leaks`: after the run nothing is held (the limiter's own status).
"""
from __future__ import annotations

import json
import threading
from dataclasses import asdict, dataclass, field
from typing import Dict, Iterable, List, Optional


@dataclass
class Op:
    process: str          # who invoked it (a worker's name)
    kind: str             # acquire | release | write | rate
    limit: str
    invoke: float         # time.monotonic() when invoked
    complete: float = 0.0  # when the outcome was known
    ok: bool = False
    token: int = 0        # the lease's fencing token (acquire, write)
    lease_id: str = ""
    held_until: float = 0.0  # acquire: when the holder knew it might no longer hold (release or lost validity)
    permits: int = 1
    error: str = ""


class History:
    """Thread-safe append-only recorder, written to a JSON-lines file as it goes (a crash keeps what was done)."""

    def __init__(self, path: str):
        self.path = path
        self._lock = threading.Lock()
        self._file = open(path, "a")

    def record(self, op: Op) -> None:
        line = json.dumps(asdict(op))
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()

    def close(self) -> None:
        self._file.close()


def read(paths: Iterable[str]) -> List[Op]:
    ops = []
    for path in paths:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    try:
                        ops.append(Op(**json.loads(line)))
                    except (ValueError, TypeError):
                        continue  # a torn last line of a process killed mid-write
    return ops


@dataclass
class Verdict:
    name: str
    checked: int                 # how many operations or pairs the property was checked on
    violations: List[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    def line(self) -> str:
        state = "ok" if self.ok else f"VIOLATED ({len(self.violations)})"
        return f"{self.name:18} {state:16} checked {self.checked}"


def mutual_exclusion(ops: List[Op], permits: Dict[str, int]) -> Verdict:
    """Sweep over holding intervals per limit: never more permits held than the limit has."""
    verdict = Verdict("mutual-exclusion", 0)
    for limit, capacity in permits.items():
        events = []
        for op in ops:
            if op.kind == "acquire" and op.ok and op.limit == limit and op.held_until > op.complete:
                events.append((op.complete, op.permits, op))
                events.append((op.held_until, -op.permits, op))
                verdict.checked += 1
        events.sort(key=lambda e: (e[0], e[1]))  # at equal times, an end before a start
        held, holders = 0, {}
        for t, delta, op in events:
            held += delta
            if delta > 0:
                holders[op.lease_id] = op
                if held > capacity:
                    others = ", ".join(f"{h.process} token {h.token} [{h.complete:.3f}, {h.held_until:.3f}]"
                                       for h in holders.values())
                    verdict.violations.append(f"{limit}: {held} permits held at {t:.3f} (capacity {capacity}): "
                                              f"{others}")
            else:
                holders.pop(op.lease_id, None)
    return verdict


def _realtime_order(ops: List[Op], name: str, strict: bool) -> Verdict:
    """Of two operations on one limit where the first completed before the second was invoked, the second's token
    is larger (`strict`) or at least as large."""
    verdict = Verdict(name, 0)
    by_limit: Dict[str, List[Op]] = {}
    for op in ops:
        by_limit.setdefault(op.limit, []).append(op)
    for limit, done in by_limit.items():
        by_complete = sorted(done, key=lambda o: o.complete)
        best: Optional[Op] = None  # the largest token among those completed before the current invoke
        j = 0
        for op in sorted(done, key=lambda o: o.invoke):
            while j < len(by_complete) and by_complete[j].complete < op.invoke:
                if best is None or by_complete[j].token > best.token:
                    best = by_complete[j]
                j += 1
            if best is None:
                continue
            verdict.checked += 1
            if op.token < best.token or (strict and op.token == best.token):
                verdict.violations.append(f"{limit}: {op.process}'s {op.kind} with token {op.token} (invoked "
                                          f"{op.invoke:.3f}) after {best.process}'s with token {best.token} "
                                          f"(completed {best.complete:.3f})")
    return verdict


def fencing_order(ops: List[Op]) -> Verdict:
    return _realtime_order([o for o in ops if o.kind == "acquire" and o.ok and o.token > 0], "fencing-order", True)


def fenced_writes(ops: List[Op]) -> Verdict:
    """The register's accepted writes in real-time order never go back to a smaller token: a holder that lost
    its lease cannot write after a newer holder has (its write is refused, counted as `stale`)."""
    return _realtime_order([o for o in ops if o.kind == "write" and o.ok], "fenced-writes", False)


def bucket(ops: List[Op], rate: Dict[str, tuple], max_windows: int = 2000) -> Verdict:
    """Windows starting at a grant's invoke time: the tokens of the grants surely inside (invoked at or after the
    start, completed by the end) never exceed rate x length + burst. At most `max_windows` starts, spread evenly."""
    verdict = Verdict("bucket", 0)
    for limit, (per_s, burst) in rate.items():
        grants = sorted((o for o in ops if o.kind == "rate" and o.ok and o.limit == limit), key=lambda o: o.invoke)
        step = max(1, len(grants) // max_windows)
        for i in range(0, len(grants), step):
            start = grants[i].invoke
            total = 0
            for op in sorted(grants[i:], key=lambda o: o.complete):
                total += op.permits
                length = op.complete - start
                verdict.checked += 1
                if total > per_s * length + burst + 1e-9:
                    verdict.violations.append(f"{limit}: {total} tokens granted within {length:.3f}s from "
                                              f"{start:.3f} (at most {per_s * length + burst:.1f})")
                    break
    return verdict
