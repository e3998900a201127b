// Two uids of their own per test process (TestUid() and TestUid() + 1): ctest runs test cases in parallel, and
// each sweeps its uids, so they are reserved through tests/support/uid_range.h.
#pragma once

#include <sys/types.h>

#include <optional>

#include "tests/support/uid_range.h"

namespace corral::sandbox {

inline uid_t TestUid() {
  static testing::UidRange range(21000, 28999, 2);  // held for the life of the test process
  return range.first();
}

}  // namespace corral::sandbox
