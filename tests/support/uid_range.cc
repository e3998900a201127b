#include "tests/support/uid_range.h"

#include <fcntl.h>
#include <sys/file.h>

#include <string>

#include "gtest/gtest.h"

namespace corral::testing {

UidRange::UidRange(uid_t first, uid_t last, uid_t size) : size_(size) {
  for (uid_t base = first; base + size - 1 <= last; base += size) {
    const std::string path = "/var/tmp/corral-test-uids-" + std::to_string(base) + ".lock";
    UniqueFd fd(open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
    if (fd.valid() && flock(fd.get(), LOCK_EX | LOCK_NB) == 0) {
      lock_ = std::move(fd);
      first_ = base;
      return;
    }
  }
  ADD_FAILURE() << "no free block of " << size << " uids in [" << first << ", " << last << "]";
}

}  // namespace corral::testing
