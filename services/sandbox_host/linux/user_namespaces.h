// User namespaces made by the host (root): the maps of an image sandbox and of an idmapped layer, the family a
// fork-ready process lives in, and the namespace a carried copy of it moves to (fork_gate.h). Each is made by a
// short-lived holder process; the host writes its maps and keeps it alive by a descriptor. Thread-safe
// (functions only).
#pragma once

#include <sys/types.h>

#include "absl/status/statusor.h"
#include "libs/core/unique_fd.h"
#include "services/sandbox_host/linux/sub_ids.h"

namespace corral::sandbox {

// A user namespace with these id maps; setgroups denied unless `setgroups`. It is a child of the host's own user
// namespace, or of `parent_fd`'s when that is set (then the maps' outside ids are ids of that namespace).
absl::StatusOr<UniqueFd> CreateUserNamespace(const IdMap& uids, const IdMap& gids, bool setgroups = false,
                                             int parent_fd = -1);
// One mapping `inside_uid`/`inside_gid` (root by default: the image's user) to `uid`/`gid` outside, and nothing
// else.
absl::StatusOr<UniqueFd> CreateUserNamespace(uid_t uid, gid_t gid, uid_t inside_uid = 0, gid_t inside_gid = 0);

}  // namespace corral::sandbox
