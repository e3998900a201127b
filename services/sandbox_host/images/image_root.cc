#include "services/sandbox_host/images/image_root.h"

#include <fcntl.h>
#include <linux/mount.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "libs/core/status_macros.h"
#include "services/sandbox_host/linux/namespaces.h"
#include "spdlog/spdlog.h"

namespace corral::sandbox {
namespace {

// Steps the helper reports when one fails.
enum Step : int {
  kUnshare = 1,
  kPrivate,
  kUpper,
  kIdmap,
  kOverlay,
  kProc,
  kDev,
  kTmp,
  kPivot,
  kLoopback,
  kOpen,
  kHeld,
  kCarry
};

const char* StepName(int step) {
  switch (step) {
    case kUnshare: return "unshare";
    case kPrivate: return "making mounts private";
    case kUpper: return "making the upper layer";
    case kIdmap: return "idmapping a layer";
    case kOverlay: return "mounting the overlay";
    case kProc: return "mounting /proc";
    case kDev: return "making /dev";
    case kTmp: return "mounting /tmp";
    case kPivot: return "pivot_root";
    case kLoopback: return "bringing up loopback";
    case kOpen: return "opening the namespace";
    case kHeld: return "taking a fork layer from the holder namespace";
    case kCarry: return "carrying /tmp over from the previous generation";
    default: return "setup";
  }
}

struct Device {
  const char* name;
  unsigned major, minor;
};
constexpr Device kDevices[] = {{"null", 1, 3},   {"zero", 1, 5},    {"full", 1, 7},
                               {"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0}};

// Everything the helper needs, prepared before the clone (it runs system calls only, no allocation); it writes
// its outcome back (it shares the caller's memory and descriptor table).
struct HelperArgs {
  const ImageRootSpec* spec;
  std::vector<std::string> staged;        // where each idmapped layer is attached, top first
  std::vector<std::string> held_sources;  // each held fork layer's files (dir/upper), in the holder namespace
  std::vector<std::string> held_staged;   // where each is attached, top first
  std::vector<int> held_trees;            // their clones, taken in the holder namespace
  int tmp_tree = -1, shm_tree = -1;       // /tmp and /dev/shm carried over
  std::string root, overlay_options, proc, dev, tmp, tmp_options, shm, upper, work, rw_options;
  std::vector<std::string> device_paths;
  int step = -1;
  int err = 0;
  int mnt_fd = -1, net_fd = -1, root_fd = -1, rw_tree_fd = -1;
};

int HelperMain(void* raw) {
  auto* a = static_cast<HelperArgs*>(raw);
  auto fail = [a](int step) {
    a->step = step;
    a->err = errno;
    return 1;
  };
  // Mounts of other namespaces can only be cloned from inside them: the held layers from the holder's, /tmp and
  // /dev/shm from the previous generation's. Back in the host's namespace before the unshare, so the new
  // namespace copies the host's mounts and nothing of theirs.
  const ImageRootSpec& spec = *a->spec;
  if (!spec.held_layers.empty()) {
    if (setns(spec.holder_ns_fd, CLONE_NEWNS) != 0) return fail(kHeld);
    for (size_t i = 0; i < spec.held_layers.size(); ++i) {
      if ((a->held_trees[i] = CloneTree(a->held_sources[i].c_str())) < 0) return fail(kHeld);
    }
  }
  if (spec.carry_ns_fd >= 0) {
    if (setns(spec.carry_ns_fd, CLONE_NEWNS) != 0 || (a->tmp_tree = CloneTree("/tmp")) < 0 ||
        (a->shm_tree = CloneTree("/dev/shm")) < 0) {
      return fail(kCarry);
    }
  }
  if ((!spec.held_layers.empty() || spec.carry_ns_fd >= 0) && setns(spec.host_ns_fd, CLONE_NEWNS) != 0)
    return fail(kHeld);
  if (unshare(CLONE_NEWNS | (a->spec->private_network ? CLONE_NEWNET : 0)) != 0) return fail(kUnshare);
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return fail(kPrivate);
  if (spec.rw_tmpfs_bytes > 0 &&
      mount("tmpfs", spec.rw_dir.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, a->rw_options.c_str()) != 0) {
    return fail(kUpper);
  }
  if ((mkdir(a->upper.c_str(), 0755) != 0 && errno != EEXIST) || chmod(a->upper.c_str(), 0755) != 0 ||
      (spec.root_owner >= 0 &&
       chown(a->upper.c_str(), static_cast<uid_t>(spec.root_owner), static_cast<gid_t>(spec.root_owner)) != 0) ||
      (mkdir(a->work.c_str(), 0700) != 0 && errno != EEXIST)) {
    return fail(kUpper);
  }
  if (spec.rw_tmpfs_bytes > 0 && (a->rw_tree_fd = CloneTree(spec.rw_dir.c_str())) < 0) return fail(kUpper);
  for (size_t i = 0; i < a->held_staged.size(); ++i) {
    const int tree = a->held_trees[i];
    a->held_trees[i] = -1;
    if (!AttachTree(tree, spec.held_layers[i].userns_fd, a->held_staged[i].c_str())) return fail(kHeld);
  }
  for (size_t i = 0; i < a->staged.size(); ++i) {
    const int tree = CloneTree(a->spec->lower_dirs[i].c_str());
    if (!AttachTree(tree, a->spec->userns_fd, a->staged[i].c_str())) return fail(kIdmap);
  }
  if (mount("overlay", a->root.c_str(), "overlay", MS_NOSUID | MS_NODEV, a->overlay_options.c_str()) != 0) {
    return fail(kOverlay);
  }
  mkdir(a->proc.c_str(), 0555);  // an image without them still gets them (in its upper layer)
  mkdir(a->dev.c_str(), 0755);
  mkdir(a->tmp.c_str(), 01777);
  if (mount("proc", a->proc.c_str(), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=invisible") != 0) {
    return fail(kProc);
  }
  // A minimal /dev of its own: the character devices every program expects, a private shm.
  if (mount("tmpfs", a->dev.c_str(), "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=755,size=1m") != 0) return fail(kDev);
  for (size_t i = 0; i < a->device_paths.size(); ++i) {
    if (mknod(a->device_paths[i].c_str(), S_IFCHR | 0666, makedev(kDevices[i].major, kDevices[i].minor)) != 0 ||
        chmod(a->device_paths[i].c_str(), 0666) != 0) {
      return fail(kDev);
    }
  }
  if (mkdir(a->shm.c_str(), 01777) != 0) return fail(kDev);
  if (a->shm_tree >= 0) {
    const int tree = a->shm_tree;
    a->shm_tree = -1;
    if (!MoveTree(tree, a->shm.c_str())) return fail(kCarry);
  } else if (mount("tmpfs", a->shm.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, a->tmp_options.c_str()) != 0) {
    return fail(kDev);
  }
  if (a->tmp_tree >= 0) {
    const int tree = a->tmp_tree;
    a->tmp_tree = -1;
    if (!MoveTree(tree, a->tmp.c_str())) return fail(kCarry);
  } else if (mount("tmpfs", a->tmp.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, a->tmp_options.c_str()) != 0) {
    return fail(kTmp);
  }
  if (chdir(a->root.c_str()) != 0 || syscall(SYS_pivot_root, ".", ".") != 0 || umount2(".", MNT_DETACH) != 0 ||
      chdir("/") != 0) {
    return fail(kPivot);
  }
  if (a->spec->private_network) {
    if (!BringUpLoopback()) return fail(kLoopback);
    if ((a->net_fd = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC)) < 0) return fail(kOpen);
  }
  if ((a->mnt_fd = open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC)) < 0) return fail(kOpen);
  if ((a->root_fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) return fail(kOpen);
  a->step = 0;
  return 0;
}

}  // namespace

absl::StatusOr<SandboxUserNamespace> CreateSandboxUserNamespace(uid_t pool, uid_t image_uid, gid_t image_gid) {
  // setgroups is allowed (su and login set a user's groups): every gid it can name is the sandbox's own.
  auto wide = CreateUserNamespace(SandboxIdMap(pool, image_uid), SandboxIdMap(pool, image_gid), true);
  if (wide.ok()) return SandboxUserNamespace{*std::move(wide), SubIdBase(pool).has_value()};
  static std::once_flag logged;
  std::call_once(logged, [&] {
    spdlog::warn(
        "image sandboxes get one id each (their image's user): the kernel refused a block of {} ids "
        "for pool uid {} ({}); root inside, useradd and chown to other users are refused",
        kSubIds, pool, std::string(wide.status().message()));
  });
  CORRAL_ASSIGN_OR_RETURN(UniqueFd narrow, CreateUserNamespace(pool, pool, image_uid, image_gid));
  return SandboxUserNamespace{std::move(narrow), false};
}

bool CanUseImages(const std::string& dir) {
  auto userns = CreateUserNamespace(65534, 65534);
  if (!userns.ok()) return false;
  const int tree = static_cast<int>(syscall(SYS_open_tree, AT_FDCWD, dir.c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC));
  if (tree < 0) return false;
  struct mount_attr attr {};
  attr.attr_set = MOUNT_ATTR_IDMAP;
  attr.userns_fd = static_cast<uint64_t>(userns->get());
  const bool ok = syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH, &attr, sizeof attr) == 0;
  close(tree);  // a detached mount: gone with its descriptor
  return ok;
}

absl::StatusOr<ImageRoot> CreateImageRoot(const ImageRootSpec& spec) {
  if (spec.lower_dirs.empty()) return absl::InvalidArgumentError("an image root needs at least one layer");
  HelperArgs args;
  args.spec = &spec;
  for (size_t i = 0; i < spec.lower_dirs.size(); ++i) {
    args.staged.push_back(absl::StrCat(spec.mount_point, "/l", i));
    if (mkdir(args.staged.back().c_str(), 0700) != 0 && errno != EEXIST) {
      return absl::InternalError(absl::StrCat("mkdir ", args.staged.back(), ": ", strerror(errno)));
    }
  }
  for (size_t i = 0; i < spec.held_layers.size(); ++i) {
    // The layer's upper directory itself is cloned: its tmpfs's root (root's, 0700) is never walked through an
    // idmapped mount, where root's own files are unmapped.
    args.held_sources.push_back(spec.held_layers[i].dir + "/upper");
    args.held_staged.push_back(absl::StrCat(spec.mount_point, "/h", i));
    if (mkdir(args.held_staged.back().c_str(), 0700) != 0 && errno != EEXIST) {
      return absl::InternalError(absl::StrCat("mkdir ", args.held_staged.back(), ": ", strerror(errno)));
    }
  }
  args.held_trees.assign(spec.held_layers.size(), -1);
  args.root = spec.mount_point + "/root";
  if (mkdir(args.root.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::InternalError(absl::StrCat("mkdir ", args.root, ": ", strerror(errno)));
  }
  args.upper = spec.rw_dir + "/upper";
  args.work = spec.rw_dir + "/work";
  args.rw_options = absl::StrCat("mode=0700,size=", spec.rw_tmpfs_bytes);
  std::vector<std::string> lowers = args.held_staged;
  lowers.insert(lowers.end(), args.staged.begin(), args.staged.end());
  args.overlay_options = absl::StrCat("lowerdir=", absl::StrJoin(lowers, ":"), ",upperdir=", args.upper,
                                      ",workdir=", args.work, ",volatile");
  if (args.overlay_options.size() >= 4000) {
    return absl::InvalidArgumentError(absl::StrCat("the image has too many layers (", spec.lower_dirs.size(), ")"));
  }
  args.proc = args.root + "/proc";
  args.dev = args.root + "/dev";
  args.tmp = args.root + "/tmp";
  args.shm = args.dev + "/shm";
  args.tmp_options = absl::StrCat("mode=1777,uid=", spec.uid, ",gid=", spec.gid);
  if (spec.rw_tmpfs_bytes > 0) absl::StrAppend(&args.tmp_options, ",size=", spec.rw_tmpfs_bytes);
  for (const Device& d : kDevices) args.device_paths.push_back(absl::StrCat(args.dev, "/", d.name));
  if (absl::Status s = RunVforkHelper(HelperMain, &args); !s.ok()) return s;
  // Clones a failed helper did not attach.
  for (int fd : args.held_trees) {
    if (fd >= 0) close(fd);
  }
  if (args.tmp_tree >= 0) close(args.tmp_tree);
  if (args.shm_tree >= 0) close(args.shm_tree);
  ImageRoot out;
  out.mnt.Reset(args.mnt_fd);
  out.net.Reset(args.net_fd);
  out.root.Reset(args.root_fd);
  out.rw_tree.Reset(args.rw_tree_fd);
  if (args.step != 0) {
    return absl::InternalError(
        absl::StrCat("creating the image root failed at ", StepName(args.step), ": ", strerror(args.err)));
  }
  return out;
}

}  // namespace corral::sandbox
