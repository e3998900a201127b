#include "services/sandbox_host/linux/carry_root.h"

#include <fcntl.h>
#include <linux/mount.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "libs/core/status_macros.h"
#include "services/sandbox_host/linux/namespaces.h"

namespace corral::sandbox {
namespace {

constexpr const char* kDevices[] = {"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"};

// One step of the assembly, prepared by the host (the helper makes system calls only).
struct Op {
  enum Kind { kMkdir, kSymlink, kBindReadOnly, kBindWritable, kFile } kind;
  std::string a, b;  // kMkdir: a; kSymlink: target a at b; binds: a onto b; kFile: a (an empty file)
};

struct Args {
  int sandbox_mnt;
  const char* staging;
  const std::vector<Op>* ops;
  int mnt_fd = -1, root_fd = -1;
  size_t failed = SIZE_MAX;  // the op; ops->size(): a namespace step
  int err = 0;
};

bool ReadOnly(const char* path) {
  struct mount_attr attr {};
  attr.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
  return syscall(SYS_mount_setattr, AT_FDCWD, path, AT_RECURSIVE, &attr, sizeof attr) == 0;
}

int Assemble(void* raw) {
  auto* a = static_cast<Args*>(raw);
  auto fail = [a](size_t step) {
    a->failed = step;
    a->err = errno;
    return 1;
  };
  const size_t ns_step = a->ops->size();
  if (setns(a->sandbox_mnt, CLONE_NEWNS) != 0 || unshare(CLONE_NEWNS) != 0 ||
      mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
      mount("tmpfs", a->staging, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m") != 0) {
    return fail(ns_step);
  }
  for (size_t i = 0; i < a->ops->size(); ++i) {
    const Op& op = (*a->ops)[i];
    bool ok = true;
    switch (op.kind) {
      case Op::kMkdir: ok = mkdir(op.a.c_str(), 0755) == 0 || errno == EEXIST; break;
      case Op::kSymlink: ok = symlink(op.a.c_str(), op.b.c_str()) == 0; break;
      case Op::kFile: {
        const int fd = open(op.a.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
        ok = fd >= 0 && close(fd) == 0;
        break;
      }
      case Op::kBindReadOnly:
        ok = mount(op.a.c_str(), op.b.c_str(), nullptr, MS_BIND | MS_REC, nullptr) == 0 && ReadOnly(op.b.c_str());
        break;
      case Op::kBindWritable: ok = mount(op.a.c_str(), op.b.c_str(), nullptr, MS_BIND | MS_REC, nullptr) == 0; break;
    }
    if (!ok) return fail(i);
  }
  if (chdir(a->staging) != 0 || syscall(SYS_pivot_root, ".", ".") != 0 || umount2(".", MNT_DETACH) != 0 ||
      chdir("/") != 0) {
    return fail(ns_step);
  }
  if ((a->root_fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0) return fail(ns_step);
  if ((a->mnt_fd = open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC)) < 0) return fail(ns_step);
  return 0;
}

// Every directory from the root down to `path` (inside the staging root), for mkdir in order.
void Parents(const std::string& staging, const std::string& path, std::vector<Op>& ops) {
  for (size_t end = path.find('/', 1);; end = path.find('/', end + 1)) {
    ops.push_back({Op::kMkdir, staging + path.substr(0, end), ""});
    if (end == std::string::npos) break;
  }
}

}  // namespace

absl::StatusOr<CarryRoot> CreateCarryRoot(int sandbox_mnt_fd, const std::string& staging,
                                          const std::vector<std::string>& writable,
                                          const std::vector<std::string>& read_only) {
  std::vector<Op> ops;
  for (const std::string& dir : read_only) {
    struct stat st {};
    if (lstat(dir.c_str(), &st) != 0) continue;
    if (S_ISLNK(st.st_mode)) {
      char target[4096];
      const ssize_t n = readlink(dir.c_str(), target, sizeof(target) - 1);
      if (n <= 0) continue;
      ops.push_back({Op::kSymlink, std::string(target, static_cast<size_t>(n)), staging + dir});
    } else if (S_ISDIR(st.st_mode)) {
      Parents(staging, dir, ops);
      ops.push_back({Op::kBindReadOnly, dir, staging + dir});
    }
  }
  Parents(staging, "/proc", ops);
  ops.push_back({Op::kBindReadOnly, "/proc", staging + "/proc"});
  Parents(staging, "/dev", ops);
  for (const char* device : kDevices) {
    ops.push_back({Op::kFile, staging + device, ""});
    ops.push_back({Op::kBindWritable, device, staging + device});
  }
  for (const std::string& dir : writable) {
    Parents(staging, dir, ops);
    ops.push_back({Op::kBindWritable, dir, staging + dir});
  }
  Args args{sandbox_mnt_fd, staging.c_str(), &ops};
  CORRAL_RETURN_IF_ERROR(RunVforkHelper(Assemble, &args));
  CarryRoot out{UniqueFd(args.mnt_fd), UniqueFd(args.root_fd)};
  if (args.failed != SIZE_MAX) {
    const std::string step = args.failed < ops.size()
                                 ? absl::StrCat(" at ", ops[args.failed].a, " ", ops[args.failed].b)
                                 : " making its namespace";
    return absl::InternalError(absl::StrCat("assembling a fork-ready process's root", step, ": ", strerror(args.err)));
  }
  return out;
}

}  // namespace corral::sandbox
