#include "services/sandbox_host/fork/fork_layers.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "libs/core/status_macros.h"
#include "services/sandbox_host/images/image_root.h"
#include "services/sandbox_host/linux/namespaces.h"
#include "services/sandbox_host/linux/tree_copy.h"
#include "spdlog/spdlog.h"

namespace corral::sandbox {

namespace fs = std::filesystem;

namespace {

absl::Status Errno(const std::string& what) { return absl::InternalError(absl::StrCat(what, ": ", strerror(errno))); }

std::atomic<uint64_t> next_layer{0};

// A short helper in the holder mount namespace (RunVforkHelper: system calls only).
struct HolderArgs {
  int holder = -1;
  const char* path = nullptr;
  int attach = -1;      // a detached mount to attach at `path` (the helper closes it)
  bool umount = false;  // or: unmount `path`
  int clone = -1;       // or: a detached clone of the mount at `path` (out)
  bool ok = false;
  int err = 0;
};

int HolderMain(void* raw) {
  auto* a = static_cast<HolderArgs*>(raw);
  a->ok = setns(a->holder, CLONE_NEWNS) == 0;
  if (!a->ok && a->attach >= 0) close(a->attach);
  if (a->ok && a->attach >= 0) {
    a->ok = MoveTree(a->attach, a->path);
  } else if (a->ok && a->umount) {
    a->ok = umount2(a->path, MNT_DETACH) == 0;
  } else if (a->ok) {
    a->ok = (a->clone = CloneTree(a->path)) >= 0;
  }
  a->err = a->ok ? 0 : errno;
  return 0;
}

bool RunInHolder(HolderArgs& args) {
  if (RunVforkHelper(HolderMain, &args).ok()) return args.ok;
  args.err = errno;
  if (args.attach >= 0) close(args.attach);  // the helper never ran
  return false;
}

int MakeHolder(void* raw) {
  int* out = static_cast<int*>(raw);
  if (unshare(CLONE_NEWNS) != 0 || mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return 1;
  *out = open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
  return 0;
}

}  // namespace

bool IsEmptyDirAt(int dirfd, const char* path) {
  const int fd = openat(dirfd, path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return false;
  DIR* d = fdopendir(fd);
  if (d == nullptr) {
    close(fd);
    return false;
  }
  bool empty = true;
  for (const dirent* e = readdir(d); e != nullptr && empty; e = readdir(d)) {
    empty = strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0;
  }
  closedir(d);
  return empty;
}

ForkLayer::~ForkLayer() {
  if (held_by != nullptr) held_by->Unmount(dir);
  std::error_code ec;
  fs::remove_all(dir, ec);  // never follows symlinks
  if (ec) spdlog::warn("removing layer {}: {}", dir, ec.message());
}

std::vector<const ForkLayer*> LayersOf(const LayerStack& top) {
  std::vector<const ForkLayer*> out;
  for (const ForkLayer* l = top.get(); l != nullptr; l = l->below.get()) out.push_back(l);
  return out;
}

int64_t SharedLayerBytes(const LayerStack& top) {
  int64_t total = 0;
  for (const ForkLayer* layer : LayersOf(top)) {
    int64_t bytes = layer->bytes.load();
    if (bytes < 0 && layer->held_by == nullptr) {
      UniqueFd dir(open(layer->dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      absl::StatusOr<uint64_t> walked = dir.valid() ? TreeBytes(dir.get()) : absl::InternalError("cannot open");
      if (walked.ok()) layer->bytes = bytes = static_cast<int64_t>(*walked);
    }
    if (bytes < 0) return -1;
    total += bytes;
  }
  return total;
}

absl::StatusOr<std::vector<LayerMount>> LayerMounts(const LayerStack& top, uid_t uid,
                                                    std::map<uid_t, UniqueFd>& userns) {
  std::vector<LayerMount> out;
  for (const ForkLayer* layer : LayersOf(top)) {
    if (layer->owner != uid && !userns.contains(layer->owner)) {
      // The owner's block too, where both have one (an image sandbox's root and users wrote there); one id
      // where the kernel refuses the block.
      const IdMap map = OwnerIdMap(layer->owner, uid);
      auto ns = CreateUserNamespace(map, map);
      if (!ns.ok() && map.size() > 1) ns = CreateUserNamespace(uid, uid, layer->owner, layer->owner);
      if (!ns.ok()) return ns.status();
      userns[layer->owner] = *std::move(ns);
    }
    out.push_back({layer->dir, layer->owner != uid ? userns.at(layer->owner).get() : -1});
  }
  return out;
}

absl::Status MakeUpper(const std::string& rw_dir, uid_t owner) {
  if (mkdir(rw_dir.c_str(), 0700) != 0 && errno != EEXIST) return Errno("mkdir " + rw_dir);
  const std::string upper = rw_dir + "/upper", work = rw_dir + "/work";
  if (mkdir(upper.c_str(), 0700) != 0 || chown(upper.c_str(), owner, owner) != 0) return Errno("mkdir " + upper);
  if (mkdir(work.c_str(), 0700) != 0) return Errno("mkdir " + work);
  return absl::OkStatus();
}

ForkLayers::ForkLayers(std::string root) : dir_(root + "/forks"), staging_(root + "/mnt") {
  std::error_code ec;
  const bool leftovers = fs::exists(dir_, ec) && !fs::is_empty(dir_, ec);
  fs::remove_all(dir_, ec);
  if (leftovers) spdlog::info("removed the fork layers a previous run left in {}", dir_);
  fs::create_directories(dir_, ec);
  chmod(dir_.c_str(), 0700);
  mkdir(staging_.c_str(), 0700);
  // The holder: a mount namespace no process lives in, where image sandboxes' frozen layers are mounted.
  host_.Reset(open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC));
  int holder = -1;
  if (host_.valid() && RunVforkHelper(MakeHolder, &holder).ok()) holder_.Reset(holder);
}

void ForkLayers::Unmount(const std::string& dir) const {
  HolderArgs args{.holder = holder_.get(), .path = dir.c_str(), .umount = true};
  if (!RunInHolder(args)) spdlog::warn("unmounting layer {}: {}", dir, strerror(args.err));
}

absl::StatusOr<LayerStack> ForkLayers::FreezeTree(const UniqueFd& rw_tree, uid_t owner, LayerStack below) {
  if (!holder_.valid()) return absl::FailedPreconditionError("this host has no holder mount namespace for forks");
  const std::string dir = NewDir();
  if (mkdir(dir.c_str(), 0700) != 0) return Errno("mkdir " + dir);
  const int attach = fcntl(rw_tree.get(), F_DUPFD_CLOEXEC, 0);  // consumed by the helper
  if (attach < 0) {
    rmdir(dir.c_str());
    return Errno("duplicating the upper layer's mount");
  }
  HolderArgs args{.holder = holder_.get(), .path = dir.c_str(), .attach = attach};
  if (!RunInHolder(args)) {
    rmdir(dir.c_str());
    return absl::InternalError(absl::StrCat("attaching the upper layer in the holder: ", strerror(args.err)));
  }
  auto layer = std::make_shared<ForkLayer>();
  layer->dir = dir;
  layer->owner = owner;
  layer->depth = below != nullptr ? below->depth + 1 : 1;
  layer->below = std::move(below);
  layer->held_by = this;
  // No host path reaches a held layer's files: its size is its tmpfs's now, when it stops changing.
  struct statfs fs {};
  if (fstatfs(rw_tree.get(), &fs) == 0) layer->bytes = static_cast<int64_t>((fs.f_blocks - fs.f_bfree) * fs.f_bsize);
  return LayerStack(std::move(layer));
}

std::string ForkLayers::NewDir() { return absl::StrCat(dir_, "/l", getpid(), "-", next_layer++); }

absl::StatusOr<std::string> ForkLayers::ReserveHomeDir() {
  const std::string dir = NewDir();
  if (mkdir(dir.c_str(), 0700) != 0) return Errno("mkdir " + dir);
  return dir;
}

absl::StatusOr<LayerStack> ForkLayers::FreezeHome(const std::string& home, uid_t owner, const std::string& premade) {
  std::string dir = premade;
  if (dir.empty()) {
    CORRAL_ASSIGN_OR_RETURN(dir, ReserveHomeDir());
  }
  if (absl::Status s = MakeUpper(dir + "/rw", owner); !s.ok()) {
    std::error_code ec;
    fs::remove_all(dir, ec);
    return s;
  }
  // The fresh directory takes the home's place; the home becomes the layer, at `dir`.
  if (renameat2(AT_FDCWD, home.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) != 0) {
    absl::Status s = Errno("exchanging " + home);
    std::error_code ec;
    fs::remove_all(dir, ec);
    return s;
  }
  auto layer = std::make_shared<ForkLayer>();
  layer->dir = dir;
  layer->owner = owner;
  return LayerStack(std::move(layer));
}

absl::StatusOr<LayerStack> ForkLayers::FreezeUpper(const std::string& rw_dir, uid_t owner, LayerStack below) {
  const std::string dir = NewDir();
  if (rename((rw_dir + "/upper").c_str(), dir.c_str()) != 0) return Errno("freezing " + rw_dir + "/upper");
  auto layer = std::make_shared<ForkLayer>();
  layer->dir = dir;
  layer->owner = owner;
  layer->depth = below != nullptr ? below->depth + 1 : 1;
  layer->below = std::move(below);
  LayerStack out(std::move(layer));
  // The old overlay (the parent's previous generation) still names the work directory: it is set aside, not
  // removed, until the new generation has taken over (ClearFrozenWork), or put back (PutBack).
  if (rename((rw_dir + "/work").c_str(), (rw_dir + "/work.frozen").c_str()) != 0) {
    absl::Status s = Errno("setting aside " + rw_dir + "/work");
    (void)PutBack(rw_dir, out);
    return s;
  }
  if (absl::Status s = MakeUpper(rw_dir, owner); !s.ok()) {
    (void)PutBack(rw_dir, out);
    return s;
  }
  return out;
}

void ForkLayers::ClearFrozenWork(const std::string& rw_dir) {
  std::error_code ec;
  fs::remove_all(rw_dir + "/work.frozen", ec);
  if (ec) spdlog::warn("clearing {}/work.frozen: {}", rw_dir, ec.message());
}

absl::Status ForkLayers::PutBack(const std::string& rw_dir, const LayerStack& layer) {
  // The layer's directory must outlive this: it is moved back, not removed (its destructor then finds nothing).
  const std::string dir = layer->dir;
  std::error_code ec;
  fs::remove_all(rw_dir + "/upper", ec);
  if (rename(dir.c_str(), (rw_dir + "/upper").c_str()) != 0) return Errno("putting back " + dir);
  // The work directory the parent's overlay still uses, when it was set aside.
  if (fs::exists(rw_dir + "/work.frozen", ec)) {
    fs::remove_all(rw_dir + "/work", ec);
    if (rename((rw_dir + "/work.frozen").c_str(), (rw_dir + "/work").c_str()) != 0) {
      return Errno("putting back " + rw_dir + "/work");
    }
  }
  return absl::OkStatus();
}

}  // namespace corral::sandbox
