// A block of uids reserved for one test process: ctest runs test cases in parallel, and sandbox tests kill
// every process of their uids, so two tests must never share one. The reservation is an flock on a file per
// block, held until the object is destroyed (or the process dies).
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
