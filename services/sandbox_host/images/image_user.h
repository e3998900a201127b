// Who a sandbox made from an image runs as: the image config's User ("", "name", "uid", "name:group",
// "uid:gid"…) looked up in the image's own /etc/passwd and /etc/group, read from its unpacked layers (the top
// layer that has the file, or deletes it, decides) without following anything out of a layer. Needed before the
// sandbox's root exists: its user namespace maps that user. Plain C++. Thread-safe (functions only).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace corral::sandbox {

struct ImageUser {
  uid_t uid = 0;
  gid_t gid = 0;
  std::string name;  // from /etc/passwd; the number when it has no entry
  std::string home;  // from /etc/passwd; "/root" for root, else "/" when it has no entry
};

// As Docker and runc do: an empty user is root; a name must be in /etc/passwd (a group name in /etc/group); a
// number need not be (then its group is 0, its home "/"); the primary group comes from /etc/passwd unless
// given. INVALID_ARGUMENT naming the user or group the image does not define, or an id out of range.
// `layers`: the image's unpacked layer directories, top first.
absl::StatusOr<ImageUser> ResolveImageUser(const std::vector<std::string>& layers, const std::string& user);

// Who `user` (the same forms) is in a running sandbox whose root is `root_fd`: its /etc/passwd and /etc/group
// as its commands left them (a user `useradd` made is found). INVALID_ARGUMENT as above.
absl::StatusOr<ImageUser> ResolveUserInRoot(int root_fd, const std::string& user);

}  // namespace corral::sandbox
