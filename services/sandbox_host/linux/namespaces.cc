#include "services/sandbox_host/linux/namespaces.h"

#include <fcntl.h>
#include <linux/mount.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "libs/core/status_macros.h"

namespace corral::sandbox {
namespace {

// Steps the helper reports when one fails.
enum Step : int { kUnshare = 1, kPrivate, kLayer, kOverlay, kProc, kTmp, kTaskPath, kLoopback, kOpen };

const char* StepName(int step) {
  switch (step) {
    case kUnshare: return "unshare";
    case kPrivate: return "making mounts private";
    case kLayer: return "attaching a layer";
    case kOverlay: return "mounting the layered home";
    case kProc: return "mounting /proc";
    case kTmp: return "binding /tmp";
    case kTaskPath: return "binding a task path";
    case kLoopback: return "bringing up loopback";
    case kOpen: return "opening the namespaces";
    default: return "setup";
  }
}

// Everything the helper needs, prepared before the clone; the helper writes its outcome back into it.
struct HelperArgs {
  const char* tmp_source;
  std::vector<std::pair<std::string, std::string>>* binds;  // source in home → mount point
  bool private_network;
  // A layered home: each layer and where it is attached, the overlay's options, and the directories to open.
  const LayeredHome* layered = nullptr;
  std::vector<std::string> staged;
  std::string home, overlay_options;
  std::vector<std::string> write_roots;  // with `layered`: home, .tmp, task paths
  // Outcome (the helper shares the host's memory and descriptor table).
  int step = -1;  // 0 = ready
  int err = 0;
  int hidepid = 0;
  int mnt_fd = -1, net_fd = -1, proc_fd = -1, home_fd = -1;
  std::vector<int> write_fds;  // sized like write_roots before the clone
};

// Runs in a clone(CLONE_VM | CLONE_VFORK | CLONE_FILES) child: system calls only, no allocation. The
// descriptors it opens land in the host's table and keep the namespaces alive after it exits.
int HelperMain(void* raw) {
  auto* a = static_cast<HelperArgs*>(raw);
  auto fail = [a](int step) {
    a->step = step;
    a->err = errno;
    return 1;
  };
  if (unshare(CLONE_NEWNS | (a->private_network ? CLONE_NEWNET : 0)) != 0) return fail(kUnshare);
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return fail(kPrivate);
  if (a->layered != nullptr) {
    for (size_t i = 0; i < a->staged.size(); ++i) {
      const LayeredHome::Layer& layer = a->layered->layers[i];
      if (!AttachTree(CloneTree(layer.dir.c_str()), layer.userns_fd, a->staged[i].c_str())) return fail(kLayer);
    }
    // Over the directory that holds the upper layer: inside, the home is the overlay; the host still reaches
    // the upper layer by its path.
    if (mount("overlay", a->home.c_str(), "overlay", MS_NOSUID | MS_NODEV, a->overlay_options.c_str()) != 0) {
      return fail(kOverlay);
    }
  }
  a->hidepid = 1;
  const unsigned long proc_flags = MS_NOSUID | MS_NODEV | MS_NOEXEC;
  if (mount("proc", "/proc", "proc", proc_flags, "hidepid=invisible") != 0 &&
      mount("proc", "/proc", "proc", proc_flags, "hidepid=2") != 0) {
    a->hidepid = 0;
    if (mount("proc", "/proc", "proc", proc_flags, nullptr) != 0) return fail(kProc);
  }
  for (const auto& [source, target] : *a->binds) {
    if (mount(source.c_str(), target.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0) return fail(kTaskPath);
  }
  // Last: a home below /tmp would be hidden by this bind (the host refuses such a root).
  if (mount(a->tmp_source, "/tmp", nullptr, MS_BIND | MS_REC, nullptr) != 0) return fail(kTmp);
  if (a->private_network) {
    if (!BringUpLoopback()) return fail(kLoopback);
    if ((a->net_fd = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC)) < 0) return fail(kOpen);
  }
  if ((a->mnt_fd = open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC)) < 0) return fail(kOpen);
  // The sandbox's own /proc (its inodes differ from the host's), for Landlock rules.
  if ((a->proc_fd = open("/proc", O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0) return fail(kOpen);
  if (a->layered != nullptr) {
    if ((a->home_fd = open(a->home.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) return fail(kOpen);
    for (size_t i = 0; i < a->write_roots.size(); ++i) {
      if ((a->write_fds[i] = open(a->write_roots[i].c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0) return fail(kOpen);
    }
  }
  a->step = 0;
  return 0;
}

}  // namespace

bool BringUpLoopback() {
  const int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return false;
  ifreq ifr{};
  strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  bool ok = ioctl(s, SIOCGIFFLAGS, &ifr) == 0;
  ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP);
  ok = ok && ioctl(s, SIOCSIFFLAGS, &ifr) == 0;
  close(s);
  return ok;
}

bool CanUseMountNamespaces() {
  pid_t pid = fork();
  if (pid == 0) {
    // Create one, then join one (back into the original): setns into a mount namespace also needs
    // CAP_SYS_CHROOT, which a container may lack while it has CAP_SYS_ADMIN — every exec would then fail.
    const int original = open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
    _exit(original >= 0 && unshare(CLONE_NEWNS) == 0 && setns(original, CLONE_NEWNS) == 0 ? 0 : 1);
  }
  int status = 0;
  return pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

absl::Status RunVforkHelper(int (*fn)(void*), void* arg) {
  // Sharing memory and descriptors, the helper costs no copy of the host's address space (a fork of a large,
  // multi-threaded host took most of a create).
  constexpr size_t kStack = 64 * 1024;
  std::unique_ptr<char[]> stack(new char[kStack]);
  const pid_t pid = clone(fn, stack.get() + kStack, CLONE_VM | CLONE_VFORK | CLONE_FILES | SIGCHLD, arg);
  if (pid < 0) return absl::InternalError(absl::StrCat("clone: ", strerror(errno)));
  waitpid(pid, nullptr, 0);
  return absl::OkStatus();
}

namespace {

struct CloneArgs {
  int mnt_fd;
  const std::vector<std::string>* paths;
  std::vector<int>* trees;  // sized like paths
  size_t failed = SIZE_MAX;
  int err = 0;
};

int CloneTreesHelper(void* raw) {
  auto* a = static_cast<CloneArgs*>(raw);
  if (setns(a->mnt_fd, CLONE_NEWNS) != 0) {
    a->failed = 0;
    a->err = errno;
    return 1;
  }
  for (size_t i = 0; i < a->paths->size(); ++i) {
    (*a->trees)[i] = static_cast<int>(
        syscall(SYS_open_tree, AT_FDCWD, (*a->paths)[i].c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE));
    if ((*a->trees)[i] < 0) {
      a->failed = i;
      a->err = errno;
      return 1;
    }
  }
  return 0;
}

struct CarryNsArgs {
  int base_mnt_fd, userns_fd;
  const std::vector<int>* trees;
  const std::vector<std::string>* paths;
  int mnt_fd = -1;
  size_t failed = SIZE_MAX;  // the tree that could not be mounted; paths->size(): a namespace step
  int err = 0;
};

int CarryNsHelper(void* raw) {
  auto* a = static_cast<CarryNsArgs*>(raw);
  if (setns(a->base_mnt_fd, CLONE_NEWNS) != 0 || setns(a->userns_fd, CLONE_NEWUSER) != 0 || unshare(CLONE_NEWNS) != 0) {
    a->failed = a->paths->size();
    a->err = errno;
    return 1;
  }
  for (size_t i = 0; i < a->trees->size(); ++i) {
    if (syscall(SYS_move_mount, (*a->trees)[i], "", AT_FDCWD, (*a->paths)[i].c_str(), MOVE_MOUNT_F_EMPTY_PATH) != 0) {
      a->failed = i;
      a->err = errno;
      return 1;
    }
  }
  if ((a->mnt_fd = open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC)) < 0) {
    a->failed = a->paths->size();
    a->err = errno;
    return 1;
  }
  return 0;
}

}  // namespace

absl::StatusOr<std::vector<UniqueFd>> CloneTreesIn(int mnt_fd, const std::vector<std::string>& paths) {
  std::vector<int> trees(paths.size(), -1);
  CloneArgs args{mnt_fd, &paths, &trees};
  CORRAL_RETURN_IF_ERROR(RunVforkHelper(CloneTreesHelper, &args));
  std::vector<UniqueFd> out;
  for (int fd : trees) out.emplace_back(fd);  // in our table: the helper shares it
  if (args.failed != SIZE_MAX) {
    return absl::InternalError(
        absl::StrCat("cloning the mount at ", paths.empty() ? "" : paths[args.failed], ": ", strerror(args.err)));
  }
  return out;
}

absl::StatusOr<UniqueFd> CarryMountNamespace(int base_mnt_fd, int userns_fd, const std::vector<int>& trees,
                                             const std::vector<std::string>& paths) {
  if (trees.size() != paths.size()) return absl::InvalidArgumentError("one path per tree");
  CarryNsArgs args{base_mnt_fd, userns_fd, &trees, &paths};
  CORRAL_RETURN_IF_ERROR(RunVforkHelper(CarryNsHelper, &args));
  UniqueFd ns(args.mnt_fd);
  if (args.failed != SIZE_MAX) {
    return absl::InternalError(absl::StrCat(
        "making a carried process's mount namespace: ",
        args.failed < paths.size() ? absl::StrCat("mounting ", paths[args.failed], ": ") : "", strerror(args.err)));
  }
  return ns;
}

int CloneTree(const char* path) {
  return static_cast<int>(syscall(SYS_open_tree, AT_FDCWD, path, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC));
}

bool AttachTree(int tree, int userns_fd, const char* target) {
  if (tree < 0) return false;
  struct mount_attr attr {};
  attr.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
  if (userns_fd >= 0) {
    attr.attr_set |= MOUNT_ATTR_IDMAP;
    attr.userns_fd = static_cast<uint64_t>(userns_fd);
  }
  const bool ok = syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH, &attr, sizeof attr) == 0 &&
                  syscall(SYS_move_mount, tree, "", AT_FDCWD, target, MOVE_MOUNT_F_EMPTY_PATH) == 0;
  close(tree);
  return ok;
}

bool MoveTree(int tree, const char* target) {
  if (tree < 0) return false;
  const bool ok = syscall(SYS_move_mount, tree, "", AT_FDCWD, target, MOVE_MOUNT_F_EMPTY_PATH) == 0;
  close(tree);
  return ok;
}

absl::StatusOr<SandboxNamespaces> CreateNamespaces(const std::string& home, const std::vector<std::string>& task_paths,
                                                   bool private_network, const LayeredHome* layered) {
  // Everything the helper needs is prepared before the clone.
  const std::string tmp_source = home + "/.tmp";
  std::vector<std::pair<std::string, std::string>> binds;
  for (const std::string& p : task_paths) {
    std::error_code ec;
    std::filesystem::create_directories(p, ec);  // an empty mount point on the host (not a mount)
    binds.emplace_back(home + p, p);
  }
  HelperArgs args{.tmp_source = tmp_source.c_str(), .binds = &binds, .private_network = private_network};
  if (layered != nullptr) {
    args.layered = layered;
    args.home = home;
    std::vector<std::string> lowers;
    for (size_t i = 0; i < layered->layers.size(); ++i) {
      args.staged.push_back(absl::StrCat(layered->staging, "/l", i));
      if (mkdir(args.staged.back().c_str(), 0700) != 0 && errno != EEXIST) {
        return absl::InternalError(absl::StrCat("mkdir ", args.staged.back(), ": ", strerror(errno)));
      }
    }
    // redirect_dir: an inherited directory can be renamed (without it, rename(2) fails with EXDEV). volatile: the
    // upper layer is never synced (it is frozen as a layer or wiped, never mounted again).
    args.overlay_options = absl::StrCat("lowerdir=", absl::StrJoin(args.staged, ":"), ",upperdir=", layered->upper,
                                        ",workdir=", layered->work, ",redirect_dir=on,volatile");
    if (args.overlay_options.size() >= 4000) {
      return absl::FailedPreconditionError(absl::StrCat("too many layers (", layered->layers.size(), ")"));
    }
    args.write_roots.push_back(home);
    args.write_roots.push_back(tmp_source);
    for (const std::string& p : task_paths) args.write_roots.push_back(home + p);
    args.write_fds.assign(args.write_roots.size(), -1);
  }
  if (absl::Status s = RunVforkHelper(HelperMain, &args); !s.ok()) return s;
  SandboxNamespaces ns;
  ns.mnt.Reset(args.mnt_fd);
  ns.net.Reset(args.net_fd);
  ns.proc_root.Reset(args.proc_fd);
  ns.home.Reset(args.home_fd);
  for (int fd : args.write_fds) ns.write_roots.emplace_back(fd);
  if (args.step != 0) {
    return absl::InternalError(
        absl::StrCat("creating the sandbox's namespaces failed at ", StepName(args.step), ": ", strerror(args.err)));
  }
  ns.hidepid = args.hidepid != 0;
  return ns;
}

}  // namespace corral::sandbox
