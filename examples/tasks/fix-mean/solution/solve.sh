#!/usr/bin/env bash
# The reference fix: divide by the count, and refuse an empty list.
set -euo pipefail
python3 - <<'PY'
import re
source = open("stats.py").read()
fixed = source.replace(
    '    total = 0\n',
    '    if not values:\n        raise ValueError("mean of an empty list")\n    total = 0\n', 1)
fixed = fixed.replace("return total / (len(values) - 1)", "return total / len(values)")
open("stats.py", "w").write(fixed)
PY
