#!/usr/bin/env python3
"""The fault checker on histories made by hand: each property passes a correct history and names what is wrong in
a history that breaks it."""
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from history import History, Op, bucket, fenced_writes, fencing_order, mutual_exclusion, read  # noqa: E402


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

    def test_bucket_counts_only_grants_surely_inside_a_window(self):
        def spend(permits, invoke, complete):
            return Op("w", "rate", "tokens", invoke, complete, True, permits=permits)
        steady = [spend(10, 0.0, 0.01)] + [spend(1, 0.1 * i, 0.1 * i + 0.01) for i in range(1, 20)]
        self.assertTrue(bucket(steady, {"tokens": (10.0, 10)}).ok)
        second_burst = [spend(10, 0.0, 0.01), spend(10, 0.2, 0.21)]  # a restart that forgot the first burst
        verdict = bucket(second_burst, {"tokens": (10.0, 10)})
        self.assertFalse(verdict.ok)
        self.assertIn("20 tokens", verdict.violations[0])

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
