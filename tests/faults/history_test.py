#!/usr/bin/env python3
"""The fault checker on histories made by hand: each property passes a correct history and names what is wrong in
a history that breaks it."""
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from history import (History, Op, Outage, bucket, fenced_writes,  # noqa: E402
                     fencing_order, fifo, mutual_exclusion, one_result, read, sandbox_verdicts)


def grant(process, token, complete, held_until, invoke=None, limit="lock"):
    return Op(process, "acquire", limit, complete - 0.01 if invoke is None else invoke, complete, True, token,
              f"lease-{token}", held_until)


class CheckerTest(unittest.TestCase):
    def test_mutual_exclusion_counts_a_holder_until_it_knew_it_might_have_lost_the_lease(self):
        one_after_another = [grant("a", 1, 1.0, 2.0), grant("b", 2, 2.0, 3.0)]
        self.assertTrue(mutual_exclusion(one_after_another, {"lock": 1}).ok)
        overlapping = [grant("a", 1, 1.0, 2.5), grant("b", 2, 2.0, 3.0)]
        verdict = mutual_exclusion(overlapping, {"lock": 1})
        self.assertFalse(verdict.ok)
        self.assertIn("2 permits held at 2.000", verdict.violations[0])
        self.assertTrue(mutual_exclusion(overlapping, {"lock": 2}).ok)

    def test_fencing_order_needs_a_larger_token_for_every_grant_after_a_completed_one(self):
        self.assertTrue(fencing_order([grant("a", 5, 1.0, 2.0), grant("b", 6, 3.0, 4.0)]).ok)
        backwards = fencing_order([grant("a", 5, 1.0, 2.0), grant("b", 5, 3.0, 4.0, invoke=2.5)])
        self.assertFalse(backwards.ok)
        self.assertIn("token 5", backwards.violations[0])
        # Concurrent grants (the second invoked before the first completed) may come in either order.
        self.assertTrue(fencing_order([grant("a", 6, 1.0, 2.0), grant("b", 5, 1.5, 2.0, invoke=0.5)]).ok)

    def test_fenced_writes_never_go_back_to_an_older_holders_token(self):
        def write(process, token, invoke, complete):
            return Op(process, "write", "lock", invoke, complete, True, token)
        self.assertTrue(fenced_writes([write("a", 1, 1.0, 1.1), write("b", 2, 2.0, 2.1), write("b", 2, 3, 3.1)]).ok)
        self.assertFalse(fenced_writes([write("b", 2, 1.0, 1.1), write("a", 1, 2.0, 2.1)]).ok)

    def test_fifo_needs_waiters_granted_in_the_order_they_came_unless_a_fault_reordered_them(self):
        in_order = [grant("a", 1, 1.0, 1.2, invoke=0.0), grant("b", 2, 1.5, 1.6, invoke=0.5)]
        self.assertTrue(fifo(in_order, []).ok)
        self.assertEqual(fifo(in_order, []).checked, 1)
        overtaken = [grant("a", 1, 2.0, 2.2, invoke=0.0), grant("b", 2, 1.0, 1.9, invoke=0.5)]
        verdict = fifo(overtaken, [])
        self.assertFalse(verdict.ok)
        self.assertIn("b (invoked 0.500) was granted at 1.000, before a, waiting since 0.000", verdict.violations[0])
        self.assertTrue(fifo(overtaken, [Outage("partition", "w0", 0.2, 0.4)]).ok)  # a's request held back
        self.assertFalse(fifo(overtaken, [Outage("clock-step +30s", "limiter", 0.2, 0.2)]).ok)  # no excuse
        near = [grant("a", 1, 2.0, 2.2, invoke=0.0), grant("b", 2, 1.0, 1.9, invoke=0.1)]  # came at once
        self.assertTrue(fifo(near, []).ok)

    def test_bucket_counts_only_grants_surely_inside_a_window(self):
        def spend(permits, invoke, complete):
            return Op("w", "rate", "tokens", invoke, complete, True, permits=permits)
        steady = [spend(10, 0.0, 0.01)] + [spend(1, 0.1 * i, 0.1 * i + 0.01) for i in range(1, 20)]
        self.assertTrue(bucket(steady, {"tokens": (10.0, 10)}).ok)
        second_burst = [spend(10, 0.0, 0.01), spend(10, 0.2, 0.21)]  # a restart that forgot the first burst
        verdict = bucket(second_burst, {"tokens": (10.0, 10)})
        self.assertFalse(verdict.ok)
        self.assertIn("20 tokens", verdict.violations[0])

    def test_sandbox_properties_name_each_violation(self):
        def call(kind, sandbox, invoke, complete, ok=True, error="", owner="alice", held_until=10.0, seen=(),
                 bound=5.0, process="e0"):
            return Op(process, kind, "e2b", invoke, complete, ok, lease_id=sandbox, held_until=held_until,
                      error=error, owner=owner, bound=bound, seen=list(seen))

        def verdicts(ops, outages=()):
            return {v.name: v for v in sandbox_verdicts(ops, list(outages))}

        good = [call("create", "s1", 0.0, 0.1), call("run", "s1", 0.2, 0.3), call("list", "s1", 0.4, 0.5, seen=["s1"]),
                call("fork", "s1", 0.6, 0.7, seen=["s2", "s3"]), call("kill", "s1", 0.8, 0.9),
                call("run", "s1", 1.0, 1.1, False, "SandboxNotFoundError: gone", held_until=0.8)]  # after its kill
        self.assertTrue(all(v.ok for v in verdicts(good).values()), verdicts(good))

        twice = verdicts([call("create", "s1", 0.0, 0.1), call("create", "s1", 1.0, 1.1, process="e1", owner="bob")])
        self.assertIn("s1 answered to e1 (bob)", twice["one-owner"].violations[0])
        peek = verdicts([call("create", "s1", 0.0, 0.1), call("list", "s9", 1.0, 1.1, owner="bob", seen=["s1"])])
        self.assertIn("bob's listing at 1.100 shows s1, made by alice", peek["one-owner"].violations[0])

        gone = [call("create", "s1", 0.0, 0.1), call("run", "s1", 1.0, 1.1, False, "SandboxNotFoundError: gone")]
        self.assertIn("its lease surely alive until 10.000", verdicts(gone)["lease-lives"].violations[0])
        self.assertTrue(verdicts(gone, [Outage("kill", "sandbox-host", 0.5, 0.6)])["lease-lives"].ok)
        killed = [call("create", "s1", 0.0, 0.1), call("run", "s1", 1.0, 1.1, False, "CommandExitError: killed")]
        self.assertFalse(verdicts(killed)["lease-lives"].ok)

        wrong = verdicts([call("run", "s1", 0.0, 0.1, False, "wrong: stdout 'x'")])
        self.assertIn("wrong: stdout", wrong["answers"].violations[0])
        hung = verdicts([call("run", "s1", 0.0, 30.0, False, "TimeoutError: late", bound=5.0)])
        self.assertIn("took 30.0s (bound 5s)", hung["no-hang"].violations[0])

        foreign = verdicts([call("run", "s1", 0.0, 0.1, False, "foreign TypeError: x is undefined")])
        self.assertFalse(foreign["clean-errors"].ok)
        cut = [call("run", "s1", 5.0, 5.1, False, "network: fetch failed")]
        self.assertFalse(verdicts(cut)["clean-errors"].ok)  # no replica was down
        self.assertTrue(verdicts(cut, [Outage("kill", "sandbox-api-0", 4.5, 4.6)])["clean-errors"].ok)

    def test_one_result_per_episode_and_every_episode_of_a_consumed_batch(self):
        def result(episode, attempt, reward):
            return Op("t0", "result", "episode", 0.0, 1.0, True, token=attempt, lease_id=episode, owner="b1",
                      value=reward)

        def batch(seen, expected=2, error=""):
            return Op("t0", "batch", "episode", 0.0, 2.0, not error, owner="b1", permits=expected, seen=seen,
                      error=error)
        again = [result("e1", 1, 1.0), result("e1", 1, 1.0), result("e2", 2, 0.0), batch(["e1", "e1", "e2"])]
        self.assertTrue(one_result(again).ok)  # delivered again, unacknowledged when the stream broke: the same
        other_run = one_result([result("e1", 1, 1.0), result("e1", 2, 0.0)])
        self.assertIn("episode e1 came as 2 different results", other_run.violations[0])
        missing = one_result([result("e1", 1, 1.0), batch(["e1"], error="")])
        self.assertIn("1 of its 2 episodes came", missing.violations[0])
        self.assertTrue(one_result([batch(["e1"], error="stopped before the batch ended")]).ok)

    def test_a_history_survives_a_torn_last_line(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "h.jsonl")
            h = History(path)
            h.record(grant("a", 1, 1.0, 2.0))
            h.close()
            with open(path, "a") as f:
                f.write('{"process": "a", "kind": "acq')
            self.assertEqual(len(read([path])), 1)


if __name__ == "__main__":
    unittest.main(verbosity=2)
