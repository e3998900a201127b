// Blocks of a numeric range reserved across processes on one machine (sandbox uids: a test's, a `corral up`
// cluster's): one lock file per block, `<prefix><first>.lock`, held with an exclusive flock while the returned
// descriptor is open (a process that dies lets go of it). Every user of a range must use the same block size —
// blocks are named by their first number, so two sizes over one range would overlap unseen.
#pragma once

#include <fcntl.h>
#include <sys/file.h>

#include <cstdint>
#include <optional>
#include <string>

#include "libs/core/unique_fd.h"

namespace corral {

struct LockedBlock {
  UniqueFd lock;
  uint32_t first = 0;
};

// The first block of `size` at or above `first` (blocks `size` apart, ending at or below `last`) that no other
// process holds; nullopt when every one is held.
inline std::optional<LockedBlock> LockFreeBlock(const std::string& prefix, uint32_t first, uint32_t last,
                                                uint32_t size) {
  for (uint32_t base = first; base + size - 1 <= last; base += size) {
    const std::string path = prefix + std::to_string(base) + ".lock";
    UniqueFd fd(open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
    if (fd.valid() && flock(fd.get(), LOCK_EX | LOCK_NB) == 0) return LockedBlock{std::move(fd), base};
  }
  return std::nullopt;
}

}  // namespace corral
