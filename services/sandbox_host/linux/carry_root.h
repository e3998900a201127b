// The view a fork-ready process of a sandbox on the host's filesystem lives in: a root of its own (a small tmpfs)
// holding the host's system directories read-only, the sandbox's /proc and devices, and its home, /tmp and task
// paths as they are in the sandbox's mount namespace. Its Landlock rules name that root only: whatever a fork
// later mounts over those places in a copy of the view (a child's files, the parent's next generation) is
// beneath a directory the rules cover. Rules on the places themselves would not follow: Landlock skips a
// mount's mount point when it walks up a path.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "libs/core/unique_fd.h"

namespace corral::sandbox {

struct CarryRoot {
  UniqueFd mnt;   // the mount namespace
  UniqueFd root;  // its root directory (O_PATH), for the Landlock rule
};

// Made from `sandbox_mnt_fd` (the sandbox's mount namespace): its places `writable` (the home, /tmp, task paths,
// as its processes see them) bound in read-write, the host's system directories (those of `read_only` that exist:
// a symbolic link is copied as one) read-only, its /proc read-only, the usual devices. `staging`: an empty
// directory, where the root is assembled (in the new namespace only). INTERNAL naming the step that failed.
absl::StatusOr<CarryRoot> CreateCarryRoot(int sandbox_mnt_fd, const std::string& staging,
                                          const std::vector<std::string>& writable,
                                          const std::vector<std::string>& read_only);

}  // namespace corral::sandbox
