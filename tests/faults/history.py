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
- `fifo`: waiters of one limit are granted in the order they came: no grant overtook a waiter invoked more than
  a moment (`slack`) before it, judged where no fault could reorder their requests (a pause, a kill or a
  partition while either waited; a step of the clock or a slow disk may not).
- `no-leaks`: after the run nothing is held (the limiter's own status).

The sandbox API's run (sandbox_faults.py) records E2B SDK calls and `/run_code` calls, each op naming its sandbox
(`lease_id`), the key that made it (`owner`), until when its client knew the lease lived (`held_until`) and the
longest the call may take (`bound`). Its properties:

- `one-owner`: no sandbox is handed out twice (a create or fork answers an id no other did), and a key's
  listing never shows another key's sandbox.
- `lease-lives`: no call on a sandbox whose lease surely lived was told the sandbox does not exist, and no
  command of it (`echo`, which cannot fail) was killed, unless its host was killed since the sandbox was made (a
  host's restart removes its sandboxes, by design).
- `answers`: every call that succeeded got the right answer (a command's output, a file read back, a file
  written before a fork read in the child, `/run_code`'s stdout).
- `no-hang`: every call ended, either way, within its bound.
- `one-result`: every episode of a batch its trainer consumed to the end came, and came as one result: a result
  delivered again (unacknowledged when the stream broke) is the same result (attempt and reward), never another
  run's.
- `clean-errors`: every failure is one of the SDK's errors (or `/run_code`'s answer), or a refused or cut
  connection while a replica of the sandbox API was down.
"""
from __future__ import annotations

import collections
import json
import shutil
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
    owner: str = ""       # the sandbox API's key that made the call
    bound: float = 0.0    # the longest the call may take (its timeouts), in seconds
    seen: List[str] = field(default_factory=list)  # sandbox ids a listing or fork answered; a batch's results
    value: float = 0.0    # a result's reward
    target: str = ""      # the replica of the sandbox API called (a /run_code call)


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


def report(ops: List[Op], faults: Dict[str, int], verdicts: List[Verdict], summary: dict, run_dir: str,
           keep: bool) -> int:
    """Prints a run's history size, faults and verdicts, then one JSON line (`summary` and the verdicts); keeps the
    run's directory when asked or when a property was violated. Returns the run's exit code."""
    kinds = collections.Counter((o.kind, o.ok) for o in ops)
    print(f"history: {len(ops)} operations: " + ", ".join(f"{k} {'ok' if ok else 'failed'} {n}"
                                                          for (k, ok), n in sorted(kinds.items())))
    print("faults: " + (", ".join(f"{k} {n}" for k, n in sorted(faults.items())) or "none"))
    for v in verdicts:
        print(v.line())
        for violation in v.violations[:10]:
            print("    " + violation)
    ok = all(v.ok for v in verdicts)
    print(json.dumps({**summary, "operations": len(ops), "faults": dict(faults), "ok": ok,
                      "verdicts": {v.name: v.ok for v in verdicts}}))
    if keep or not ok:
        print(f"kept: {run_dir}")
    else:
        shutil.rmtree(run_dir, ignore_errors=True)
    return 0 if ok else 1


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


REORDERING = ("clock-step", "slow-disk")  # faults that may not reorder waiters: checked through


def fifo(ops: List[Op], outages: List["Outage"], slack: float = 0.25) -> Verdict:
    """Of two grants on one limit, the one invoked more than `slack` before the other is granted first (up to
    `slack`), unless a fault that may reorder requests overlapped either's wait."""
    verdict = Verdict("fifo", 0)
    faults = [o for o in outages if o.kind.split()[0] not in REORDERING]

    def disturbed(op: Op) -> bool:
        return any(o.start <= op.complete and op.invoke <= o.end for o in faults)

    grants = sorted((o for o in ops if o.kind == "acquire" and o.ok), key=lambda o: o.invoke)
    for i, first in enumerate(grants):
        if disturbed(first):
            continue
        for later in grants[i + 1:]:
            if later.invoke >= first.complete:
                break
            if later.limit != first.limit or later.invoke <= first.invoke + slack or disturbed(later):
                continue
            verdict.checked += 1
            if later.complete + slack < first.complete:
                verdict.violations.append(
                    f"{first.limit}: {later.process} (invoked {later.invoke:.3f}) was granted at {later.complete:.3f}, "
                    f"before {first.process}, waiting since {first.invoke:.3f} and granted at {first.complete:.3f}")
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


@dataclass
class Outage:
    """A nemesis's fault: `target` (a service's name) killed or paused from `start` to `end` (monotonic)."""
    kind: str
    target: str
    start: float
    end: float


NOT_FOUND = ("SandboxNotFoundError", "NotFoundError", "FileNotFoundError")
SLACK = 10.0  # seconds a call may overrun its bound on a loaded 2-core machine before it counts as hung


def sandbox_verdicts(ops: List[Op], outages: List[Outage]) -> List[Verdict]:
    """The sandbox API's properties over E2B (`limit` e2b) and `/run_code` (`limit` run_code) operations."""
    e2b = [o for o in ops if o.limit == "e2b"]
    owners: Dict[str, Op] = {}
    one_owner = Verdict("one-owner", 0)
    for op in sorted(e2b, key=lambda o: o.invoke):
        made = [op.lease_id] if op.kind == "create" and op.ok else op.seen if op.kind == "fork" and op.ok else []
        for sandbox in made:
            one_owner.checked += 1
            if sandbox in owners:
                first = owners[sandbox]
                one_owner.violations.append(f"{sandbox} answered to {op.process} ({op.owner}) at {op.complete:.3f} "
                                            f"and before to {first.process} ({first.owner}) at {first.complete:.3f}")
            owners[sandbox] = op
    for op in e2b:
        if op.kind == "list" and op.ok:
            for sandbox in op.seen:
                one_owner.checked += 1
                if sandbox in owners and owners[sandbox].owner != op.owner:
                    one_owner.violations.append(f"{op.owner}'s listing at {op.complete:.3f} shows {sandbox}, made "
                                                f"by {owners[sandbox].owner}")

    host_kills = sorted(o.start for o in outages if o.kind == "kill" and o.target == "sandbox-host")
    made_at = {s: owners[s].invoke for s in owners}
    lives = Verdict("lease-lives", 0)
    for op in e2b:
        if op.kind in ("create", "list", "kill") or not op.lease_id or op.complete >= op.held_until:
            continue
        born = made_at.get(op.lease_id, op.invoke)
        if any(born <= t <= op.complete for t in host_kills):
            continue
        lives.checked += 1
        error = op.error.split(":", 1)[0]
        if not op.ok and (error in NOT_FOUND or (op.kind == "run" and error == "CommandExitError")):
            lives.violations.append(f"{op.process}'s {op.kind} on {op.lease_id} at [{op.invoke:.3f}, "
                                    f"{op.complete:.3f}], its lease surely alive until {op.held_until:.3f}: "
                                    f"{op.error}")

    answers = Verdict("answers", len([o for o in ops if o.ok or o.error.startswith("wrong")]),
                      [f"{o.process}'s {o.kind} on {o.lease_id or o.limit} at {o.invoke:.3f}: {o.error}"
                       for o in ops if o.error.startswith("wrong")])
    hangs = Verdict("no-hang", 0)
    for op in ops:
        if op.bound > 0:
            hangs.checked += 1
            if op.complete - op.invoke > op.bound + SLACK:
                hangs.violations.append(f"{op.process}'s {op.kind} on {op.lease_id or op.limit} took "
                                        f"{op.complete - op.invoke:.1f}s (bound {op.bound:g}s): {op.error or 'ok'}")
    api_down = [o for o in outages if o.target.startswith("sandbox-api") and o.kind in ("kill", "pause")]
    errors = Verdict("clean-errors", 0)
    for op in ops:
        if op.ok or op.error.startswith("wrong"):
            continue
        errors.checked += 1
        kind = op.error.split(":", 1)[0]
        if kind.startswith("foreign") or (kind == "network" and not any(
                o.start - 1 <= op.complete and op.invoke <= o.end + 1 for o in api_down)):
            errors.violations.append(f"{op.process}'s {op.kind} on {op.lease_id or op.limit} at "
                                     f"[{op.invoke:.3f}, {op.complete:.3f}]: {op.error}")
    return [one_owner, lives, answers, hangs, errors, one_result(ops)]


def one_result(ops: List[Op]) -> Verdict:
    verdict = Verdict("one-result", 0)
    results: Dict[tuple, set] = collections.defaultdict(set)
    for op in ops:
        if op.kind == "result":
            results[(op.owner, op.lease_id)].add((op.token, op.value))
    for (batch, episode), runs in sorted(results.items()):
        verdict.checked += 1
        if len(runs) > 1:
            verdict.violations.append(f"{batch}: episode {episode} came as {len(runs)} different results "
                                      f"(attempt, reward): {sorted(runs)}")
    for op in ops:
        if op.kind == "batch" and not op.error.startswith("stopped"):
            verdict.checked += 1
            if len(set(op.seen)) != op.permits:
                verdict.violations.append(f"{op.owner}: {len(set(op.seen))} of its {op.permits} episodes came")
    return verdict
