// openat2(RESOLVE_IN_ROOT): opens a path below a directory descriptor resolving `..`, absolute paths and symlinks
// (final or intermediate) as if that directory were "/" — what reads an image's or a layer's own files safely.
#pragma once

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <string>

namespace corral::sandbox {

// `rel` relative to `root` ("" = the root itself); O_CLOEXEC is added. Magic links (/proc/…/fd) are refused and,
// with `same_mount`, so is crossing a mount point. Returns the descriptor, or -1 with errno.
inline int OpenInRoot(int root, const std::string& rel, uint64_t flags, bool same_mount = true) {
  struct open_how how {};
  how.flags = flags | O_CLOEXEC;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | (same_mount ? RESOLVE_NO_XDEV : 0);
  return static_cast<int>(syscall(SYS_openat2, root, rel.empty() ? "." : rel.c_str(), &how, sizeof how));
}

}  // namespace corral::sandbox
