// What lets a running process be carried into a fork's children, each copy becoming a process of its child
// sandbox (its uid, namespaces, cgroup) and never keeping a hold on the parent or a sibling.
//
// A forked process keeps its parent's credentials, and no process can change another's; so a copy must make the
// change itself, with a right its parent must never use. A fork-ready process therefore lives in the *family*
// user namespace (ids 0 … 65535 mapped to themselves, owned by the host's root) holding CAP_SYS_ADMIN and
// CAP_SYS_CHROOT there only (ambient: its children hold them too), and under a seccomp filter that sends every
// call that could use them — identity (set*id, setgroups), namespaces (setns, unshare, clone with CLONE_NEW*),
// mounts, chroot — to the host (transit_gate.h), which refuses them all except the steps of a carry it planned
// for that very process. clone3 is refused (ENOSYS: its flags cannot be read by the filter; the C library falls
// back to clone). Functions for the spawned child are async-signal-safe.
#pragma once

#include <sys/types.h>

#include "absl/status/statusor.h"
#include "libs/core/unique_fd.h"

namespace corral::sandbox {

// The family user namespace (ids 0 … 65535 mapped to themselves). It grants nothing by itself: ids change only
// through the gate.
absl::StatusOr<UniqueFd> CreateFamilyUserNamespace();
// The user namespace a copy becomes `uid`/`gid` in: inside the family's, mapping those ids only.
absl::StatusOr<UniqueFd> CreateCopyUserNamespace(int family_fd, uid_t uid, gid_t gid);
// A network namespace of a copy's own (network policy none): owned by its user namespace, so that it may join
// it, with loopback up.
absl::StatusOr<UniqueFd> CreateCopyNetworkNamespace(int copy_userns_fd);

// In a spawned child that joined the family namespace and set its uid/gid with PR_SET_KEEPCAPS: keeps
// CAP_SYS_ADMIN and CAP_SYS_CHROOT (effective, and ambient so that they survive exec) and nothing else.
// 0, or the errno of the step that failed.
int KeepForkCapabilities();
// In a spawned child, after PR_SET_NO_NEW_PRIVS: installs the gate's filter. Its listener (close-on-exec), or -1
// with errno set.
int InstallForkGate();

// One descriptor over a unix socket (SCM_RIGHTS). SendFd is async-signal-safe.
bool SendFd(int socket_fd, int fd);
absl::StatusOr<UniqueFd> ReceiveFd(int socket_fd);

}  // namespace corral::sandbox
