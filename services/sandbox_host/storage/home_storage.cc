// The two kinds of sandbox whose files are a home on the host: a plain directory, and the layered home a plain one
// becomes at its first fork (fork/fork_layers.h has the layer model).
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "libs/core/logging.h"
#include "libs/core/status_macros.h"
#include "services/sandbox_host/linux/tree_copy.h"
#include "services/sandbox_host/storage/storage.h"
#include "spdlog/spdlog.h"

namespace corral::sandbox {
namespace {

namespace fs = std::filesystem;

absl::Status CannotCreate(const std::string& what) {
  return absl::InternalError(absl::StrCat("cannot create ", what, ": ", strerror(errno)));
}

// The environment of a sandbox whose home is on the host. Its /tmp is its own only in a mount namespace; without
// one, temporary files go to the home's .tmp.
void AddHomeEnv(Sandbox& sb) {
  for (std::string kv : {std::string("PATH=/usr/local/bin:/usr/bin:/bin"), "HOME=" + sb.home,
                         "TMPDIR=" + (sb.protections.mount_namespace ? std::string("/tmp") : sb.home + "/.tmp"),
                         absl::StrCat("USER=sandbox-", sb.uid), std::string("LANG=C.UTF-8")}) {
    sb.base_env.push_back(std::move(kv));
  }
}

void TakeNamespaces(Sandbox& sb, SandboxNamespaces ns) {
  sb.namespaces = std::move(ns);
  Protections& p = sb.protections;
  p.mount_namespace = true;
  p.hidepid = sb.namespaces.hidepid;
  p.network_namespace = sb.namespaces.net.valid();
}

void ReadOnlyProc(const Sandbox& sb, LandlockPolicy& policy) {
  if (sb.namespaces.proc_root.valid()) policy.read_only_fds = {sb.namespaces.proc_root.get()};
}

// <root>/homes/<id>, with a template copied in and the task paths below it.
class HomeStorage final : public Storage {
 public:
  explicit HomeStorage(const StorageParts& parts) : parts_(parts) {}

  absl::Status Build(Sandbox& sb, const Origin& origin) override {
    for (const std::string& dir : {sb.home, sb.home + "/.tmp"}) {
      if (mkdir(dir.c_str(), 0700) != 0 || chown(dir.c_str(), sb.uid, sb.uid) != 0) return CannotCreate(dir);
    }
    sb.home_fd.Reset(open(sb.home.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (origin.tmpl != nullptr) CORRAL_RETURN_IF_ERROR(CopyTemplate(sb, origin.tmpl));
    // Task paths: created empty unless the template has them (as real directories, never links), with their
    // parents (/home/user needs home/ first).
    for (const auto& path : sb.spec.task_paths) {
      for (size_t end = path.find('/', 1);; end = path.find('/', end + 1)) {
        const std::string dir = sb.home + path.substr(0, end);
        struct stat st {};
        const bool is_dir = lstat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
        if (!is_dir && (mkdir(dir.c_str(), 0700) != 0 || chown(dir.c_str(), sb.uid, sb.uid) != 0)) {
          return CannotCreate("task path " + path);
        }
        if (end == std::string::npos) break;
      }
    }
    if (parts_.mount_namespaces) {
      CORRAL_ASSIGN_OR_RETURN(SandboxNamespaces ns,
                              CreateNamespaces(sb.home, sb.spec.task_paths, *sb.spec.network == NetworkPolicy::kNone));
      TakeNamespaces(sb, std::move(ns));
    }
    if (parts_.carry && parts_.layers != nullptr) {
      CORRAL_ASSIGN_OR_RETURN(sb.next_home, parts_.layers->ReserveHomeDir());
    }
    AddHomeEnv(sb);
    return absl::OkStatus();
  }

  // A fork-ready process started before the first fork lives on, carried, in the directory that takes the home's
  // place: its copies and itself mount their homes over it (root's and 0700 until then: nothing reaches it).
  void Confine(const Sandbox& sb, LandlockPolicy& policy) const override {
    policy.read_write = {sb.home, sb.home + "/.tmp"};
    if (!sb.next_home.empty()) policy.read_write.push_back(sb.next_home);
    for (const auto& path : sb.spec.task_paths) policy.read_write.push_back(sb.home + path);
    ReadOnlyProc(sb, policy);
  }

  absl::StatusOr<Origin> ForkOrigin(const Sandbox&) const override { return Origin{}; }

  // The whole home becomes the first layer (one rename); an empty directory takes its place.
  absl::StatusOr<Frozen> Freeze(Sandbox& sb) override {
    CORRAL_ASSIGN_OR_RETURN(LayerStack layer, parts_.layers->FreezeHome(sb.home, sb.uid, sb.next_home));
    sb.next_home.clear();  // it holds the home now; the path holds the layer
    return Frozen{std::move(layer), true};
  }

  void Retire(Sandbox&) override {}
  void Teardown(Sandbox& sb) override {
    if (!sb.next_home.empty()) rmdir(sb.next_home.c_str());
  }
  absl::StatusOr<uint64_t> OwnBytes(const Sandbox& sb) const override { return DirBytes(-1, sb.home); }

 private:
  absl::Status CopyTemplate(Sandbox& sb, const std::shared_ptr<const TemplateImage>& tmpl) {
    const absl::Time start = parts_.clock->Now();
    UniqueFd src(open(tmpl->dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!src.valid()) return absl::InternalError(absl::StrCat("cannot open template ", tmpl->key));
    CORRAL_RETURN_IF_ERROR(CopyTree(src.get(), sb.home_fd.get(), sb.uid, sb.uid, {".tmp"}).status());
    sb.template_image = tmpl;
    tmpl->sandboxes++;
    if (parts_.metrics) parts_.metrics->clone_seconds.Observe(absl::ToDoubleSeconds(parts_.clock->Now() - start));
    return absl::OkStatus();
  }

  const StorageParts parts_;
};

// The fork's layers under an upper layer of its own (<dir>/rw/upper), mounted over the home in its own mount
// namespace. A child's /tmp (the home's .tmp) is the parent's, below its own writes, unless it starts empty; the
// parent's new generation keeps its directory, upper layer and /tmp.
class LayeredHomeStorage final : public Storage {
 public:
  explicit LayeredHomeStorage(const StorageParts& parts) : parts_(parts) {}

  absl::Status Build(Sandbox& sb, const Origin& origin) override {
    const std::string rw = sb.dir + "/rw";
    if (origin.previous == nullptr) {  // a child: its own directory and upper layer
      if (mkdir(sb.dir.c_str(), 0700) != 0) return CannotCreate(sb.dir);
      CORRAL_RETURN_IF_ERROR(MakeUpper(rw, sb.uid));
      // An empty /tmp: an opaque directory hides the layers' .tmp.
      const std::string tmp = rw + "/upper/.tmp";
      if (origin.empty_tmp && (mkdir(tmp.c_str(), 0700) != 0 || chown(tmp.c_str(), sb.uid, sb.uid) != 0 ||
                               setxattr(tmp.c_str(), "trusted.overlay.opaque", "y", 1, 0) != 0)) {
        return CannotCreate(tmp);
      }
    }  // the parent: the freeze left an empty upper layer in its directory
    LayeredHome home{.upper = rw + "/upper", .work = rw + "/work", .staging = parts_.layers->staging()};
    std::map<uid_t, UniqueFd> userns;
    CORRAL_ASSIGN_OR_RETURN(std::vector<LayerMount> mounts, LayerMounts(origin.layers, sb.uid, userns));
    for (const LayerMount& m : mounts) home.layers.push_back({m.dir, m.userns_fd});
    CORRAL_ASSIGN_OR_RETURN(SandboxNamespaces ns, CreateNamespaces(sb.home, sb.spec.task_paths,
                                                                   *sb.spec.network == NetworkPolicy::kNone, &home));
    TakeNamespaces(sb, std::move(ns));
    sb.home_fd = std::move(sb.namespaces.home);
    sb.layers = origin.layers;
    AddHomeEnv(sb);
    return absl::OkStatus();
  }

  // The overlay's directories, as its processes see them: by descriptor.
  void Confine(const Sandbox& sb, LandlockPolicy& policy) const override {
    for (const UniqueFd& fd : sb.namespaces.write_roots) policy.read_write_fds.push_back(fd.get());
    ReadOnlyProc(sb, policy);
  }

  absl::StatusOr<Origin> ForkOrigin(const Sandbox&) const override { return Origin{}; }

  absl::StatusOr<Frozen> Freeze(Sandbox& sb) override {
    std::error_code ec;
    if (fs::is_empty(Rw(sb) + "/upper", ec) && !ec) return Frozen{sb.layers, false};
    CORRAL_ASSIGN_OR_RETURN(LayerStack layer, parts_.layers->FreezeUpper(Rw(sb), sb.uid, sb.layers));
    return Frozen{std::move(layer), true};
  }

  // The old overlay's work directory is not needed (no process or call can reach the old generation).
  void Retire(Sandbox& sb) override { ForkLayers::ClearFrozenWork(Rw(sb)); }
  void Teardown(Sandbox&) override {}
  absl::StatusOr<uint64_t> OwnBytes(const Sandbox& sb) const override { return DirBytes(-1, Rw(sb) + "/upper"); }

 private:
  static std::string Rw(const Sandbox& sb) { return sb.dir + "/rw"; }

  const StorageParts parts_;
};

}  // namespace

absl::StatusOr<uint64_t> DirBytes(int parent, const std::string& dir) {
  UniqueFd fd(openat(parent < 0 ? AT_FDCWD : parent, dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) return absl::InternalError(absl::StrCat("cannot open ", dir, " to measure it: ", strerror(errno)));
  return TreeBytes(fd.get());
}

std::unique_ptr<Storage> NewHomeStorage(const StorageParts& parts) { return std::make_unique<HomeStorage>(parts); }
std::unique_ptr<Storage> NewLayeredHomeStorage(const StorageParts& parts) {
  return std::make_unique<LayeredHomeStorage>(parts);
}

}  // namespace corral::sandbox
