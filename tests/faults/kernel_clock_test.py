"""kernel_clock.c, the fault runs' fix for libfaketime's clock steps: a futex wait on the wall clock (Abseil's
timed waits, through glibc's syscall()) lasts as long as asked whatever the fake offset, where libfaketime alone
makes it last the offset longer (or end at once). A small C program waits 0.3 s so, under +3 s and -3 s.

    python3 tests/faults/kernel_clock_test.py
"""
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nemesis import SteppedClock, preload  # noqa: E402

WAITER = r"""
#include <linux/futex.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
int main(void) {
  int word = 0;
  struct timespec now, start, end;
  clock_gettime(CLOCK_REALTIME, &now);  /* as Abseil computes an absolute deadline: the (fake) wall clock */
  now.tv_nsec += 300000000L;
  if (now.tv_nsec >= 1000000000L) { now.tv_sec += 1; now.tv_nsec -= 1000000000L; }
  clock_gettime(CLOCK_MONOTONIC, &start);
  syscall(SYS_futex, &word, FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG | FUTEX_CLOCK_REALTIME, 0, &now, NULL,
          FUTEX_BITSET_MATCH_ANY);
  clock_gettime(CLOCK_MONOTONIC, &end);
  printf("%.3f\n", (end.tv_sec - start.tv_sec) + (end.tv_nsec - start.tv_nsec) / 1e9);
  return 0;
}
"""


class KernelClockTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="corral-kernel-clock-")
        self.waiter = os.path.join(self.dir, "waiter")
        with open(self.waiter + ".c", "w") as f:
            f.write(WAITER)
        if subprocess.run(["cc", "-O1", "-o", self.waiter, self.waiter + ".c"]).returncode != 0:
            self.skipTest("no C compiler")

    def wait(self, clock, offset):
        clock.step(offset - clock.offset)
        out = subprocess.run([self.waiter], env=dict(os.environ, **clock.env()), capture_output=True, text=True,
                             check=True, timeout=30)
        return float(out.stdout)

    def test_a_wall_clock_wait_lasts_what_it_asks_under_either_step(self):
        alone = SteppedClock(os.path.join(self.dir, "alone"))
        if not alone.available:
            self.skipTest("no libfaketime")
        self.assertIsNotNone(preload("kernel_clock.c", self.dir))
        fixed = SteppedClock(os.path.join(self.dir, "fixed"), kernel_waits=True)
        self.assertGreater(self.wait(alone, 3), 3.0)  # libfaketime alone: the offset longer
        self.assertLess(self.wait(alone, -3), 0.1)    # or over at once
        for offset in (3, -3):
            self.assertAlmostEqual(self.wait(fixed, offset), 0.3, delta=0.2)


if __name__ == "__main__":
    result = unittest.main(exit=False).result
    sys.exit(77 if result.skipped and not result.failures and not result.errors else 0 if result.wasSuccessful()
             else 1)
