#include "tests/support/uid_range.h"

#include "gtest/gtest.h"
#include "libs/core/block_lock.h"

namespace corral::testing {

UidRange::UidRange(uid_t first, uid_t last, uid_t size) : size_(size) {
  std::optional<LockedBlock> block = LockFreeBlock("/var/tmp/corral-test-uids-", first, last, size);
  if (!block) {
    ADD_FAILURE() << "no free block of " << size << " uids in [" << first << ", " << last << "]";
    return;
  }
  lock_ = std::move(block->lock);
  first_ = block->first;
}

}  // namespace corral::testing
