#!/usr/bin/env bash
# Reward 1 when every check passes, 0 otherwise (written to /logs/verifier/reward.txt, Harbor's convention).
mkdir -p /logs/verifier
if python3 - <<'PY'
import stats

assert stats.mean([2, 4, 6]) == 4, stats.mean([2, 4, 6])
assert stats.mean([5]) == 5
assert abs(stats.mean([0.5, 0.25]) - 0.375) < 1e-12
try:
    stats.mean([])
except ValueError:
    pass
else:
    raise AssertionError("mean([]) must raise ValueError")
assert stats.median([3, 1, 2]) == 2 and stats.median([4, 1, 3, 2]) == 2.5
print("all checks passed")
PY
then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
