// A block of uids reserved for one test process: ctest runs test cases in parallel, and sandbox tests kill
// every process of their uids, so two tests must never share one. The reservation is an flock on a file per
// block, held until the object is destroyed (or the process dies). Blocks are locked by their first uid, so every
// user of a range must ask for the same block size — two sizes over one range would overlap unseen. The ranges:
// 21000-28999 (size 2, sandbox unit tests), 29000-29999 (100, the image tests' hosts, tests/images/services.py),
// 30000-44999 (100, SandboxHostTest), 45000-59999 (4, sandbox host integration tests), 60000-64999 (64,
// scheduler integration tests). `corral up` locks a block of 250 in 20000-20999 (tools/corral/up_command.cc).
#pragma once

#include <sys/types.h>

#include "libs/core/unique_fd.h"

namespace corral::testing {

class UidRange {
 public:
  // The first free block of `size` uids at or above `first` (blocks are `size` apart, below `last`).
  // Aborts the test if none is free.
  UidRange(uid_t first, uid_t last, uid_t size);
  uid_t first() const { return first_; }
  uid_t last() const { return first_ + size_ - 1; }

 private:
  UniqueFd lock_;
  uid_t first_ = 0;
  uid_t size_ = 0;
};

}  // namespace corral::testing
